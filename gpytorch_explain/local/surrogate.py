#!/usr/bin/env python3
r"""The local GP surrogate: an ARD ``SingleTaskGP`` on box-standardised inputs, warm-started refits, closed-form LOO.

Inputs are standardised to the sampling box, :math:`u_i = (x_i - x_{0,i}) / (r\sigma_i)` (``r`` the
interval, so the box is :math:`[-1, 1]^d`), outputs to zero mean and unit variance. The kernel is an
ARD RBF kernel with a log-normal lengthscale prior (centred as BoTorch's dimension-scaled prior of
Hvarfner et al., shifted by :math:`\log 2` for the box of width 2, but narrower: log-std
:data:`DEFAULT_PRIOR_SCALE` = 1.0 instead of :math:`\sqrt 3`), which keeps :math:`1/\ell_i` stable with few
samples; the likelihood is BoTorch's Gaussian likelihood with a LogNormal(-4, 1) noise prior.

The signed attributions (gradient and integrated gradients at the instance) come from a second surrogate on the
same samples, :func:`make_trend_surrogate`, whose kernel adds a linear trend to the ARD RBF. A stationary RBF with
a constant mean cannot represent a linear trend without curvature: on a linear black box its slope at the box's
centre came out 3-6 % off with a posterior std of 0.5 % when the samples sit on the box's faces (the
``"variance"`` acquisition), so the true gradient was outside two stds for half of the features. The trend
kernel's linear part carries the slope, with its uncertainty, and the RBF part the curvature.
"""

from __future__ import annotations

import copy
import math
import warnings
from collections.abc import Callable, Mapping

import numpy as np
import torch
from botorch import settings as botorch_settings
from botorch.models import SingleTaskGP
from botorch.models.map_saas import add_saas_prior
from botorch.optim.core import OptimizationStatus
from botorch.optim.fit import fit_gpytorch_mll_scipy
from botorch.optim.utils import get_parameters_and_bounds
from gpytorch.constraints import GreaterThan
from gpytorch.kernels import LinearKernel, RBFKernel, ScaleKernel
from gpytorch.mlls import ExactMarginalLogLikelihood
from gpytorch.priors import LogNormalPrior
from torch import Tensor

from gpytorch_explain.local.dense_objective import dense_fits_enabled, dense_loss_closure, supports_dense_objective

__all__ = [
    "CONVERGED_IMPROVEMENT",
    "DEFAULT_PRIOR_SCALE",
    "TREND_NOISE_FLOOR",
    "TREND_NOISE_PRIOR",
    "make_surrogate",
    "make_trend_surrogate",
    "make_relevance_surrogate",
    "bootstrap_relevances",
    "RELEVANCE_BOOTSTRAP_MAXITER",
    "fit_surrogate",
    "fit_trend_surrogate",
    "log_posterior",
    "loo_predictions",
    "loo_r2",
]


#: the lengthscale prior's log-scale std. Hvarfner et al.'s :math:`\sqrt 3` lets single features' lengthscales
#: swing by orders of magnitude with 50 samples; 0.5 (recommended for stable rankings,
#: ``benchmarks/results/local_vs_lime.txt``) steadies :math:`1/\ell` but makes gradient stds overconfident on
#: nonlinear black boxes; the default 1.0 is a compromise that keeps the unit tests' 2-std coverage.
DEFAULT_PRIOR_SCALE = 1.0

#: the trend surrogate's learned observation noise (a variance, standardised output units): lower bound and
#: log-normal prior ``(loc, scale)`` of :math:`\log\sigma_n^2`. A black box is deterministic, so its "noise" is only
#: the part the kernel cannot resolve: ~0 on a smooth model, large on a tree ensemble's steps. BoTorch's default
#: (LogNormal(-4, 1), floor 1e-4) puts the noise std near 10 % of the output's and made the surrogate average a
#: weak interaction away as noise (confident gradient misses, docs/local_notes.md); this prior (median 1.2e-4,
#: 95 % in [3e-7, 0.04]) lets the data choose between interpolation and smoothing.
TREND_NOISE_FLOOR = 1e-6
TREND_NOISE_PRIOR = (-9.0, 3.0)


def standardise(y: np.ndarray) -> tuple[float, float, np.ndarray]:
    """``(mean, std, (y - mean) / std)`` of the outputs, computed on ``y / max|y|`` so that outputs near 1e±160
    neither overflow nor underflow; ``std`` is 1 when it is below ``1e-12 |mean|`` (a constant black box; relative,
    so that outputs ~1e-15 are not taken as constant)."""
    amax = float(np.abs(y).max())
    if 1e-150 < amax < 1e150:  # the plain formulas (to the bit as before)
        ym, ys = float(y.mean()), float(y.std())
        ys = ys if ys > 1e-12 * abs(ym) else 1.0
        return ym, ys, (y - ym) / ys
    if amax == 0.0:
        return 0.0, 1.0, np.zeros_like(y)
    u = y / amax
    um, us = float(u.mean()), float(u.std())
    if not us > 1e-12 * abs(um):
        return um * amax, 1.0, (u - um) * amax
    return um * amax, us * amax, (u - um) / us


def make_surrogate(
    U: Tensor, y: Tensor, state: dict | None = None, prior_scale: float = DEFAULT_PRIOR_SCALE
) -> SingleTaskGP:
    r"""An ARD-RBF ``SingleTaskGP`` on ``U`` (``(n, d)``) and standardised targets ``y`` (``(n,)``).

    ``state`` (a previous surrogate's ``state_dict``) warm-starts the hyperparameters. The lengthscale prior
    is :math:`\log\ell_i \sim \mathcal N(\sqrt 2 + \tfrac12\log d + \log 2,\ s^2)` with ``s = prior_scale``
    (Hvarfner et al. use :math:`s = \sqrt 3`; see :data:`DEFAULT_PRIOR_SCALE`).
    """
    d = U.size(-1)
    if not (prior_scale > 0 and math.isfinite(prior_scale)):
        raise ValueError(f"prior_scale must be a positive number, got {prior_scale}.")
    prior = _lengthscale_prior(d, prior_scale)
    kernel = RBFKernel(
        ard_num_dims=d,
        lengthscale_prior=prior,
        lengthscale_constraint=GreaterThan(5e-2, transform=None, initial_value=prior.mode),
    ).to(U)
    # BoTorch's unit-cube check targets its own default priors; ours is set for the box [-1, 1]^d
    with botorch_settings.validate_input_scaling(False):
        model = SingleTaskGP(U, y.unsqueeze(-1), covar_module=kernel, outcome_transform=None, input_transform=None)
    if state is not None:
        keep = {k: v for k, v in state.items() if not k.startswith("train_")}
        model.load_state_dict(keep, strict=False)
    return model


def _lengthscale_prior(d: int, prior_scale: float) -> LogNormalPrior:
    return LogNormalPrior(loc=math.sqrt(2.0) + 0.5 * math.log(d) + math.log(2.0), scale=float(prior_scale))


def make_trend_surrogate(
    model: SingleTaskGP, prior_scale: float = DEFAULT_PRIOR_SCALE, noise: float | None = None
) -> SingleTaskGP:
    r"""The attribution surrogate: ``model``'s samples under an ARD RBF plus a linear trend.

    .. math::

        k(\mathbf u, \mathbf u') = s\,\exp\Big(-\tfrac12\sum_i (u_i - u'_i)^2/\ell_i^2\Big)
        + v\,\mathbf u^\top\mathbf u',

    with the lengthscale prior of :func:`make_surrogate` (lengthscales and noise warm-started from ``model``),
    :math:`s` and :math:`v` free. By default the observation noise is learned, warm-started from ``model``, under
    the broad prior :data:`TREND_NOISE_PRIOR` with the lower bound :data:`TREND_NOISE_FLOOR` (not BoTorch's
    LogNormal(-4, 1) above 1e-4): on a smooth black box it falls towards the floor and the surrogate nearly
    interpolates, on a piecewise-constant one it stays large. ``noise`` (a variance, in the units of the
    standardised targets) fixes it instead: the parameter is frozen and its lower bound lowered to 0. In box units with
    the instance at the origin, the linear part is a Bayesian linear model :math:`\boldsymbol\beta^\top\mathbf u`,
    :math:`\boldsymbol\beta\sim\mathcal N(\mathbf 0, v\mathbf I)`, so the posterior gradient at the instance is
    :math:`\boldsymbol\beta` plus the RBF part's gradient, each with its uncertainty (the kernel's derivatives are in
    closed form: sums, ``ScaleKernel``, ``RBFKernel``, ``LinearKernel``). Fit it with :func:`fit_surrogate`.

    Example:
        >>> import torch
        >>> from gpytorch_explain.local.surrogate import fit_surrogate, make_surrogate, make_trend_surrogate
        >>> U = torch.rand(30, 2, dtype=torch.float64) * 2 - 1
        >>> gp = make_surrogate(U, (U @ torch.tensor([2.0, -1.0], dtype=torch.float64)) / 1.3)
        >>> trend = make_trend_surrogate(gp)
        >>> _ = fit_surrogate(trend)
        >>> type(trend.covar_module).__name__
        'AdditiveKernel'
    """
    U = model.train_inputs[0]
    y = model.train_targets
    d = U.size(-1)
    prior = _lengthscale_prior(d, prior_scale)
    rbf = RBFKernel(
        ard_num_dims=d,
        lengthscale_prior=prior,
        lengthscale_constraint=GreaterThan(5e-2, transform=None, initial_value=prior.mode),
    ).to(U)
    base = model.covar_module
    rbf.lengthscale = getattr(base, "base_kernel", base).lengthscale.detach().clamp_min(5e-2)
    # the linear part first: DenseLinearOperator + LowRankRootLinearOperator (the other order) makes
    # linear_operator take a Cholesky root of the dense RBF block (add_low_rank), which is singular at long
    # lengthscales (jitter warnings in every fit); LowRankRoot + Dense stays a plain sum
    kernel = LinearKernel().to(U) + ScaleKernel(rbf).to(U)
    with botorch_settings.validate_input_scaling(False):
        out = SingleTaskGP(U, y.unsqueeze(-1), covar_module=kernel, outcome_transform=None, input_transform=None)
    if noise is None:
        noise_covar = out.likelihood.noise_covar
        noise_covar.register_constraint("raw_noise", GreaterThan(TREND_NOISE_FLOOR))
        noise_covar.register_prior("noise_prior", LogNormalPrior(*TREND_NOISE_PRIOR), "noise")
        noise_covar.noise = model.likelihood.noise.detach().clamp_min(2 * TREND_NOISE_FLOOR)
    else:
        noise_covar = out.likelihood.noise_covar
        noise_covar.register_constraint("raw_noise", GreaterThan(0.0, transform=None))
        noise_covar.noise = torch.full_like(noise_covar.raw_noise, float(noise))
        noise_covar.raw_noise.requires_grad_(False)
    return out


def _neutral_start(trend: SingleTaskGP) -> None:
    """Restart a trend surrogate from neutral hyperparameters: prior-mode lengthscales, unit variances, small noise."""
    linear, scaled = trend.covar_module.kernels
    dtype = trend.train_inputs[0].dtype
    linear.variance = torch.tensor(1.0, dtype=dtype)
    scaled.outputscale = torch.tensor(1.0, dtype=dtype)
    rbf = scaled.base_kernel
    rbf.lengthscale = torch.full_like(rbf.lengthscale, float(rbf.lengthscale_prior.mode))
    noise_covar = trend.likelihood.noise_covar
    if noise_covar.raw_noise.requires_grad:  # a learned noise; a fixed one (attribution_noise) stays
        noise_covar.noise = torch.full_like(noise_covar.noise, 1e-4)


def fit_trend_surrogate(
    model: SingleTaskGP, prior_scale: float = DEFAULT_PRIOR_SCALE, noise: float | None = None, maxiter: int = 200
) -> tuple[SingleTaskGP, list[str]]:
    r"""The fitted attribution surrogate of :func:`make_trend_surrogate`: the better of two starts.

    The fit starts once from ``model``'s hyperparameters (warm start) and once from neutral ones (lengthscales at
    the prior's mode, :math:`v = s = 1`, noise :math:`10^{-4}`); the fit with the larger log posterior
    (:func:`log_posterior`: marginal likelihood plus priors) is returned, with its :func:`fit_surrogate` messages.
    Both starts are deterministic. With 50 samples in 30 dimensions the marginal likelihood has several modes, and
    a warm start from an acquisition surrogate that calls most of the output noise can stay in the mode where the
    trend surrogate does too (kernel variances near 0, leave-one-out :math:`R^2` ≈ 0). Its gradient at the instance
    is then ≈ 0 with a std that only the stencil check widens, while the stencil's own finite differences show
    slopes of order one (breast cancer / SVC, explained through the logit, 50 calls: 2 of 20 explanations on 5
    instances x 4 seeds). The second start found the better mode in 13 of those 20 fits (docs/local_notes.md).

    Example:
        >>> import torch
        >>> from gpytorch_explain.local.surrogate import fit_trend_surrogate, make_surrogate
        >>> U = torch.rand(30, 2, dtype=torch.float64) * 2 - 1
        >>> y = U @ torch.tensor([2.0, -1.0], dtype=U.dtype)
        >>> trend, messages = fit_trend_surrogate(make_surrogate(U, (y - y.mean()) / y.std()))
        >>> type(trend.covar_module).__name__
        'AdditiveKernel'
    """
    warm = make_trend_surrogate(model, prior_scale=prior_scale, noise=noise)
    warm_messages = fit_surrogate(warm, maxiter=maxiter)
    neutral = make_trend_surrogate(model, prior_scale=prior_scale, noise=noise)
    _neutral_start(neutral)
    neutral_messages = fit_surrogate(neutral, maxiter=maxiter)
    if log_posterior(neutral) > log_posterior(warm):
        return neutral, neutral_messages
    return warm, warm_messages


def make_relevance_surrogate(model: SingleTaskGP, noise: float | None = None) -> SingleTaskGP:
    r"""A surrogate for the relevance :math:`1/\ell_i` only: ``model``'s samples under an ARD RBF with a SAAS prior.

    The log-normal prior of :func:`make_surrogate` has its mode at a finite lengthscale, so a feature without
    effect (flat likelihood in :math:`\ell_i`) stays at the mode and keeps a share of :math:`1/\ell` that has
    nothing to do with the black box (15-17 % for two no-effect features out of six on a smooth black box,
    ``benchmarks/results/local_smooth_consistency.txt``). The sparse axis-aligned subspace (SAAS) prior of
    Eriksson & Jankowiak (2021), through BoTorch's :func:`~botorch.models.map_saas.add_saas_prior`, is

    .. math::

        \rho_i = \tau/\ell_i^2 \sim \mathcal{HC}(1), \qquad \tau \sim \mathcal{HC}(0.1),

    whose density is largest at :math:`\rho_i = 0`: at the MAP a feature the samples give no evidence for goes
    to the lengthscale's upper bound (:math:`10^4` box half-widths), relevance :math:`\approx 0`, while the
    features with an effect are set by the likelihood. :math:`\tau` is fitted, the lengthscales start at 1 (not
    warm-started, so that the shrinkage is not steered by ``model``'s prior) and the noise is warm-started from
    ``model`` and learned (BoTorch's noise prior, lower bound 1e-4). ``noise`` (a variance, in the units of the
    standardised targets) fixes it instead, e.g. ``1e-6`` to make the fit interpolate: then every sample, the
    stencil's next to ``x`` included, must be explained by the lengthscales rather than by noise (see
    ``LocalGPExplainer(relevance_noise=...)``). The acquisitions keep ``model`` (its prior is what keeps the BO path
    stable at a few samples).

    Example:
        >>> import torch
        >>> from gpytorch_explain.local.surrogate import fit_surrogate, make_relevance_surrogate, make_surrogate
        >>> U = torch.rand(40, 3, dtype=torch.float64) * 2 - 1
        >>> y = torch.sin(2 * U[:, 0]) - U[:, 1]  # no effect of U[:, 2]
        >>> rel = make_relevance_surrogate(make_surrogate(U, (y - y.mean()) / y.std()))
        >>> _ = fit_surrogate(rel)
        >>> bool(rel.covar_module.base_kernel.lengthscale[0, 2] > 100)
        True
    """
    U = model.train_inputs[0]
    y = model.train_targets
    rbf = add_saas_prior(RBFKernel(ard_num_dims=U.size(-1)).to(U), tau=None)
    with botorch_settings.validate_input_scaling(False):
        out = SingleTaskGP(
            U, y.unsqueeze(-1), covar_module=ScaleKernel(rbf).to(U), outcome_transform=None, input_transform=None
        )
    noise_covar = out.likelihood.noise_covar
    if noise is None:
        noise_covar.noise = model.likelihood.noise.detach().clamp_min(2e-4)
    else:
        noise_covar.register_constraint("raw_noise", GreaterThan(0.0, transform=None))
        noise_covar.noise = torch.full_like(noise_covar.raw_noise, float(noise))
        noise_covar.raw_noise.requires_grad_(False)
    return out


#: L-BFGS-B iterations of each bootstrap refit in :func:`bootstrap_relevances` (warm-started at the full fit)
RELEVANCE_BOOTSTRAP_MAXITER = 30


def bootstrap_relevances(
    model: SingleTaskGP,
    num: int,
    rng: np.random.RandomState,
    maxiter: int = RELEVANCE_BOOTSTRAP_MAXITER,
    *,
    keep: Tensor | None = None,
    fraction: float | None = None,
    start: Mapping[str, Tensor] | None = None,
) -> tuple[np.ndarray, list[str]]:
    r"""Normalised :math:`1/\ell` of ``num`` refits of a fitted ARD-RBF ``model`` on bootstrap resamples of its samples.

    Refit ``b`` draws ``n`` of the ``n`` samples with replacement (``rng``), starts from ``model``'s hyperparameters
    (same kernel, priors and likelihood) and runs at most ``maxiter`` L-BFGS-B iterations. With ``fraction`` (in
    (0, 1]) each refit instead keeps every sample that ``keep`` (a boolean mask over the samples; default none)
    marks and ``round(fraction · m)`` of the ``m`` others drawn without replacement (subsampling, "subagging"): an
    interpolating fit (a fixed small noise) must not lose the few samples next to ``x`` that set the slopes there,
    and a duplicated sample adds nothing to it. ``start`` (a ``state_dict`` of ``model``, e.g. taken before its
    fit) makes every refit start from those hyperparameters instead of ``model``'s fitted ones (a cold start):
    a warm start keeps each refit near the full fit's optimum, so the full fit's seed-dependent choice of features
    carries into every refit (see ``LocalGPExplainer(relevance_noise=...)``). Each row of the result is
    :math:`(1/\ell^{(b)}_i) / \sum_j 1/\ell^{(b)}_j`. With 50 samples a single MAP fit of the lengthscales is a
    jumpy function of the samples (on a tree ensemble which weak feature gets a short lengthscale flips from seed
    to seed); the mean over the refits is the bagged relevance of :class:`~gpytorch_explain.local.LocalGPExplainer`
    and their spread says how firmly the samples fix each relevance.

    Returns ``(relevances (num, d), messages)``; a refit that fails numerically is dropped and reported.

    Example:
        >>> import numpy as np, torch
        >>> from gpytorch_explain.local.surrogate import bootstrap_relevances, fit_surrogate, make_surrogate
        >>> U = torch.rand(40, 3, dtype=torch.float64) * 2 - 1
        >>> y = torch.sin(2 * U[:, 0]) - U[:, 1]
        >>> model = make_surrogate(U, (y - y.mean()) / y.std())
        >>> _ = fit_surrogate(model)
        >>> rel, _ = bootstrap_relevances(model, 4, np.random.RandomState(0))
        >>> rel.shape, bool(np.allclose(rel.sum(1), 1.0))
        ((4, 3), True)
    """
    U, y = model.train_inputs[0], model.train_targets
    n = y.numel()
    if fraction is not None and not 0.0 < fraction <= 1.0:
        raise ValueError(f"fraction must be in (0, 1], got {fraction}.")
    kept = np.zeros(n, dtype=bool) if keep is None else np.asarray(keep.cpu() if torch.is_tensor(keep) else keep)
    if kept.shape != (n,) or kept.dtype != bool:
        raise ValueError(f"keep must be a boolean mask of shape ({n},), got {kept.dtype} {kept.shape}.")
    others = np.flatnonzero(~kept)
    rows, failed, messages = [], 0, []
    for _ in range(num):
        if fraction is None:
            draw = rng.randint(0, n, size=n)
        else:
            chosen = rng.choice(others, int(round(fraction * others.size)), replace=False)
            draw = np.sort(np.concatenate([np.flatnonzero(kept), chosen]))
        idx = torch.as_tensor(draw, device=U.device)
        refit = copy.deepcopy(model)
        if start is not None:
            refit.load_state_dict(start)
        refit.set_train_data(U[idx], y[idx], strict=False)
        notes = fit_surrogate(refit, maxiter=maxiter, final=False)
        if any("failed" in m for m in notes):
            failed += 1
            continue
        kernel = refit.covar_module
        inv = 1.0 / getattr(kernel, "base_kernel", kernel).lengthscale.detach().reshape(-1).double().cpu().numpy()
        rows.append(inv / inv.sum())
    if failed:
        messages.append(f"bootstrap: {failed} of {num} refits failed numerically and were dropped")
    if not rows:  # all failed: the full fit alone
        kernel = model.covar_module
        inv = 1.0 / getattr(kernel, "base_kernel", kernel).lengthscale.detach().reshape(-1).double().cpu().numpy()
        rows.append(inv / inv.sum())
    return np.stack(rows), messages


def _fit_scipy(mll: ExactMarginalLogLikelihood, maxiter: int):
    """BoTorch's L-BFGS-B fit of ``mll`` (same parameters, bounds and statuses), on the dense objective of
    :mod:`~gpytorch_explain.local.dense_objective` where it applies (1.7-3.7x cheaper per evaluation)."""
    if not (dense_fits_enabled() and supports_dense_objective(mll)):
        return fit_gpytorch_mll_scipy(mll, options={"maxiter": maxiter})
    parameters, _ = get_parameters_and_bounds(mll)
    parameters = {name: p for name, p in parameters.items() if p.requires_grad}
    return fit_gpytorch_mll_scipy(
        mll, parameters=parameters, closure=dense_loss_closure(mll, parameters), options={"maxiter": maxiter}
    )


def _fit_once(model: SingleTaskGP, maxiter: int) -> tuple[list[str], OptimizationStatus | None, float]:
    """One L-BFGS-B run from the current hyperparameters: (messages, status, objective per sample)."""
    messages: list[str] = []
    mll = ExactMarginalLogLikelihood(model.likelihood, model)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    n = model.train_targets.numel()
    model.train()
    status, fval = None, float("nan")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            result = _fit_scipy(mll, maxiter)
            status, fval = result.status, float(result.fval)
            if status is not OptimizationStatus.SUCCESS:
                messages.append(f"surrogate fit (n={n}): {status.name}: {result.message}")
        except Exception as err:  # numerical failure: keep the previous hyperparameters, say so
            model.load_state_dict(before)
            messages.append(f"surrogate fit (n={n}) failed, previous hyperparameters kept: {err}")
    for w in caught:
        messages.append(f"surrogate fit (n={n}): {w.category.__name__}: {w.message}")
    model.eval()
    return messages, status, fval


#: a final fit stopped at its iteration limit counts as converged when continuing it improves the objective
#: (negative log marginal likelihood plus log priors, per sample) by at most this much.
CONVERGED_IMPROVEMENT = 1e-6


def fit_surrogate(
    model: SingleTaskGP,
    maxiter: int = 200,
    *,
    final: bool = True,
    watch: Callable[[SingleTaskGP], Tensor] | None = None,
    watch_label: str = "watched quantity",
) -> list[str]:
    r"""Maximise the marginal likelihood (plus priors) with L-BFGS-B from the current hyperparameters.

    No random restarts (so the fit is deterministic). Returns the warnings raised and any non-success status
    as messages; on a numerical failure the hyperparameters are restored and the failure is reported.

    :param final: ``False`` for the explainer's intermediate refits, which only steer the acquisition and are cut
        at ``maxiter`` by design: reaching the limit there is not reported (other statuses and warnings are).
        A final fit that reaches the limit is continued once (``maxiter`` more iterations, fresh L-BFGS memory:
        warm-started fits often crawl along flat lengthscale directions after the objective has settled). If the
        continuation improves the objective by at most :data:`CONVERGED_IMPROVEMENT` per sample, the fit had
        converged in value and the first fit's hyperparameters are kept, without a message; otherwise the
        continued fit is kept, and reported with its numbers if it reached the limit again. A final fit whose line
        search stops without a decrease (L-BFGS-B's "ABNORMAL") is continued once the same way: if that gains at
        most :data:`CONVERGED_IMPROVEMENT` per sample, it is kept without a message (an interpolating fit stops so
        at its optimum, where the objective is flat to round-off); otherwise the continued fit is kept, with its
        messages.
    :param watch: optional map from the model to the quantity the caller reports from it (e.g. the normalised
        relevances); a fit reported as not converged then also says how far that quantity moved (max-abs) over the
        continuation, so that the reader can judge whether the missing convergence matters for the result.
        It is evaluated without gradients and does not change the fit.
    :param watch_label: how the message names ``watch``'s quantity.
    """
    messages, status, fval = _fit_once(model, maxiter)
    if final and status is OptimizationStatus.FAILURE and any(_LINE_SEARCH_STOP in m for m in messages):
        return _confirm_line_search_stop(model, maxiter, messages, fval)
    if status is not OptimizationStatus.STOPPED:
        return messages
    others = [m for m in messages if "STOPPED" not in m]
    if not final:
        return others
    settled = {k: v.clone() for k, v in model.state_dict().items()}
    before = _watched(model, watch)
    more, status2, fval2 = _fit_once(model, maxiter)
    gain = fval - fval2
    if gain <= CONVERGED_IMPROVEMENT:  # converged in value: keep the first fit (the continuation only drifts)
        model.load_state_dict(settled)
        return others
    others += [m for m in more if "STOPPED" not in m]
    if status2 is OptimizationStatus.STOPPED:
        moved = ""
        after = _watched(model, watch)
        if before is not None and after is not None and before.shape == after.shape:
            moved = f" (the {watch_label} moved by up to {float((after - before).abs().max()):.2g} over them)"
        others.append(
            f"surrogate fit (n={model.train_targets.numel()}) did not converge in {2 * maxiter} L-BFGS-B iterations: "
            f"the objective per sample went {fval:.6g} -> {fval2:.6g} over the last {maxiter} and may still "
            f"improve{moved}; raise final_maxiter or check the black box's outputs."
        )
    return others


#: how scipy's L-BFGS-B says its line search found no decrease (BoTorch reports it as a FAILURE status)
_LINE_SEARCH_STOP = "ABNORMAL"


def _confirm_line_search_stop(model: SingleTaskGP, maxiter: int, messages: list[str], fval: float) -> list[str]:
    """A final fit whose line search found no decrease (L-BFGS-B's "ABNORMAL") is continued once with fresh memory.

    With a near-interpolating surrogate (tiny noise, samples 0.1 box half-widths apart) the objective is flat to
    round-off at its optimum and the line search stops there: continuing then gains nothing, the first fit is kept
    and the stop is not reported (it is not a failure of the fit). If the continuation gains more than
    :data:`CONVERGED_IMPROVEMENT` per sample, the first fit had not converged: the continued fit is kept, with its
    own messages."""
    others = [m for m in messages if _LINE_SEARCH_STOP not in m]
    settled = {k: v.clone() for k, v in model.state_dict().items()}
    more, _, fval2 = _fit_once(model, maxiter)
    if fval - fval2 <= CONVERGED_IMPROVEMENT:
        model.load_state_dict(settled)
        return others
    return others + more


def _watched(model: SingleTaskGP, watch: Callable[[SingleTaskGP], Tensor] | None) -> Tensor | None:
    if watch is None:
        return None
    with torch.no_grad():
        return torch.as_tensor(watch(model)).detach().reshape(-1).clone()


def log_posterior(model: SingleTaskGP) -> float:
    """The fitted objective: marginal log likelihood plus log priors, per sample (``-inf`` if it fails)."""
    mll = ExactMarginalLogLikelihood(model.likelihood, model)
    model.train()
    try:
        with torch.no_grad():
            value = float(mll(model(*model.train_inputs), model.train_targets))
    except Exception:  # pragma: no cover - numerical failure
        value = float("-inf")
    model.eval()
    return value


def _dense_train_covariance(model: SingleTaskGP) -> tuple[Tensor, Tensor]:
    X = model.train_inputs[0]
    K = model.covar_module(X).to_dense()
    noise = model.likelihood.noise.reshape(())
    C = K + noise * torch.eye(K.size(-1), dtype=K.dtype, device=K.device)
    resid = model.train_targets - model.mean_module(X)
    return C, resid


def loo_predictions(model: SingleTaskGP) -> Tensor:
    r"""Leave-one-out predictive means of the training targets, closed form (Rasmussen & Williams eq. 5.12).

    .. math::

        \mu_{-i} = y_i - [\mathbf C^{-1}(\mathbf y - \mathbf m)]_i / [\mathbf C^{-1}]_{ii},

    with :math:`\mathbf C = \mathbf K + \sigma_n^2\mathbf I` at the current hyperparameters (not refitted).
    """
    with torch.no_grad():
        C, resid = _dense_train_covariance(model)
        L = torch.linalg.cholesky(C)
        Cinv = torch.cholesky_inverse(L)
        alpha = Cinv @ resid
        return model.train_targets - alpha / Cinv.diagonal()


def loo_r2(model: SingleTaskGP) -> float:
    r"""Leave-one-out :math:`R^2 = 1 - \sum_i (y_i - \mu_{-i})^2 / \sum_i (y_i - \bar y)^2` (NaN for constant y)."""
    y = model.train_targets
    ss = ((y - y.mean()) ** 2).sum()
    if ss <= 0:
        return float("nan")
    return float(1.0 - ((y - loo_predictions(model)) ** 2).sum() / ss)
