#!/usr/bin/env python3
r"""Maximum-likelihood fit of a :class:`~gpytorch_explain.GPXModel` (L-BFGS or Adam)."""

from __future__ import annotations

import math
import warnings

import gpytorch
import torch
from gpytorch import settings as gsettings
from torch import Tensor

from ..errors import ModelStateError
from ..utils import dense_gaussian_nll
from .gpx_prediction_strategy import dense_limit

__all__ = ["fit_gpx"]


def fit_gpx(
    model,
    optimizer: str = "lbfgs",
    max_iter: int | None = None,
    lr: float | None = None,
    tolerance: float | None = None,
    progress: bool = False,
):
    r"""Maximise the log marginal likelihood of ``model``; see :meth:`GPXModel.fit` for the parameters.

    The progress bar counts optimiser iterations against ``max_iter`` (for L-BFGS, its outer iterations; the
    number of objective evaluations, line-search steps included, is shown beside it as ``evals``).
    ``model.fit_iterations`` and ``model.fit_evaluations`` hold both counts afterwards.
    """
    if model.train_inputs is None:
        raise ModelStateError("fit needs training data; this model has none.")
    optimizer = optimizer.lower()
    if optimizer not in ("lbfgs", "adam"):
        raise ValueError(f"optimizer must be 'lbfgs' or 'adam', got {optimizer!r}.")
    if max_iter is None:
        max_iter = 100 if optimizer == "lbfgs" else 200
    if int(max_iter) < 1:
        raise ValueError(f"max_iter must be a positive integer, got {max_iter}.")
    if lr is None:
        lr = 1.0 if optimizer == "lbfgs" else 0.05
    if tolerance is None:
        tolerance = min(1e-5, 1e-2 / max(model.train_targets.size(-1), 1))
    model.check_memory("GPX fit", training=True)
    model.train()
    model.likelihood.train()
    mll = gpytorch.mlls.ExactMarginalLogLikelihood(model.likelihood, model)
    params = [p for p in model.parameters() if p.requires_grad]
    inputs = model.train_inputs[0]
    history: list[float] = []
    model.fit_history = history  # filled as the fit goes (also when it is interrupted)

    from tqdm.auto import tqdm

    bar = tqdm(total=max_iter, desc=f"GPX fit ({optimizer})", unit="it", disable=not progress)
    chol = dense_limit()
    dense = model.train_targets.size(-1) <= chol and gsettings.observation_nan_policy.value() == "ignore"

    def loss_fn() -> Tensor:
        output = gpytorch.models.ExactGP.__call__(model, inputs)
        if dense:
            # the same objective as ExactMarginalLogLikelihood, with a closed-form gradient of the
            # Gaussian log density in the dense covariance (fewer O(n^3) passes per evaluation)
            marginal = model.likelihood(output)
            covar = marginal.lazy_covariance_matrix.to_dense()
            res = -dense_gaussian_nll(covar, model.train_targets - marginal.mean)
            res = mll._add_other_terms(res, ())
            return -res.div(model.train_targets.size(-1))
        with gsettings.max_cholesky_size(chol):
            return -mll(output, model.train_targets)

    def show(iterations: int) -> None:
        bar.n = min(iterations, max_iter)
        bar.set_postfix(loss=f"{history[-1]:.4f}", evals=len(history), refresh=False)
        bar.refresh()

    iterations = 0
    try:
        if optimizer == "lbfgs":
            opt = torch.optim.LBFGS(
                params,
                lr=lr,
                max_iter=max_iter,
                tolerance_grad=tolerance,
                tolerance_change=tolerance,
                history_size=20,
                line_search_fn="strong_wolfe",
            )
            state = opt.state[opt._params[0]]

            def closure():
                opt.zero_grad()
                loss = loss_fn()
                loss.backward()
                history.append(loss.item())
                # torch's L-BFGS counts an iteration before its line search evaluates the objective
                show(state.get("n_iter", 0))
                return loss

            opt.step(closure)
            iterations = int(state.get("n_iter", 0))
        else:
            opt = torch.optim.Adam(params, lr=lr)
            for _ in range(max_iter):
                opt.zero_grad()
                loss = loss_fn()
                loss.backward()
                opt.step()
                history.append(loss.item())
                iterations += 1
                show(iterations)
        if history:
            show(iterations)
    finally:
        bar.close()
    if history and not math.isfinite(history[-1]):
        warnings.warn("GPX fit ended with a non-finite loss; check the data scaling.", RuntimeWarning, stacklevel=3)
    model.fit_history = history
    model.fit_iterations = iterations
    model.fit_evaluations = len(history)
    model.eval()
    return model
