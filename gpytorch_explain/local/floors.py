#!/usr/bin/env python3
r"""Lower bounds on the gradient's std of :class:`~gpytorch_explain.local.LocalGPExplainer` that do not come from
its surrogate: the slope its samples can resolve at the surrogate's noise, and, with no stencil, a Bayesian linear
regression through the samples (the std of its slope as a floor, and its slope as a check where the samples show
no curvature). A mixin of the explainer, which holds the settings it reads (``active``, ``categorical_features``,
``feature_names``).
"""

from __future__ import annotations

import math

import numpy as np
from scipy import stats

from .result import _to_numpy
from .surrogate import loo_predictions

__all__: list[str] = []

#: the regression check's tolerance: it applies where a linear regression through the samples predicts the ones it
#: leaves out at most this many times worse than the surrogate (leave-one-out RMS), i.e. the samples show no
#: curvature that would set the slope at x apart from their average slope
_REGRESSION_CHECK_TOLERANCE = 2.0


def _student_widening(dof: int) -> float:
    r""":math:`t_{0.975,\nu} / z_{0.975}`: how much wider a 95 % interval is when the residual scale behind it is
    estimated from :math:`\nu` residual degrees of freedom (a Student t) than when it is known (a Gaussian)."""
    return float(stats.t.ppf(0.975, dof) / stats.norm.ppf(0.975))


class _FloorMixin:
    """The explainer's floors and checks on the gradient's std (see the module docstring)."""

    def _resolution_floor(self, model, ys: float, scale: np.ndarray) -> np.ndarray:
        r"""The slope each continuous feature's samples can resolve at the surrogate's noise (user units, per active
        feature; 0 for categorical ones): :math:`\sigma_n / \sqrt{\sum_i (u_{ij} - \bar u_j)^2}`, the std of a
        least-squares slope along feature :math:`j` through the samples :math:`u_{ij}` (box units) with noise std
        :math:`\sigma_n` (the attribution surrogate's).

        ``gradient_std`` is at least this. A surrogate that fits the samples well has a small :math:`\sigma_n` and a
        posterior std above it (a slope at ``x`` is known less well than the samples' global trend). One that calls
        everything noise (leave-one-out R² near 0, on a tree the box shows as jumps) can have a prior slope variance
        that collapsed to 0, and reported ``0 ± 0``, a certainty the samples do not hold: GradientBoosting on
        diabetes gave 0 ± 0 for five features at one seed and stds of 40-560 at another."""
        U = _to_numpy(model.train_inputs[0])
        noise = float(model.likelihood.noise.detach().reshape(-1)[0].clamp_min(0.0).sqrt()) * ys
        spread = np.sqrt(((U - U.mean(0)) ** 2).sum(0))
        floor = np.zeros(self.active.size)
        for p, j in enumerate(self.active):
            if j not in self.categorical_features and spread[p] > 0:
                floor[p] = noise / spread[p] / scale[p]
        return floor

    def _regression_floor(
        self, model, g_box: np.ndarray, ys: float, scale: np.ndarray
    ) -> tuple[np.ndarray, str, dict | None]:
        r"""A floor on the gradient's std where no finite difference checks it (stencil off): the std of the slope of a
        Bayesian linear regression through the samples, per active feature in user units (0 for categorical ones),
        a message, and the regression itself for :meth:`_regression_check` (``None`` when it is degenerate).

        With no stencil the gradient's std is the surrogate's alone, from hyperparameters fitted to a few samples,
        and it was confidently wrong when the samples were few per feature: the issue's toy black box (10 features)
        at 10 and 12 calls had true slopes up to 16 and 9.8 stds away (40 of 40 inside two stds with this floor),
        their errors along the directions the samples barely or never moved in. It does not see the box's
        curvature: the slope at ``x`` against the box's average, which only a stencil reads. What the samples
        :math:`\mathbf u_i` (box units, centred: :math:`\tilde U`) say about a slope is at best what a linear
        regression through them says, with the residual scale :math:`\varepsilon` at which the surrogate itself
        mispredicts a sample it has not seen (the root mean square of its leave-one-out residuals, standardised
        outputs) and, along directions no sample moved in, a prior as wide as the typical seen slope:

        .. math::

            \Sigma = \bigl(\tilde U^\top\tilde U/\varepsilon^2 + I/\tau^2\bigr)^{-1}, \qquad
            \tau^2 = \frac{\lVert (I - NN^\top)\,\hat{\mathbf g}\rVert^2}{r},

        with :math:`N` an orthonormal basis of the null space of :math:`\tilde U` (rank :math:`r`) and
        :math:`\hat{\mathbf g}` the surrogate's mean gradient (box units); ``gradient_std`` is at least
        :math:`w_\nu\sqrt{\Sigma_{jj}}`. Along a direction the samples spread :math:`s` box half-widths that is
        :math:`w_\nu\varepsilon/s`; along one they never moved in, :math:`w_\nu\tau`. The factor
        :math:`w_\nu = t_{0.975,\nu}/z_{0.975}`, with :math:`\nu = \max(n - 1 - r, 1)` residual degrees of freedom,
        widens the floor so that two of them cover the 95 % interval of a Student t: :math:`\varepsilon` is
        estimated from the samples, and with few degrees of freedom a curvature can hide in the residuals (the
        issue's toy at 12 calls in 10 features, :math:`\nu = 1`: a surrogate that is linear to round-off, leave-one-out
        error 0.003 output stds, had slopes up to 5.9 floors off; :math:`w_1 = 6.5`, :math:`w_{10} = 1.14`,
        :math:`w_{36} = 1.03`).

        The regression's posterior mean slope is :math:`\Sigma\tilde U^\top\tilde{\mathbf z}/\varepsilon^2` and its
        leave-one-out residuals are :math:`(\tilde z_i - \hat z_i)/(1 - h_{ii})` with the hat matrix
        :math:`H = \tilde U\Sigma\tilde U^\top/\varepsilon^2`: the intercept stays at the samples' mean, as the
        surrogate's leave-one-out predictions keep its fitted constant mean (and both keep their hyperparameters)."""
        act = self.active
        floor = np.zeros(act.size)
        cpos = [p for p, j in enumerate(act) if j not in self.categorical_features]
        if not cpos:
            return floor, "", None
        U = _to_numpy(model.train_inputs[0])[:, cpos]
        U = U - U.mean(0)
        z = _to_numpy(model.train_targets)
        eps = float(np.sqrt(np.mean((z - _to_numpy(loo_predictions(model))) ** 2)))
        sv, vt = np.linalg.svd(U, full_matrices=True)[1:]
        rank = int((sv > 1e-8 * max(float(sv.max(initial=0.0)), 1e-300) * max(U.shape)).sum())
        N = vt[rank:].T
        g = np.asarray(g_box, dtype=float)[cpos]
        seen = g - N @ (N.T @ g)
        tau2 = float(seen @ seen) / rank if rank else 1.0  # nothing seen: one output std per box half-width
        if eps <= 0.0 or tau2 <= 0.0:  # exact fit with every direction seen, or no slope anywhere
            cov = tau2 * (N @ N.T)
        else:
            cov = np.linalg.inv(U.T @ U / eps**2 + np.eye(len(cpos)) / tau2)
        dof = max(len(z) - 1 - rank, 1)
        widen = _student_widening(dof)
        floor[cpos] = widen * np.sqrt(np.clip(np.diag(cov), 0.0, None)) * ys / scale[cpos]
        regression = None
        if eps > 0.0 and tau2 > 0.0:
            zc = z - z.mean()
            hat = U @ cov @ U.T / eps**2
            lev = np.clip(1.0 - np.diag(hat), 1e-12, None)
            mean = np.zeros(act.size)
            mean[cpos] = cov @ (U.T @ zc) / eps**2 * ys / scale[cpos]
            regression = {
                "mean": mean,
                "eps": eps,
                "eps_loo": float(np.sqrt(np.mean(((zc - hat @ zc) / lev) ** 2))),
            }
        unseen = len(cpos) - rank
        message = (
            f"gradient: no stencil, so gradient_std is at least the slope std of a linear regression through the "
            f"samples (residual scale {eps:.3g} output stds, the surrogate's leave-one-out error"
            + (
                f"; the samples move along {rank} of the {len(cpos)} continuous directions, and along the other "
                f"{unseen} the slope is as uncertain as a typical seen one, {math.sqrt(tau2):.3g} output stds per box "
                "half-width"
                if unseen
                else ""
            )
            + (
                f"; {dof} residual degree(s) of freedom, so the floor is widened {widen:.3g}x to cover a Student t"
                if widen > 1.05
                else ""
            )
            + ")."
        )
        return floor, message, regression

    def _regression_check(
        self, regression: dict | None, floor: np.ndarray, g_mean: np.ndarray, g_std: np.ndarray
    ) -> tuple[np.ndarray, str]:
        r"""Widen the gradient's std (active features, user units, surrogate scale) to reach the slope of the linear
        regression of :meth:`_regression_floor` where the samples show no curvature; returns the mask of widened
        features and a message.

        Without a stencil the surrogate's slope at ``x`` may differ from the samples' average slope only by a curvature
        the samples show. Where a linear regression through them predicts each sample it leaves out about as well as
        the surrogate (leave-one-out RMS at most :data:`_REGRESSION_CHECK_TOLERANCE` times the surrogate's), they do
        not show one, and a gap :math:`\lvert \bar g_j - m_j\rvert` larger than both stds is the surrogate's choice,
        not the black box's: the std becomes :math:`\sqrt{s_j^2 + (\bar g_j - m_j)^2}`, as with the stencil check.
        The case that showed it: 40 features, 3 of them linear, at 45-58 calls; the marginal likelihood preferred an
        RBF with lengthscales near one box half-width on the linear features to the isotropic linear trend, and their
        slopes came out 14-24 % off, up to 4.6 stds (docs/local_notes.md). On curved black boxes at 50 calls in 6
        features the regression's leave-one-out error was 3-400 times the surrogate's and nothing changes."""
        wide = np.zeros(g_mean.size, dtype=bool)
        if regression is None or regression["eps_loo"] > _REGRESSION_CHECK_TOLERANCE * regression["eps"]:
            return wide, ""
        gap = np.abs(regression["mean"] - g_mean)
        cont = np.array([j not in self.categorical_features for j in self.active])
        wide = cont & (gap > g_std) & (gap > floor)
        if not wide.any():
            return wide, ""
        shown = [
            f"{self.feature_names[j]} ({g_mean[p]:.4g} ± {g_std[p]:.2g} against {regression['mean'][p]:.4g})"
            for p, j in enumerate(self.active)
            if wide[p]
        ]
        g_std[wide] = np.sqrt(g_std[wide] ** 2 + gap[wide] ** 2)
        message = (
            "regression check: a linear regression through the samples predicts the ones it leaves out about as well "
            f"as the surrogate (leave-one-out error {regression['eps_loo']:.3g} against {regression['eps']:.3g} output "
            "stds), so the samples show no curvature that would set the slope at x apart from their average slope, "
            f"and its slope differs from the surrogate's by more than both stds for {len(shown)} feature(s): "
            f"{', '.join(shown[:5])}{', ...' if len(shown) > 5 else ''}; gradient_std includes the difference."
        )
        return wide, message
