from .derived_kernel import DerivedKernel
from .gpx_kernel import GPXKernel
from .gradient_kernel import GradientKernel
from .integrated_gradient_kernel import IntegratedGradientKernel
from .partitioned_kernel import PartitionedKernel
from .ski_features import cover_grid, grid_features, grid_operator, supports_grid_features

__all__ = [
    "DerivedKernel",
    "GPXKernel",
    "GradientKernel",
    "IntegratedGradientKernel",
    "PartitionedKernel",
    "cover_grid",
    "grid_features",
    "grid_operator",
    "supports_grid_features",
]
