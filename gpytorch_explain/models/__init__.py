"""GPX models: :class:`GPXModel` (exact) and :class:`VariationalGPXModel` (sparse variational), with GPX's
exact prediction strategy. The objective and the variational strategy live in :mod:`gpytorch_explain.mlls` and
:mod:`gpytorch_explain.variational`; they are re-exported here, where they were first published."""

from ..mlls import GPXVariationalELBO, gpx_expected_log_prob
from ..variational import GPXVariationalStrategy
from .gpx_model import GPXModel
from .gpx_prediction_strategy import GPXPredictionStrategy
from .variational_gpx_model import VariationalGPXModel

__all__ = [
    "GPXModel",
    "GPXPredictionStrategy",
    "GPXVariationalELBO",
    "GPXVariationalStrategy",
    "VariationalGPXModel",
    "gpx_expected_log_prob",
]
