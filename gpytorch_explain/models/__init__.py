from .gpx_model import GPXModel, GPXPredictionStrategy
from .variational_gpx import GPXVariationalELBO, GPXVariationalStrategy, VariationalGPXModel, gpx_expected_log_prob

__all__ = [
    "GPXModel",
    "GPXPredictionStrategy",
    "GPXVariationalELBO",
    "GPXVariationalStrategy",
    "VariationalGPXModel",
    "gpx_expected_log_prob",
]
