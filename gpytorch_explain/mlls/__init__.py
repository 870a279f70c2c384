"""Objectives of GPX models: the tight variational ELBO and the inducing-point trace term."""

from .gpx_inducing_point_added_loss_term import GPXInducingPointAddedLossTerm
from .gpx_variational_elbo import GPXVariationalELBO, bernoulli_label_signs, gpx_expected_log_prob

__all__ = ["GPXInducingPointAddedLossTerm", "GPXVariationalELBO", "bernoulli_label_signs", "gpx_expected_log_prob"]
