#!/usr/bin/env python3
r"""Eval-mode prediction caches that follow the model's hyperparameters.

GPyTorch keeps an eval-mode ``prediction_strategy`` (mean cache, Cholesky, LOVE) after the first prediction and
does not notice later changes of ``likelihood.noise``, the outputscale, ... in eval mode: their setters copy into
``.data``, which leaves the parameters' ``_version`` unchanged, so a version check alone misses them. Attribution GPs
therefore keep a copy of every parameter and buffer on the strategy they used (:func:`tag_prediction_caches`) and
drop a strategy whose copy differs from the model's current state, or that carries none
(:func:`refresh_prediction_caches`); the strategy, with the attribution caches stored on it (Cholesky factor, mean
solve, SGPR conditioning), is rebuilt at the next use.
"""

from __future__ import annotations

import torch
from gpytorch.models import ExactGP
from torch import Tensor

__all__ = ["refresh_prediction_caches", "tag_prediction_caches"]

_STATE_ATTR = "_gpytorch_explain_state"


def _tracks_strategy(model) -> bool:
    from ..models import GPXModel

    return isinstance(model, ExactGP) and not isinstance(model, GPXModel)


def _model_state(model) -> list[tuple[str, Tensor]]:
    return [(n, t.detach()) for n, t in list(model.named_parameters()) + list(model.named_buffers())]


def _same_state(a: list[tuple[str, Tensor]], b: list[tuple[str, Tensor]]) -> bool:
    if len(a) != len(b):
        return False
    for (na, ta), (nb, tb) in zip(a, b, strict=True):
        if na != nb or ta.shape != tb.shape or not torch.equal(ta, tb):
            return False
    return True


def refresh_prediction_caches(model) -> None:
    r"""Drop the model's prediction caches when a parameter or buffer changed since they were built.

    GPyTorch keeps an eval-mode ``prediction_strategy`` (mean cache, Cholesky, LOVE) after the first prediction
    and does not notice later changes of ``likelihood.noise``, the outputscale, ... (their setters copy into
    ``.data``, which leaves ``_version`` unchanged), so values are compared: the strategy carries a copy of every
    parameter and buffer from when it was built here; a strategy without one (built by an earlier prediction)
    or with another state is rebuilt. The copies are cheap next to any attribution.
    """
    if not _tracks_strategy(model):
        return
    strategy = model.prediction_strategy
    if strategy is None:
        return
    tag = getattr(strategy, _STATE_ATTR, None)
    if tag is None or not _same_state(tag, _model_state(model)):
        model.prediction_strategy = None  # rebuilt, with our caches on it, at the next use


def tag_prediction_caches(model) -> None:
    """Store the model's current parameters and buffers on its prediction strategy (see the module docs)."""
    if not _tracks_strategy(model):
        return
    strategy = model.prediction_strategy
    if strategy is not None and getattr(strategy, _STATE_ATTR, None) is None:
        setattr(strategy, _STATE_ATTR, [(n, t.clone()) for n, t in _model_state(model)])
