from .gpx_kernel import GPXKernel
from .partitioned_kernel import PartitionedKernel
from .ski_features import cover_grid, grid_features, grid_operator, supports_grid_features

__all__ = ["GPXKernel", "PartitionedKernel", "cover_grid", "grid_features", "grid_operator", "supports_grid_features"]
