from .gpx_model import GPXModel, GPXPredictionStrategy

__all__ = ["GPXModel", "GPXPredictionStrategy"]
