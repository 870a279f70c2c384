from .gpx_kernel import GPXKernel

__all__ = ["GPXKernel"]
