#!/usr/bin/env python3
r"""What :class:`~gpytorch_explain.local.LocalGPExplainer` reads off its surrogates once the samples are in.

The signed gradient and integrated gradients (exact GP posteriors of the attribution surrogate), the stencil check
that widens the gradient's std to reach the finite differences at ``x``, the relevance :math:`1/\ell` (from a SAAS
refit or the acquisition surrogate's lengthscales), the fidelity, and the assembled
:class:`~gpytorch_explain.local.LocalExplanation`. A mixin of the explainer, which holds the settings it reads.
"""

from __future__ import annotations

import copy
import math
import warnings

import numpy as np
import scipy.optimize
import torch
from gpytorch.utils.warnings import NumericalWarning

from ..attribution import PosteriorGradient, PosteriorIntegratedGradients
from .floors import _FloorMixin
from .identifiability import confounded_features
from .link import (
    IG_COMPLETENESS_TOL,
    link_hint,
    probability_integrated_gradients,
    probability_moments,
    slope_factor,
)
from .result import LocalExplanation, _to_numpy
from .stencil import stencil_differences
from .surrogate import (
    bootstrap_relevances,
    fit_surrogate,
    fit_trend_surrogate,
    loo_r2,
    make_relevance_surrogate,
)

__all__: list[str] = []

_DT = torch.float64
#: the relevance surrogate's slope scale along feature i, sqrt(outputscale) / l_i (the prior std of its derivative, in
#: standardised outputs per box half-width); below this for every feature, it found no feature with an effect
_NO_EFFECT_SLOPE = 0.01
#: an interval (in stds) beyond which the box is wider than most training data and the result says so
_WIDE_INTERVAL = 4.0
#: where the forward stencil's truncation error reads the surrogate's curvature: this far from x, in box half-widths
_CURVATURE_STEP = 0.5


def _one_sided_spread(forward: float, backward: float) -> float:
    r"""Half the spread of the one-sided differences at ``x``, :math:`|d^+_j - d^-_j|/2` (user units): a bound on
    the central difference's error.

    Wherever :math:`f'` is monotone on :math:`[x_j - h_j, x_j + h_j]` (a smooth black box whose step is short
    enough, or one kink such as a ReLU's or :math:`|\cdot|`'s), the slope at ``x`` lies between :math:`d^-_j` and
    :math:`d^+_j`, hence at most this far from their mean, the central difference. A kink within :math:`h_j` of ``x``
    makes it up to half the jump in slope: the central difference, and a surrogate that follows it, read the average
    of the two sides (0.22 ± 0.08 against a true slope of 1 at 0.02σ from the kink of :math:`|x_0 - c|`; 0.12 ± 0.009
    against 0 at 0.07σ from a ReLU's), and the std must reach the side ``x`` is on. Three values of the black box
    cannot tell a kink from curvature, and the box's curvature, once a kink lies in the box, contains the kink
    itself, so the bound is taken whole: on a smooth black box it is :math:`\tfrac{h_j}{2}|f''_{jj}|`, the forward
    difference's truncation term, conservative where the central difference is exact up to :math:`O(h_j^2 f^{(3)})`.

    >>> _one_sided_spread(1.0, -0.6), _one_sided_spread(2.1, 1.9)
    (0.8, 0.1...)
    """
    return 0.5 * abs(forward - backward)


#: with a fixed relevance noise (``relevance_noise``), the share of the samples away from ``x`` and its stencil that
#: each relevance refit keeps (subsampling without replacement; the rows next to ``x`` are kept in every refit)
RELEVANCE_SUBSAMPLE_FRACTION = 0.3


def _relevance_of(model) -> torch.Tensor:
    """Normalised :math:`1/\\ell` of an ARD-RBF surrogate (plain or inside a ``ScaleKernel``)."""
    kernel = model.covar_module
    inv = 1.0 / getattr(kernel, "base_kernel", kernel).lengthscale.reshape(-1)
    return inv / inv.sum()


class _ReadoutMixin(_FloorMixin):
    """The explainer's read-outs of its surrogates (see the module docstring)."""

    def _attribution_model(self, model, messages: list[str] | None = None):
        """The surrogate the signed attributions come from (see ``linear_trend``; two starts, the better kept)."""
        if not self.linear_trend:
            return model
        trend, fit_messages = fit_trend_surrogate(
            model, prior_scale=self.lengthscale_prior_scale, noise=self.attribution_noise, maxiter=self.final_maxiter
        )
        if messages is not None:
            messages += [f"trend surrogate: {m}" for m in fit_messages]
        return trend

    def _relevance(
        self, model, messages: list[str], rng: np.random.RandomState
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(lengthscales, relevance, relevance_std)`` on the perturbed features: the lengthscales (box units) of
        ``model`` or of a SAAS refit (``relevance_prior``), and the mean and std of the normalised :math:`1/\\ell` over
        ``relevance_bootstrap`` bootstrap refits of that surrogate (with none: its own normalised :math:`1/\\ell`,
        std 0)."""
        if self.relevance_prior == "lognormal":
            return self._bagged(model, _to_numpy(model.covar_module.lengthscale.reshape(-1)), messages, rng)
        rmodel = make_relevance_surrogate(model, noise=self.relevance_noise)
        start = {k: v.detach().clone() for k, v in rmodel.state_dict().items()}
        fit_messages = fit_surrogate(
            rmodel, maxiter=self.final_maxiter, watch=_relevance_of, watch_label="normalised relevances"
        )
        messages += [f"relevance surrogate: {m}" for m in fit_messages]
        ell = _to_numpy(rmodel.covar_module.base_kernel.lengthscale.reshape(-1))
        # a long lengthscale alone is no evidence of "no effect": on a (locally) linear black box every lengthscale
        # runs long while the output scale grows with it, and sqrt(outputscale) / l_i is the slope scale that stays
        slope = float(rmodel.covar_module.outputscale.detach().sqrt()) / ell
        if (slope < _NO_EFFECT_SLOPE).all():
            messages.append(
                "relevance: the SAAS surrogate found no feature with an effect in the box (the prior std of its "
                f"slope along every feature, sqrt(outputscale) / lengthscale, is below {_NO_EFFECT_SLOPE:g} output "
                f"stds per box half-width, the largest {slope.max():.3g}); the relevances mean nothing. Check "
                "fidelity, the black box's output range or the interval."
            )
        return self._bagged(rmodel, ell, messages, rng, start)

    def _bagged(self, rmodel, ell: np.ndarray, messages: list[str], rng: np.random.RandomState, start=None):
        if not self.relevance_bootstrap:
            return ell, (1.0 / ell) / (1.0 / ell).sum(), np.zeros_like(ell)
        if self.relevance_noise is None:
            rel, notes = bootstrap_relevances(rmodel, self.relevance_bootstrap, rng)
        else:  # an interpolating fit: keep x and the stencil's rows in every refit, a share of the others, cold starts
            U = rmodel.train_inputs[0]
            reach = 0.0 if self.stencil is None else self.stencil
            keep = U.abs().amax(-1) <= reach * (1.0 + 1e-9)
            rel, notes = bootstrap_relevances(
                rmodel,
                self.relevance_bootstrap,
                rng,
                keep=keep,
                fraction=RELEVANCE_SUBSAMPLE_FRACTION,
                start=start,
            )
        messages += [f"relevance surrogate: {m}" for m in notes]
        return ell, rel.mean(0), (rel.std(0, ddof=1) if len(rel) > 1 else np.zeros_like(ell))

    def _gradient_ok(self, model, u0, ys, scale, y_all, y0: float) -> bool:
        """The stopping rule: every gradient std (user units, widened by the stencil check) below ``gradient_tol``.

        ``y_all`` on the surrogates' scale (``link``), ``y0`` the black box's output at ``x``."""
        model = self._attribution_model(model)
        grad = PosteriorGradient(model)(u0[None])
        act = self.active
        g_mean, g_std = np.zeros(self.num_features), np.zeros(self.num_features)
        g_mean[act] = _to_numpy(grad.mean[0]) * ys / scale
        g_std[act] = np.maximum(
            np.sqrt(np.clip(_to_numpy(grad.variance[0]), 0, None)) * ys / scale,
            self._resolution_floor(model, ys, scale),
        )
        if self.stencil is not None:  # the same check as the result's, so that it cannot stop on a narrower std
            self._stencil_check(y_all, scale, g_mean, g_std, [], model, ys)
        else:  # the same check and floor as the result's
            floor, _, regression = self._regression_floor(model, _to_numpy(grad.mean[0]), ys, scale)
            g_act = g_std[act]
            self._regression_check(regression, floor, g_mean[act], g_act)
            g_std[act] = np.maximum(g_act, floor)
        return bool(np.all(g_std[act] * slope_factor(self.link, y0) < self.gradient_tol))

    def _forward_bias(self, model, ys: float, scale: np.ndarray, cont: list[int], g_mean: np.ndarray) -> np.ndarray:
        r"""An estimate of the forward difference's truncation error :math:`\tfrac{h_j}{2}|f''_{jj}|` (user units) per
        stenciled feature ``cont[k]``, the larger of two readings of the curvature (standardised output per box
        half-width squared; the stencil's own step is too short to show it):

        * the surrogate's: :math:`\kappa_j = (m(H\mathbf e_j) - 2m(\mathbf 0) + m(-H\mathbf e_j))/H^2` with its
          posterior mean :math:`m` and :math:`H = 1/2`;
        * the samples': how far the samples at least :math:`H` from ``x`` (in their continuous coordinates; with
          ``x``'s categories) lie off the tangent plane at ``x``,
          :math:`o_i = |z_i - m(\mathbf 0) - \mathbf g^\top\mathbf u_i| \approx \tfrac12|\sum_j\kappa_j u_{ij}^2|`:
          per-feature curvatures :math:`\kappa_j \ge 0` fitted to the :math:`o_i` by non-negative least squares,
          at most the largest and at least the median of the per-sample values
          :math:`2o_i / \|\mathbf u_i\|^2` (the curvature as if it were the same along every feature).

        With few samples the surrogate is nearly linear in the box (it cannot tell curvature from a slope) while the
        samples already show it: a black box at its minimum, 10 calls in 5 dimensions, had slopes of
        :math:`h_jf''_{jj}/2` up to 13 stds from the true 0 with the first reading alone (2.4 with both; 20 calls
        in 10 dimensions: 4.1 and 1.5). On black boxes that are not at an extremum the second reading widens the
        std little (median 1.0-1.2 times on the Boston and breast-cancer black boxes of the benchmarks).
        """
        pos = {j: p for p, j in enumerate(self.active)}
        d = self.active.size
        H = _CURVATURE_STEP
        U = torch.zeros(1 + 2 * len(cont), d, dtype=_DT)
        for k, j in enumerate(cont):
            U[1 + 2 * k, pos[j]] = H
            U[2 + 2 * k, pos[j]] = -H
        with torch.no_grad(), warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="Negative variance", category=NumericalWarning)
            m = _to_numpy(model.posterior(U).mean[..., 0])
        kappa = np.abs(m[1::2] + m[2::2] - 2 * m[0]) / H**2
        cpos = [pos[j] for j in cont]
        Ut = _to_numpy(model.train_inputs[0])
        z = _to_numpy(model.train_targets)
        cat_cols = [p for p in range(d) if p not in set(cpos)]
        far = np.abs(Ut[:, cpos]).max(1) >= H
        if cat_cols:
            far &= (Ut[:, cat_cols] == 0).all(1)
        if far.any():
            g_u = np.array([g_mean[j] * scale[pos[j]] / ys for j in cont])  # the slope in standardised box units
            uc = Ut[far][:, cpos]
            off = np.abs(z[far] - m[0] - uc @ g_u)  # ~ |1/2 sum_j kappa_j u_ij^2| (+ cross, higher-order terms)
            fit = scipy.optimize.nnls(0.5 * uc**2, off)[0]  # per-feature curvatures >= 0 that explain it
            each = 2 * off / (uc**2).sum(1)  # one curvature per sample, as if the same along every feature
            kappa = np.maximum(kappa, np.maximum(np.minimum(fit, each.max()), np.median(each)))
        return 0.5 * self.stencil * kappa * ys / np.array([scale[pos[j]] for j in cont])

    def _stencil_terms(self, y_all, scale, g_mean, model=None, ys: float = 1.0):
        r"""``(cont, h, d, b, c, a)`` per stenciled feature ``cont[k]``: its step :math:`h_j` (user units), finite
        difference :math:`d_j`, truncation estimate :math:`b_j` (forward differences with ``model`` given, else 0),
        the factor :math:`c_j` of the noise variance the difference carries (2 forward, 1/2 central) and, where the
        stencil reaches both sides of ``x``, half the spread :math:`a_j` of the two one-sided differences
        (:func:`_one_sided_spread`; else 0). A forward stencil completed at feature ``j`` (``self._backward[j]``, the
        row of :math:`\mathbf x - h_j\mathbf e_j`) gives the central difference there, as the central stencil does,
        with :math:`b_j = 0` and :math:`c_j = 1/2`."""
        cont = [j for j in self.active if j not in self.categorical_features]
        pos = {j: p for p, j in enumerate(self.active)}
        h = np.array([self.stencil * scale[pos[j]] for j in cont])
        forward = self.stencil_kind == "forward"
        backward = getattr(self, "_backward", None) or {}
        # the steps as the black box received them: a float32 model rounds x ± h, and at a step of a few ulps the
        # nominal h is off by whole percents (the surrogate is fitted on the received rows, so it would disagree)
        rows = getattr(self, "_rows_received", None)
        if rows is not None and cont:
            h = h.copy()
            for k, j in enumerate(cont):
                if forward and j in backward:
                    span = 0.5 * (rows[1 + k, j] - rows[backward[j], j])
                elif forward:
                    span = rows[1 + k, j] - rows[0, j]
                else:
                    span = 0.5 * (rows[1 + 2 * k, j] - rows[2 + 2 * k, j])
                if span > 0:
                    h[k] = span
        diffs = stencil_differences(y_all, self.stencil_kind, h)
        carried = np.full(len(cont), 2.0 if forward else 0.5)
        bias = np.zeros(len(cont))
        spread = np.zeros(len(cont))
        if forward and model is not None and cont:
            bias = self._forward_bias(model, ys, scale, cont, g_mean)
        for k, j in enumerate(cont):
            # both one-sided differences at x where the stencil reaches either side of it (central, or completed)
            if forward and j in backward:
                plus, minus = y_all[1 + k], y_all[backward[j]]
            elif not forward:
                plus, minus = y_all[1 + 2 * k], y_all[2 + 2 * k]
            else:
                continue
            diffs[k] = (plus - minus) / (2.0 * h[k])
            bias[k], carried[k] = 0.0, 0.5
            spread[k] = _one_sided_spread((plus - y_all[0]) / h[k], (y_all[0] - minus) / h[k])
        return cont, h, diffs, bias, carried, spread

    def _completion_features(self, model, u0, ys: float, scale, y_all, calls: int) -> list[int]:
        r"""The features whose forward difference to complete to a central one: every stenciled feature when
        ``calls`` suffice, else (at most ``calls``) those where :math:`\sqrt{(d_j - m_j)^2 + b_j^2}` (the forward
        difference's gap to the surrogate's slope and its truncation estimate) exceeds the surrogate's std
        :math:`s_j`, the largest first in standardised output per box half-width (a ratio to :math:`s_j` would pick
        features without effect, whose stds are tiny). A choice that depends on the surrogate depends on the seed:
        on a tree ensemble a feature's reading then switches between the forward and the central difference from
        seed to seed, which completing every feature avoids (and needs no surrogate). ``y_all`` on the surrogates'
        scale."""
        done = getattr(self, "_backward", None) or {}
        todo = [j for j in self.active if j not in self.categorical_features and j not in done]
        if len(todo) <= calls:  # every one: the same rows whatever the seed
            return todo
        amodel = self._attribution_model(model)
        grad = PosteriorGradient(amodel)(u0[None])
        act = self.active
        g_mean, g_std = np.zeros(self.num_features), np.zeros(self.num_features)
        g_mean[act] = _to_numpy(grad.mean[0]) * ys / scale
        g_std[act] = np.sqrt(np.clip(_to_numpy(grad.variance[0]), 0, None)) * ys / scale
        cont, _, diffs, bias, _, _ = self._stencil_terms(y_all, scale, g_mean, amodel, ys)
        pos = {j: p for p, j in enumerate(act)}
        doubt = []
        for j, d, b in zip(cont, diffs, bias, strict=True):
            widen = float(np.hypot(d - g_mean[j], b))
            if j not in done and widen > g_std[j]:
                doubt.append((widen * scale[pos[j]] / ys, j))  # standardised output per box half-width
        return [j for _, j in sorted(doubt, key=lambda t: (-t[0], t[1]))[:calls]]

    def _stencil_check(self, y_all, scale, g_mean, g_std, messages, model=None, ys: float = 1.0) -> list[int]:
        r"""Check the surrogate's slope at ``x`` against the stencil's finite differences; widen ``g_std`` (in place)
        and, where the two contradict each other, report the difference in ``g_mean`` (in place).

        The stencil rows (rows 1 .. 2k, or 1 .. k for the forward stencil, of the first call) give a direct reading
        of the slope at ``x``: the central difference
        :math:`d_j = (f(\mathbf x + h_j\mathbf e_j) - f(\mathbf x - h_j\mathbf e_j)) / 2h_j`, exact up to
        :math:`O(h_j^2 f^{(3)})` for a deterministic smooth black box, or the forward difference
        :math:`d_j = (f(\mathbf x + h_j\mathbf e_j) - f(\mathbf x)) / h_j`, exact up to :math:`O(h_j f'')`, with
        :math:`h_j = \delta r\sigma_j`.

        * **The std.** A surrogate that calls a small smooth part of the black box noise can sit many of its stds away
          from :math:`d_j` (the box's average slope instead of the slope at ``x``). The reported std becomes
          :math:`\sqrt{s_j^2 + (d_j - m_j)^2}`, so that the interval reaches the direct reading; where the two agree
          (the usual case on smooth models) it hardly changes. With the forward stencil and ``model`` given, it also
          includes the estimate :math:`b_j` of the forward difference's truncation error :math:`\tfrac{h_j}{2}f''_{jj}`
          (:meth:`_forward_bias`): :math:`\sqrt{s_j^2 + (d_j - m_j)^2 + b_j^2}` (a surrogate that follows the forward
          difference inherits that error: on a black box at its minimum, a slope of :math:`h_jf''_{jj}/2` where the
          truth is 0, tens of stds away). With both one-sided differences (the central stencil, or a completed forward
          one), it also includes half their spread :math:`a_j` (:func:`_one_sided_spread`):
          :math:`\sqrt{s_j^2 + (d_j - m_j)^2 + a_j^2}`, which bounds the central difference's error also across a kink
          within :math:`h_j` of ``x`` (a ReLU network's), where the central difference reads the average of the two
          sides. (The mean's test below leaves :math:`a_j` out: where the surrogate contradicts the central
          difference, the difference is still the reading at ``x``.)
        * **The mean.** Where the gap :math:`|d_j - m_j|` exceeds both the surrogate's std :math:`s_j` and the
          difference's own error estimate :math:`e_j = \sqrt{b_j^2 + c\,\sigma_n^2/h_j^2}` (truncation, and the
          surrogate's noise std :math:`\sigma_n` carried by the difference of two outputs: :math:`c = 2` forward,
          :math:`1/2` central), each reading lies outside the other's error bar, and the surrogate, which assumes one
          lengthscale per feature across the whole box, is the likelier to be wrong at ``x``: ``gradient_mean``
          reports :math:`d_j` there (with the widened std above). This happens where samples far from ``x`` show
          curvature that the stencil's neighbourhood does not have: breast cancer / SVC explained through the logit
          (30 features, the forward stencil, 50 calls), where one or two features per explanation had the surrogate's
          slope of the wrong sign (true slope -1.17, forward difference -1.22, surrogate +1.07 ± 0.32).

        Features where the gap exceeds the std are reported in ``messages``. Returns the features whose mean is the
        difference.
        """
        cont, h, diffs, bias, carried, spread = self._stencil_terms(y_all, scale, g_mean, model, ys)
        noise_std = 0.0
        if model is not None:
            noise_std = float(model.likelihood.noise.detach().reshape(-1)[0].clamp_min(0.0).sqrt()) * ys
        wide, replaced = [], []
        for j, d, b, hj, c, a in zip(cont, diffs, bias, h, carried, spread, strict=True):
            gap = abs(d - g_mean[j])
            outside = gap > g_std[j]  # the difference lies outside the surrogate's error bar ...
            if outside:
                wide.append(f"{self.feature_names[j]} ({g_mean[j]:.4g} ± {g_std[j]:.2g} against {d:.4g})")
            g_std[j] = float(np.hypot(np.hypot(g_std[j], gap), np.hypot(b, a)))  # no overflow for outputs ~1e160
            if outside and gap > float(np.hypot(b, math.sqrt(c) * noise_std / hj)):  # ... and vice versa
                replaced.append(j)
                g_mean[j] = d
        if wide:
            sign = "+" if self.stencil_kind == "forward" else "±"
            note = ""
            if replaced:
                names = ", ".join(self.feature_names[j] for j in replaced[:5]) + (", ..." if len(replaced) > 5 else "")
                note = (
                    f" For {len(replaced)} of them ({names}) the gap also exceeds the difference's own error estimate "
                    "(truncation and noise), so gradient_mean reports the difference there (gradient_from_stencil)."
                )
            messages.append(
                f"stencil check: the {self.stencil_kind} difference at x {sign} δ·rσ differs from the surrogate's "
                f"slope by more than its std for {len(wide)} feature(s): {', '.join(wide[:5])}"
                f"{', ...' if len(wide) > 5 else ''}; "
                "gradient_std includes the difference (the slope at x may differ from the box's average slope)." + note
            )
        return replaced

    def _result(
        self, model, x, X_all, y_all, g_all, ym, ys, scale, baseline, messages, stopped, rng
    ) -> LocalExplanation:
        """Assemble the result; ``y_all`` the black box's outputs, ``g_all`` on the surrogates' scale (``link``)."""
        act = self.active
        D = self.num_features
        boot_rng = np.random.RandomState(rng.randint(0, 2**31 - 1))  # first: the same on either link
        u0 = torch.zeros(1, act.size, dtype=_DT)
        amodel = self._attribution_model(model, messages)
        grad = PosteriorGradient(amodel)(u0)
        g_mean = np.zeros(D)
        g_std = np.zeros(D)
        g_mean[act] = _to_numpy(grad.mean[0]) * ys / scale
        g_std[act] = np.sqrt(np.clip(_to_numpy(grad.variance[0]), 0, None)) * ys / scale
        g_std[act] = np.maximum(g_std[act], self._resolution_floor(amodel, ys, scale))
        from_stencil = np.zeros(D, dtype=bool)
        if self.stencil is not None:
            from_stencil[self._stencil_check(g_all, scale, g_mean, g_std, messages, amodel, ys)] = True
        else:
            floor, note, regression = self._regression_floor(amodel, _to_numpy(grad.mean[0]), ys, scale)
            g_act = g_std[act]
            widened, check_note = self._regression_check(regression, floor, g_mean[act], g_act)
            g_std[act] = g_act
            if widened.any():
                messages.append(check_note)
            binds = floor > g_std[act]
            if binds.any():  # said only where it widened a std
                g_std[act] = np.maximum(g_std[act], floor)
                names = [self.feature_names[j] for j in act[binds]]
                messages.append(
                    f"{note} It widened the std of {len(names)} feature(s): {', '.join(names[:5])}"
                    f"{', ...' if len(names) > 5 else ''}."
                )
        factor = slope_factor(self.link, y_all[0])  # ∂p/∂g at x (1 for the identity link): exact, p(x) is observed
        g_mean *= factor
        g_std *= factor
        if self.interval > _WIDE_INTERVAL:
            step = f"; the stencil's step is {self.stencil * self.interval:.3g}σ" if self.stencil is not None else ""
            messages.append(
                f"interval: the box x ± {self.interval:g}σ is wider than most of the training data (within "
                f"±{_WIDE_INTERVAL:g}σ of its mean){step}, so the gradient and its std describe the black box at that "
                "scale, not the slope at x (a smooth black box can curve within it); a smaller interval reads the "
                "slope at x."
            )
        if self.stencil is None and self._stencil_off_reason is not None:
            messages.append(
                f"stencil: off ({self._stencil_off_reason}), so no finite difference checks gradient_std (the "
                "surrogate's, floored by a linear regression through the samples and widened to reach its slope "
                "where the samples show no curvature); where the black box curves within "
                "the box it can be overconfident (6 smooth black boxes, 6 features, 50 calls, no stencil: the true "
                "gradient inside two stds for 273 of 288 features, misses up to 38 stds); a budget that fits the "
                "forward stencil adds that check."
            )
        lo, hi = x - self.interval * self.sigma, x + self.interval * self.sigma
        if baseline is None:
            b = np.clip(self.training_data.mean(0), lo, hi)
            for c in self.categorical_features:  # a category the data takes, not the mean of its codes
                values, counts = np.unique(self.training_data[:, c], return_counts=True)
                b[c] = values[np.argmax(counts)]
        else:
            b = self._check_x(baseline, "baseline").copy()
            cont = [j for j in act if j not in self.categorical_features]
            tol = 1e-9 * (np.abs(x) + self.sigma)
            outside = [j for j in cont if b[j] < lo[j] - tol[j] or b[j] > hi[j] + tol[j]]
            if outside:
                far = max(abs(b[j] - x[j]) / (self.interval * self.sigma[j]) for j in outside)
                messages.append(
                    f"baseline: outside the sampled box x ± {self.interval:g}σ for {len(outside)} feature(s) "
                    f"({', '.join(self.feature_names[j] for j in outside[:5])}{', ...' if len(outside) > 5 else ''}; "
                    f"up to {far:.3g} box half-widths from x), so the integrated gradients extrapolate the surrogate "
                    "beyond its samples and their stds can be far too small; use a baseline inside the box or a "
                    "larger interval."
                )
            fixed = [j for j in np.setdiff1d(np.arange(D), act) if b[j] != x[j]]
            if fixed:
                messages.append(
                    f"baseline: {len(fixed)} feature(s) with zero variance in training_data "
                    f"({', '.join(self.feature_names[j] for j in fixed[:5])}{', ...' if len(fixed) > 5 else ''}) "
                    "are never perturbed, so their baseline is x's value (result.baseline) and their integrated "
                    "gradient 0; the surrogate cannot attribute a change it never sampled."
                )
            unseen = [
                j
                for j in self.categorical_features
                if j in set(act.tolist()) and not np.isclose(self.categorical_values[j], b[j], rtol=0, atol=1e-9).any()
            ]
            if unseen:
                messages.append(
                    f"baseline: a value training_data never takes for categorical feature(s) "
                    f"{', '.join(f'{self.feature_names[j]} ({b[j]:g})' for j in unseen[:5])}"
                    f"{', ...' if len(unseen) > 5 else ''}; the samples only take seen values, so the integrated "
                    "gradients extrapolate the surrogate there."
                )
        b[np.setdiff1d(np.arange(D), act)] = x[np.setdiff1d(np.arange(D), act)]
        ub = self._to_u(b[None, :], x, scale)[0]
        ig_mean = np.zeros(D)
        ig_std = np.zeros(D)
        if self.link == "identity":
            ig = PosteriorIntegratedGradients(amodel, baseline=ub)(u0)
            ig_mean[act] = _to_numpy(ig.mean[0]) * ys  # IG is invariant to input rescaling
            ig_std[act] = np.sqrt(np.clip(_to_numpy(ig.variance[0]), 0, None)) * ys
        else:  # of p = sigmoid(g): mean by quadrature, std by Monte Carlo (gpytorch_explain.local.link)
            ig_mean[act], ig_std[act], gap = probability_integrated_gradients(
                amodel, u0[0], ub, ym, ys, seed=int(rng.randint(0, 2**31 - 1))
            )
            if gap > IG_COMPLETENESS_TOL:
                messages.append(
                    f"link: the probability-scale integrated gradients miss completeness by {gap:.2g} (relative to "
                    "E p(x) - E p(b)): the path quadrature did not converge; read them with care."
                )
        ell, rel_mean, rel_std = self._relevance(model, messages, boot_rng)
        n_moves = len(y_all) - 1
        if n_moves < act.size:
            messages.append(
                f"relevance: {n_moves} call(s) away from x for {act.size} perturbed features, so the samples cannot "
                f"tell every feature's effect apart (at most {n_moves} directions seen): the relevances of at least "
                f"{act.size - n_moves} feature(s) are set by the surrogate's prior, not by the black box; a budget "
                "above the number of features separates them."
            )
        unmoved = [int(j) for j in act if np.all(np.asarray(X_all[1:, j]) == np.asarray(X_all)[0, j])]
        if unmoved:  # e.g. a categorical feature the few Sobol and BO points all left at x's value
            names = [self.feature_names[j] for j in unmoved]
            messages.append(
                f"unmoved: no sample moved {len(names)} perturbed feature(s) away from x ({', '.join(names[:5])}"
                f"{', ...' if len(names) > 5 else ''}), so their relevance, gradient and integrated gradient are the "
                "surrogate's prior, not a reading of the black box; a larger budget moves them."
            )
        informative, ties = confounded_features(
            _to_numpy(model.train_inputs[0]), _to_numpy(model.train_targets), rel_mean
        )
        if ties:
            j, tied = next(iter(ties.items()))
            names = [self.feature_names[int(act[k])] for k in tied]
            messages.append(
                f"relevance: {informative.size} of {len(y_all)} samples hold 90 % of the output's variation, and on "
                f"them {self.feature_names[int(act[j])]} (relevance {rel_mean[j]:.2f}) takes the same values as "
                f"{', '.join(names[:5])}{', ...' if len(names) > 5 else ''} (within 0.25 box half-widths, or "
                "mirrored): the samples cannot tell these features apart, so which of them gets the relevance is "
                "arbitrary"
                + (f" ({len(ties) - 1} more such tie(s) among the top features)" if len(ties) > 1 else "")
                + ". A larger budget gives more samples where the output changes"
                + (
                    "; the gradient, pinned by the stencil's differences at x, does not rest on those samples"
                    if self.stencil is not None
                    else ""
                )
                + (
                    ". For a smooth classifier's probability, link='logit' (PRESETS['smooth_classifier']) spreads "
                    "the variation over the samples."
                    if self.link == "identity" and self._returns_probability
                    else "."
                )
            )
        relevance = np.zeros(D)
        relevance[act] = rel_mean
        relevance_std = np.zeros(D)
        relevance_std[act] = rel_std
        lengthscales = np.full(D, np.inf)
        lengthscales[act] = ell * scale
        fidelity = loo_r2(amodel)
        if np.isfinite(fidelity) and fidelity < 0.5:
            messages.append(
                f"low fidelity: leave-one-out R² = {fidelity:.3f} < 0.5; the surrogate explains the "
                "black box poorly in this box (try a smaller interval or a larger budget)."
            )
        elif not np.isfinite(fidelity):
            messages.append(
                "fidelity: NaN, since the black box returned the same value at every sample (leave-one-out R² has "
                "no variance to explain); the gradient is 0 within its std and the relevances mean nothing."
            )
        messages += link_hint(self.link, y_all, self._returns_probability)

        def predict(X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
            if X.shape[-1] != D:
                raise ValueError(f"X must be (m, {D}), got {X.shape}.")
            with torch.no_grad(), warnings.catch_warnings():
                # at a sampled point an interpolating surrogate's variance is round-off; gpytorch clamps it
                warnings.filterwarnings("ignore", message="Negative variance", category=NumericalWarning)
                post = amodel.posterior(self._to_u(X, x, scale))
                var = _to_numpy(post.variance[..., 0])
            mean, std = _to_numpy(post.mean[..., 0]) * ys + ym, np.sqrt(np.clip(var, 0.0, None)) * ys
            return (mean, std) if self.link == "identity" else probability_moments(mean, std)

        return LocalExplanation(
            x=x.copy(),
            relevance=relevance,
            relevance_std=relevance_std,
            gradient_mean=g_mean,
            gradient_std=g_std,
            gradient_from_stencil=from_stencil,
            integrated_gradients=ig_mean,
            integrated_gradients_std=ig_std,
            baseline=b,
            x_samples=X_all,
            y_samples=y_all,
            fidelity=fidelity,
            feature_names=list(self.feature_names),
            acquisition=self.acquisition,
            lengthscales=lengthscales,
            stopped_early=stopped,
            warnings=messages,
            codec=copy.deepcopy(self.codec),  # later explanations may register more unseen categories
            link=self.link,
            _predict=predict,
        )
