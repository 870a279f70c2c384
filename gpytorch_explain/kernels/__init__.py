from .gpx_kernel import GPXKernel
from .ski_features import grid_features, supports_grid_features

__all__ = ["GPXKernel", "grid_features", "supports_grid_features"]
