#!/usr/bin/env python3
"""Helpers around GPyTorch models."""

from __future__ import annotations

from collections.abc import Callable

from gpytorch.models import ExactGP
from gpytorch.models.exact_prediction_strategies import prediction_strategy

__all__ = ["ensure_prediction_strategy"]


def ensure_prediction_strategy(model: ExactGP, factory: Callable | None = None):
    """The model's prediction strategy, built from its training data if it has none yet.

    This is what ``ExactGP.__call__`` does on its first posterior call (``factory`` defaults to
    GPyTorch's ``prediction_strategy`` dispatcher), so later predictions reuse the same caches.
    """
    if model.prediction_strategy is None:
        train_inputs = list(model.train_inputs)
        train_prior = model._get_train_prior_distribution(train_inputs)
        model.prediction_strategy = (factory or prediction_strategy)(
            train_inputs=train_inputs,
            train_prior_dist=train_prior,
            train_labels=model.train_targets,
            likelihood=model.likelihood,
        )
    return model.prediction_strategy
