#!/usr/bin/env python3
r"""``LocalGPExplainer``: model-agnostic local explanations with a GP surrogate sampled by Bayesian optimisation.

BO-LIME (Saini & Prasad): the black box :math:`f` is sampled in the box
:math:`\mathbf x \pm r\boldsymbol\sigma` around the instance (``r`` = ``interval``, :math:`\sigma_i` the
per-feature std of the training data) at points chosen by an acquisition function, an ARD GP surrogate
is refitted as samples arrive, and :math:`1/\ell_i` is the relevance of feature ``i`` (here from a refit with a
shrinkage prior, see ``relevance_prior``). On top of the paper,
the surrogate's exact gradient and integrated-gradient posteriors
(:class:`~gpytorch_explain.PosteriorGradient`, :class:`~gpytorch_explain.PosteriorIntegratedGradients`) give signed
attributions with a standard deviation, and the ``"gradient"`` acquisition samples where the gradient at
``x`` is most uncertain.

Design, per :meth:`LocalGPExplainer.explain`:

1. call the black box on ``x``, the central-difference stencil :math:`\mathbf x \pm \delta r\sigma_i\mathbf e_i`
   or the forward one :math:`\mathbf x + \delta r\sigma_i\mathbf e_i` (``stencil``, ``stencil_kind``; by default
   central when it takes at most half of the budget, else forward within two thirds) and ``n_initial``
   scrambled-Sobol points of the box (one batch);
2. until ``budget`` rows are used: refit the surrogate (warm start; see ``refit_growth``), then choose ``q`` points
   (greedy, each conditioned on the previous ones with the posterior mean as the fantasised value:
   exact for the variance-type acquisitions, the "kriging believer" for EI/PI/LCB) and call the black box on
   them as one batch; the last batch is cut so that exactly ``budget`` rows are evaluated. With
   ``stencil_completion`` and the forward stencil, once only that share of the calls is left, one batch of
   :math:`\mathbf x - \delta r\sigma_j\mathbf e_j` completes the stencil to central differences for the features
   whose forward difference is most in doubt;
3. with ``gradient_tol`` set, stop as soon as every gradient std (user units, after the stencil check) is below it: then
   ``budget`` is an upper bound and ``x_samples`` has fewer rows (``stopped_early``).

Categorical features take only values seen in the training data: the initial design samples them
uniformly from those values; during acquisition optimisation they are fixed to each of a few
combinations (``x``'s own values and ``num_categorical_candidates - 1`` random combinations of seen values)
while the continuous features are optimised (BoTorch's ``optimize_acqf_mixed``), and the best combination
wins. In the surrogate they are numeric codes (so their gradient is the surrogate's slope along the code).
A value of ``x`` never seen in the training data is a ``UserWarning``; ``x`` and its stencil rows (which move one
continuous feature each) are evaluated with it, every other row with seen values. When every perturbed feature is
categorical the space of rows is finite: the initial
design and the acquisition's proposals avoid rows already sampled while unsampled combinations remain (a repeated
proposal is replaced by the unsampled combination of maximum posterior std), and once all have been sampled the
remaining rows repeat, with a warning in ``result.warnings``.
Features with zero variance in the training data are never perturbed and are left out of the surrogate:
relevance 0, gradient 0 with std 0.
"""

from __future__ import annotations

import math
import numbers
import warnings
from collections.abc import Callable, Sequence

import numpy as np
import torch

from ._arguments import _as_bool, _as_count, _as_int, _as_real
from .acquisition import ACQUISITIONS
from .blackbox import BlackBox
from .box import _BoxMixin
from .link import check_link, to_link_scale
from .proposals import _ProposalMixin
from .readout import _ReadoutMixin, _relevance_of
from .result import LocalExplanation
from .stencil import choose_stencil, completion_message
from .surrogate import (
    DEFAULT_PRIOR_SCALE,
    fit_surrogate,
    make_surrogate,
    standardise,
)
from .tabular import as_training_array

__all__ = ["LocalGPExplainer"]

_DT = torch.float64
#: how the relevance's lengthscales are estimated (see ``LocalGPExplainer(relevance_prior=...)``)
RELEVANCE_PRIORS = ("saas", "lognormal")


#: the forward stencil is completed (``stencil_completion``) only when the acquisition has at least this many calls
#: per stenciled feature: with fewer, the calls taken from it cost the surrogate more than the central differences give
_COMPLETION_MIN_FREE = 0.5


def _tagged(tag: str, model, **kwargs) -> list[str]:
    """``fit_surrogate(model, **kwargs)``'s messages, each prefixed by the surrogate's role."""
    return [f"{tag}: {m}" for m in fit_surrogate(model, **kwargs)]


class LocalGPExplainer(_BoxMixin, _ProposalMixin, _ReadoutMixin):
    r"""Explain any black box locally with a GP surrogate sampled by Bayesian optimisation.

    :param predict_fn: callable mapping an ``(m, D)`` float array to ``m`` numbers (numpy, list or tensor);
        ``torch.nn.Module``\ s get tensors. See :func:`~gpytorch_explain.local.from_sklearn_regressor` and
        :func:`~gpytorch_explain.local.from_sklearn_classifier`.
    :param training_data: ``(N, D)`` data giving the per-feature scales :math:`\sigma_i` and categorical values: a
        numpy array, tensor or pandas ``DataFrame``. With a DataFrame, ``predict_fn`` receives DataFrames with its
        columns and dtypes, its non-numeric columns (strings, ``category``, ``bool``) are categorical features
        (their coordinates in the result's arrays are codes into ``explainer.codec.levels``; see
        ``gpytorch_explain.local.tabular``), the feature names default to its column labels, and ``x`` may be a row
        of it (a ``Series``).
    :param acquisition: one of ``"lcb"`` (default), ``"ei"``, ``"pi"``/``"mpi"`` (GPyOpt semantics, see
        ``gpytorch_explain.local.acquisition``), ``"variance"``, ``"integrated_variance"``, ``"gradient"``.
        Recommended for stable explanations of tree ensembles: ``acquisition="variance", interval=2.0,
        lengthscale_prior_scale=0.5, relevance_prior="lognormal"`` (Boston / ExtraTrees, 50 calls, 20 instances x 10
        seeds, ``benchmarks/results/local_vs_lime.txt``: inconsistency of :math:`1/\ell` 0.030 and of the gradient
        0.031, against 0.071 for LIME at 50 samples and 0.008 for LIME at 5,000; with the default SAAS relevance,
        which sends features without evidence to ≈ 0, 1/ℓ gave 0.073; the paper's ``"lcb"``, ``"ei"`` and
        ``"pi"`` gave 0.046-0.050). The remaining run-to-run
        spread is the surrogate's sensitivity to which points the BO path picks: neither a seed-independent
        initial design, nor 100 calls instead of 50, nor more optimiser restarts reduced it consistently.
        Check ``fidelity``: with 30 features and 50 calls (breast cancer / SVC) this setting's surrogate did
        not fit (LOO R² ≈ 0, for the logit of the probability too); ``interval=1.0,
        lengthscale_prior_scale=1.0`` fitted there (LOO R² ≈ 0.7) but was no more stable than LIME; the defaults with
        ``link="logit", attribution_noise=1e-6`` fit it (LOO R² 0.96) and gave a gradient 0.32x as inconsistent as
        LIME at 50 samples (see ``link``).
    :param budget: total number of black-box rows, ``x`` included (an int or numpy integer, as are ``q`` and
        ``n_initial``).
    :param categorical_features: indices of categorical features (values taken from ``training_data``), or column
        labels of a DataFrame.
    :param feature_names: ``D`` names (default ``x0, x1, ...``, or a DataFrame's column labels).
    :param seed: makes :meth:`explain` deterministic (``None``: random).
    :param interval: the box half-width in units of :math:`\sigma_i` (the paper's interval limiter; the paper's
        figures use 0.05). LIME perturbs with std :math:`\sigma_i`; a uniform box of half-width
        :math:`\sqrt 3\sigma_i` has that std, so ``interval`` ≈ 2 compares with LIME's scale.
    :param lengthscale_prior_scale: std of the log-normal lengthscale prior (its centre is BoTorch's
        dimension-scaled one, see ``gpytorch_explain.local.surrogate.make_surrogate``). The default 1.0
        lies between Hvarfner et al.'s :math:`\sqrt 3` and 0.5, which steadies :math:`1/\ell` at ~50 samples
        (Boston benchmark at interval 2: inconsistency 0.050 with :math:`\sqrt 3`, 0.018 with 0.5; 1.0 not
        benchmarked) but makes the gradient's std
        overconfident on nonlinear black boxes (true gradient within 2 std for 4 of 6 features in
        ``tests/test_local_explainer.py``'s black box, against at least 5 with 1.0).
    :param q: points per BO step (one black-box call per step).
    :param num_restarts: L-BFGS-B restarts of the acquisition optimiser (BoTorch's ``optimize_acqf``).
    :param raw_samples: random points from which its restarts are chosen.
    :param n_initial: Sobol points besides ``x`` in the first call (default ``max(2, min(10, budget // 5))``, or
        fewer, down to 1, where that is what lets the stencil fit).
    :param jitter: GPyOpt's acquisition jitter for EI/PI, in output standard deviations.
    :param exploration_weight: GPyOpt's LCB weight ``w``.
    :param gradient_tol: optional stopping rule on the gradient std (user units): ``None`` or a positive finite
        number.
    :param refit_growth: the hyperparameters are refitted (warm start, L-BFGS-B, at most ``refit_maxiter``
        iterations) on the first design, whenever the sample count has grown by this factor since the last
        refit, and always on the final samples; in between the surrogate is conditioned on the new samples
        with the previous hyperparameters. ``1.0`` refits at every step (slower). Those intermediate refits only
        steer the acquisition and stop at ``refit_maxiter`` by design (not reported). The fit on the final samples
        runs longer (``final_maxiter`` iterations, continued once if it stops there; see
        ``gpytorch_explain.local.surrogate.fit_surrogate``), so that it converges; a fit that does not is
        reported in ``result.warnings`` with its numbers.
    :param linear_trend: the gradient and integrated gradients come from a surrogate whose kernel adds a linear
        trend to the ARD RBF (``gpytorch_explain.local.surrogate.fit_trend_surrogate``: two starts, on the
        final samples), the relevance :math:`1/\ell` and the acquisitions from the ARD RBF alone (the paper's
        surrogate). ``False`` takes the attributions from the ARD RBF too; its slope at ``x`` is biased by the
        kernel's curvature on black boxes with a strong linear trend (3-6 % with a 0.5 % std on a linear function
        sampled by ``"variance"``: the true gradient outside two stds for half the features, against 1 in 9 with
        the trend; ``tests/local/test_local_trend.py``).
    :param attribution_noise: ``None`` (default): the attribution surrogate learns its observation-noise
        variance under a broad prior that lets it fall to 1e-6 (``TREND_NOISE_PRIOR``, ``TREND_NOISE_FLOOR`` in
        ``gpytorch_explain.local.surrogate``): a black box is deterministic, so the noise only stands for what the
        kernel cannot resolve: ~0 on a smooth model (the surrogate then nearly interpolates and the unexplained part
        stays function, with its uncertainty), large on a tree ensemble's steps. A number fixes it, in units of the
        standardised output's variance, e.g. ``1e-6`` to force interpolation. Before 2026-11-28 the default was
        BoTorch's noise prior (LogNormal(-4, 1), floor 1e-4), which averaged a weak interaction that oscillates
        across the box away as noise: the gradient's std shrank like noise / sqrt(n) while its mean missed that
        part, tens of stds off (docs/local_notes.md). Needs ``linear_trend=True``.
    :param relevance_prior: how the lengthscales behind ``relevance`` are estimated, on the final samples.
        ``"saas"`` (default): a separate ARD-RBF fit with the SAAS shrinkage prior
        (``gpytorch_explain.local.surrogate.make_relevance_surrogate``), under which a feature without a detectable
        effect goes to a lengthscale of :math:`10^4` box half-widths, relevance ≈ 0. ``"lognormal"``: the
        acquisition surrogate's own lengthscales (the paper's score; the log-normal prior's mode keeps every
        no-effect feature at a finite lengthscale: 15-17 % of the total for two no-effect features out of six on
        a smooth black box, against 0.3 % with ``"saas"``, ``benchmarks/results/local_smooth_consistency.txt``).
        The acquisitions, the gradient and IG do not depend on it.
    :param relevance_bootstrap: ``B``, the number of bootstrap refits behind ``relevance`` (default 8; 0: the
        single fit's normalised :math:`1/\ell`, the paper's score). Each refit draws the samples with replacement
        and starts from the full fit (with ``relevance_noise`` set: keeps ``x`` and its stencil's rows and 0.3 of the
        other samples, drawn without replacement, and starts cold, from the relevance surrogate's initial
        hyperparameters), and runs at most 30 L-BFGS-B iterations; ``relevance``
        is the mean of their normalised :math:`1/\ell` and ``relevance_std`` its std
        (``gpytorch_explain.local.surrogate.bootstrap_relevances``). Bagging steadies a score that a single
        fit on 50 samples sets by a few points: at 50 calls 1/ℓ became 1.06-2.3x steadier across seeds with the
        defaults (breast cancer / SVC to the issue's smooth toy; ``docs/local_notes.md``) for 0.6-1.6 s CPU per
        explanation. ``relevance_std`` is not an error bar for a rerun (see
        :class:`~gpytorch_explain.local.LocalExplanation`).
    :param relevance_noise: ``None`` (default): the SAAS relevance surrogate learns its observation-noise variance
        (warm-started from the acquisition surrogate, BoTorch's prior, at least 1e-4). A number fixes it, in units of
        the standardised output's variance, e.g. ``1e-6`` to make the relevance's fit interpolate (needs
        ``relevance_prior="saas"``). On a smooth black box with a stencil a learned noise can absorb the stencil's
        small differences next to ``x``, and the SAAS fit then explains the few far samples by one to three
        features that change from seed to seed (on breast cancer / SVC, logit link, 50 calls: a feature whose slope
        at ``x`` is a tenth of the largest took the top relevance at one seed in six); interpolating makes the
        lengthscales answer to every sample: 1/l's inconsistency went 0.143 -> 0.119 there (20 instances x 10
        seeds, against 8 bootstrap refits of the learned-noise fit), its top-5 agreement with LIME at 5,000 samples
        0.31 -> 0.38 (``docs/local_notes.md``). Bootstrap resamples drop stencil rows, which such a fit reads, so
        with a fixed noise the refits keep ``x`` and the stencil's rows and subsample the others, and they start
        cold (a warm start at the full fit carries its seed-dependent choice of features into every refit): 1/l's
        inconsistency went 0.119 -> 0.039 with 16 refits (``PRESETS["smooth_classifier"]``). Not a default: on a
        saturating regressor without the link (tanh of a linear score) a feature without effect got up to 0.16 of the
        relevance, and a tree ensemble's steps are not noise-free function.
    :param stencil: ``"auto"`` (default), ``None`` or a half-width :math:`\delta` in box half-widths: the first
        call then also evaluates a finite-difference stencil around ``x`` on every perturbed continuous feature
        (before the Sobol points; see ``stencil_kind``), so the slope at ``x`` is pinned by samples rather than by the
        surrogate's smoothness. ``"auto"`` uses :math:`\delta` = ``AUTO_STENCIL`` (0.1): the central stencil when it
        takes at most half of the budget (``AUTO_STENCIL_SHARE``), else the forward stencil when it takes at most two
        thirds (``AUTO_FORWARD_SHARE``), each only if at least 1 call is left to the acquisition; otherwise none,
        and ``result.warnings`` says so ("stencil: off"). At 50 calls: up to 12 features central, 13-33 forward.
        Until 2026-11-28 the share was a quarter and the forward stencil did not exist; on
        f = x·a + 0.1 sin(x₀x₁) with 10 features (5 without effect) at 50 calls, 3 instances x 4 seeds, the central
        stencil took the true gradient inside two stds for 120 of 120 features against 112 (largest miss 13 stds)
        and made the gradient steadier (inconsistency 0.0010 against 0.0018) but 1/l less steady (0.017 against
        0.011). With 30 features at 50 calls (a smooth synthetic black box, and breast cancer / SVC) the surrogate
        alone reports the box's average slope with an overconfident std (268 of 300 and 232 of 300 true gradients
        inside two stds, misses up to 45 stds); the forward stencil covered 300 of 300 in both
        (``benchmarks/results/local_gradient_calibration_highdim.txt``).
        On tree ensembles the stencil spends calls where the black box is flat or jumps: on Boston / ExtraTrees
        (13 features, ``stencil=0.1`` central at 50 calls) it made ``"variance"`` at interval 2 less steady than LIME
        at 50 samples (1/l inconsistency 0.114 against 0.030 without it); pass ``stencil=None`` there.
        The stencil's finite differences are also
        a direct reading of the slope at ``x``: ``gradient_std`` is widened to reach them where the surrogate
        disagrees (``"stencil check"`` in ``result.warnings``). On 6 smooth 6-feature black boxes x 8 instances at
        50 calls (``"lcb"``) the true gradient was inside two stds for 288 of 288 features with the defaults (285
        before the stencil check), 272 with ``stencil=None``, and 230 before both this and the trend surrogate's
        noise prior were defaults (largest miss 52 stds; ``benchmarks/results/local_gradient_calibration.txt``).
        Where the gap between the two exceeds both the surrogate's std and the difference's own error estimate
        (truncation and noise), each lies outside the other's error bar and ``gradient_mean`` reports the difference
        (``result.gradient_from_stencil``): the surrogate, one lengthscale per feature across the box, can carry the
        curvature of far samples to ``x`` (breast cancer / SVC through the logit, 30 features, forward stencil: one or
        two features per explanation had the surrogate's slope of the wrong sign, e.g. +1.07 ± 0.32 where the true
        slope was -1.17 and the difference -1.22). On random black boxes with steep tanh features near ``x`` the
        difference was the closer reading in 19 of 23 such features, and the two-std coverage did not change.
    :param stencil_kind: ``"auto"`` (default), ``"central"`` or ``"forward"``. Central: the rows
        :math:`\mathbf x \pm \delta r\sigma_i\mathbf e_i` (2 per feature, in feature order, ``+`` first), whose
        differences :math:`(f(\mathbf x + h\mathbf e_i) - f(\mathbf x - h\mathbf e_i))/2h` are exact up to
        :math:`O(h^2 f^{(3)})`. Forward: the rows :math:`\mathbf x + \delta r\sigma_i\mathbf e_i` (1 per feature),
        differences :math:`(f(\mathbf x + h\mathbf e_i) - f(\mathbf x))/h`, exact up to :math:`O(h f'')`.
        ``"auto"``: central when it fits (see ``stencil``), else forward. ``self.stencil_kind`` holds the design
        used.
    :param stencil_completion: the share of the acquisition's calls (those after ``x``, the stencil and the Sobol
        points) that the forward stencil may spend completing itself to central differences (default 0.5; 0 turns it
        off). Once only that many calls are left, the black box is called at
        :math:`\mathbf x - \delta r\sigma_j\mathbf e_j` (one batch) for every stenciled feature when the calls
        suffice, else for the features whose forward difference is most in doubt (where its truncation estimate, or
        its gap to the surrogate's slope, exceeds that slope's std; the largest first, in standardised output per box
        half-width), and the stencil check reads the central difference there: truncation :math:`O(h^2 f^{(3)})`
        instead of :math:`O(h f'')`. Calls the completion does not need go back to the acquisition; the rows are in
        ``x_samples`` and ``result.warnings`` names the features ("stencil completion"). Only with the forward
        stencil, and only when the acquisition has at least half a call per stenciled feature (with fewer, the calls
        it takes cost the surrogate more than the central differences give): at 50 calls, 13-26 continuous features.
        On random black boxes with steep tanh features near ``x`` (``benchmarks/local_steep_features.py``) it took
        the true gradients outside two stds from 13 to 5 of 192 (8 features, forward stencil, 40 calls: every feature
        completed) and from 26 to 19 of 192 (12 features, 30 calls) and cut the mean error to 0.28-0.68x. On
        Boston / ExtraTrees (13 features, 50 calls, every feature completed) the gradient's inconsistency went 0.045
        to 0.0427 and 1/l's 0.091 to 0.0741 (``benchmarks/results/local_vs_lime.txt``). Choosing only the features
        in doubt there made the gradient less steady (0.068): the choice depends on the surrogate and so on the seed,
        and a tree's forward and central differences differ, hence every feature whenever the calls suffice.
    :param link: the output scale of the surrogates. ``"identity"`` (default): the black box's outputs.
        ``"logit"``: for a black box returning probabilities (a classifier's ``predict_proba[:, k]``), the surrogates
        model :math:`\operatorname{logit} p`, where a smooth classifier stays smooth while :math:`p` saturates; the
        gradient (exactly, :math:`\partial p/\partial x_i = p(1-p)\,\partial\operatorname{logit}p/\partial x_i`
        with :math:`p(\mathbf x)` observed), the integrated gradients (mean by quadrature, std by Monte Carlo) and
        :meth:`~gpytorch_explain.local.LocalExplanation.predict` are returned on the probability scale;
        ``relevance`` and ``fidelity`` are those of the logit's surrogate (``gpytorch_explain.local.link``). With
        ``attribution_noise=1e-6`` it is the recommended setting for smooth classifiers: on breast cancer / SVC
        (30 features, 50 calls, 20 instances x 10 seeds) the gradient's inconsistency was 0.0134 against 0.173 for
        continuous LIME at 50 samples and 0.0167 at 5,000 (0.141 with the defaults before the stencil's difference
        replaced contradicted slopes), LOO R² 0.960 against 0.893
        (``benchmarks/results/local_vs_lime.txt``). Not for tree ensembles, whose probabilities are step
        functions with exact 0s and 1s.
    :param input_type: what ``predict_fn`` receives: ``"auto"`` (tensors for a ``torch.nn.Module``, DataFrames when
        ``training_data`` is one, numpy arrays otherwise), ``"numpy"``, ``"torch"`` or ``"pandas"``.
    :param num_threads: torch threads during :meth:`explain` (restored afterwards). The surrogate's matrices
        are tiny (``budget`` rows), where thread start-up dominates: one thread is ~100x faster on a loaded
        machine. ``None`` leaves the setting alone.

    Example:
        >>> import numpy as np
        >>> from gpytorch_explain.local import LocalGPExplainer
        >>> data = np.random.RandomState(0).randn(200, 3)
        >>> f = lambda X: 2.0 * X[:, 0] - X[:, 1]
        >>> result = LocalGPExplainer(f, data, budget=12, seed=0, raw_samples=16).explain(data[0])
        >>> result.x_samples.shape, round(float(result.relevance.sum()), 6)
        ((12, 3), 1.0)
    """

    def __init__(
        self,
        predict_fn: Callable,
        training_data,
        *,
        acquisition: str = "lcb",
        budget: int = 50,
        categorical_features: Sequence[int] | None = None,
        feature_names: Sequence[str] | None = None,
        seed: int | None = None,
        interval: float = 1.0,
        lengthscale_prior_scale: float = DEFAULT_PRIOR_SCALE,
        q: int = 1,
        n_initial: int | None = None,
        jitter: float = 0.01,
        exploration_weight: float = 2.0,
        gradient_tol: float | None = None,
        num_restarts: int = 2,
        raw_samples: int = 32,
        num_categorical_candidates: int = 4,
        num_mc_points: int = 256,
        refit_maxiter: int = 60,
        refit_growth: float = 1.5,
        final_maxiter: int = 200,
        input_type: str = "auto",
        num_threads: int | None = 1,
        progress: bool = False,
        linear_trend: bool = True,
        attribution_noise: float | None = None,
        relevance_prior: str = "saas",
        relevance_bootstrap: int = 8,
        relevance_noise: float | None = None,
        stencil: float | str | None = "auto",
        stencil_kind: str = "auto",
        stencil_completion: float = 0.5,
        link: str = "identity",
    ):
        data, cats, names, self.codec = as_training_array(training_data, categorical_features, feature_names)
        self.training_data = data
        D = data.shape[1]
        self.num_features = D
        if self.codec is not None and self.codec.encoded and input_type in ("numpy", "torch"):
            raise ValueError(
                f"input_type={input_type!r} cannot carry training_data's non-numeric columns "
                f"{[self.codec.columns[j] for j in self.codec.levels]}; use input_type='auto' (DataFrames)."
            )
        decode = self.codec.decode if self.codec is not None else None
        self.black_box = BlackBox(predict_fn, D, input_type=input_type, decode=decode)
        model_names = getattr(predict_fn, "feature_names_in_", None)  # from_sklearn_regressor / _classifier
        if (
            self.black_box.input_type != "pandas"
            and model_names is not None
            and list(model_names) != [str(n) for n in names]
            and sorted(model_names) == sorted(str(n) for n in names)
        ):
            raise ValueError(
                f"the model reads its columns by position in the order {list(model_names)}, but training_data's "
                f"columns are {list(names)}: every feature would get another one's attribution. Pass training_data "
                "in the model's column order (e.g. training_data[list(model.feature_names_in_)]), or a DataFrame "
                "with input_type='auto'."
            )
        self._returns_probability = getattr(predict_fn, "returns_probability", False) is True  # from_sklearn_classifier
        if acquisition not in ACQUISITIONS:
            raise ValueError(f"Unknown acquisition {acquisition!r}; choose one of {ACQUISITIONS}.")
        self.acquisition = acquisition
        self.budget = _as_int("budget", budget)
        self.n_initial = max(2, min(10, self.budget // 5)) if n_initial is None else _as_int("n_initial", n_initial)
        if self.n_initial < 1:
            raise ValueError(f"n_initial must be >= 1, got {n_initial!r}.")
        if self.budget < self.n_initial + 2:
            raise ValueError(
                f"budget = {budget} is smaller than the initial design: x itself + n_initial = {self.n_initial} "
                f"Sobol points + at least one BO step need budget >= {self.n_initial + 2}."
            )
        self.interval = _as_real("interval", interval, positive=True)
        self.lengthscale_prior_scale = _as_real("lengthscale_prior_scale", lengthscale_prior_scale, positive=True)
        self.q = _as_int("q", q)
        if self.q < 1:
            raise ValueError(f"q must be >= 1, got {q!r}.")
        self.categorical_features = cats
        self.categorical_values = {c: np.unique(data[:, c]) for c in self.categorical_features}
        self.feature_names = names
        self._named = feature_names is not None  # labelled rows are then read by label (not the default x0, x1, ...)
        with np.errstate(over="ignore", invalid="ignore"):
            self.sigma = data.std(axis=0)
        if not np.isfinite(self.sigma).all():
            bad = [names[j] for j in np.flatnonzero(~np.isfinite(self.sigma))]
            raise ValueError(f"the std of feature(s) {bad[:10]} overflows float64; rescale training_data.")
        tiny = 1e-12 * np.abs(data).max(axis=0)  # relative: data in units of 1e-9 (or 1e9) are as good as any
        self.active = np.flatnonzero(self.sigma > tiny)
        faint = [j for j in np.flatnonzero((self.sigma > 0) & (self.sigma <= tiny)) if j not in set(cats)]
        if faint:
            listed = ", ".join(
                f"{names[j]} (std {self.sigma[j]:.3g} at |x| up to {np.abs(data[:, j]).max():.3g})" for j in faint[:5]
            )
            warnings.warn(
                f"training_data's feature(s) {listed}{', ...' if len(faint) > 5 else ''} vary by less than 1e-12 of "
                "their magnitude: they are treated as constant (never perturbed, relevance 0, gradient 0 ± 0). If "
                "such a variation matters to the black box, subtract an offset from the feature (in training_data "
                "and inside predict_fn) so that its values are resolved.",
                UserWarning,
                stacklevel=2,
            )
        if self.active.size == 0:
            raise ValueError("Every feature of training_data has zero variance: there is nothing to perturb.")
        if seed is not None:
            seed = _as_int("seed", seed)
            if not 0 <= seed < 2**32:
                raise ValueError(f"seed must be None or an integer in [0, 2**32), got {seed}.")
        self.seed = seed
        with np.errstate(over="ignore"):
            half_widths = self.interval * self.sigma[self.active]
        if not np.isfinite(half_widths).all():
            raise ValueError(
                f"the box half-widths interval × std overflow (interval = {self.interval:g}, largest std "
                f"{self.sigma[self.active].max():g}); rescale the data or use a smaller interval."
            )
        self.jitter = _as_real("jitter", jitter, lower=0.0)
        self.exploration_weight = _as_real("exploration_weight", exploration_weight, lower=0.0)
        if gradient_tol is not None:
            if isinstance(gradient_tol, (bool, np.bool_)) or not isinstance(gradient_tol, numbers.Real):
                raise TypeError(f"gradient_tol must be None or a positive number, got {gradient_tol!r}.")
            if not (np.isfinite(float(gradient_tol)) and gradient_tol > 0):
                raise ValueError(f"gradient_tol must be None or a positive finite number, got {gradient_tol!r}.")
            gradient_tol = float(gradient_tol)
        self.gradient_tol = gradient_tol
        self.num_restarts = _as_count("num_restarts", num_restarts)
        self.raw_samples = _as_count("raw_samples", raw_samples, self.num_restarts)
        self.num_categorical_candidates = _as_count("num_categorical_candidates", num_categorical_candidates)
        self.linear_trend = _as_bool("linear_trend", linear_trend)
        if attribution_noise is not None:
            attribution_noise = _as_real("attribution_noise", attribution_noise)
            if not (0.0 < attribution_noise < 1.0):
                raise ValueError(
                    "attribution_noise must be None (learned) or a variance in (0, 1), in units of the "
                    f"standardised output's variance; got {attribution_noise}."
                )
            if not self.linear_trend:
                raise ValueError("attribution_noise fixes the trend surrogate's noise: it needs linear_trend=True.")
        self.attribution_noise = attribution_noise
        if relevance_prior not in RELEVANCE_PRIORS:
            raise ValueError(f"Unknown relevance_prior {relevance_prior!r}; choose one of {RELEVANCE_PRIORS}.")
        self.relevance_prior = relevance_prior
        self.relevance_bootstrap = _as_count("relevance_bootstrap", relevance_bootstrap, 0)
        if relevance_noise is not None:
            relevance_noise = _as_real("relevance_noise", relevance_noise)
            if not (0.0 < relevance_noise < 1.0):
                raise ValueError(
                    "relevance_noise must be None (learned) or a variance in (0, 1), in units of the "
                    f"standardised output's variance; got {relevance_noise}."
                )
            if relevance_prior != "saas":
                raise ValueError(
                    "relevance_noise fixes the noise of the SAAS relevance surrogate: it needs relevance_prior='saas' "
                    "(with 'lognormal' the relevance comes from the acquisition surrogate, whose noise stays learned)."
                )
        self.relevance_noise = relevance_noise
        n_cont = sum(1 for j in self.active if j not in self.categorical_features)
        if n_initial is None and stencil is not None:
            # the default's minimum of 2 Sobol points gives way to the stencil: at 9 calls for 6 features one Sobol
            # point lets the forward stencil in (281 of 288 true slopes inside two stds, largest miss 3.9 stds,
            # against 250 and 23 without it: benchmarks/results/local_gradient_calibration.txt)
            def _fits(n0: int) -> bool:
                try:
                    return choose_stencil(stencil, stencil_kind, n_cont, self.budget, n0)[0] is not None
                except ValueError:
                    return False

            n0 = self.n_initial
            while n0 > 1 and not _fits(n0):
                n0 -= 1
            if _fits(n0):
                self.n_initial = n0
        # the stencil's half-width (None: no stencil), its design, and why "auto" left it off (None otherwise)
        stencil, self.stencil_kind, self._stencil_off_reason = choose_stencil(
            stencil, stencil_kind, n_cont, self.budget, self.n_initial
        )
        self.stencil = stencil
        self.stencil_completion = _as_real("stencil_completion", stencil_completion, lower=0.0)
        if self.stencil_completion > 1.0:
            raise ValueError(f"stencil_completion must be a share of calls in [0, 1], got {stencil_completion}.")
        self._completion_calls = 0  # calls the forward stencil may spend on x - h e_j (see ``stencil_completion``)
        free = self.budget - (1 + n_cont + self.n_initial)  # the acquisition's calls after the first one
        if stencil is not None and self.stencil_kind == "forward" and free >= _COMPLETION_MIN_FREE * n_cont:
            self._completion_calls = int(math.floor(self.stencil_completion * free))
        self.num_mc_points = _as_count("num_mc_points", num_mc_points)
        self.refit_maxiter = _as_count("refit_maxiter", refit_maxiter)
        self.refit_growth = _as_real("refit_growth", refit_growth, lower=1.0)
        self.final_maxiter = _as_count("final_maxiter", final_maxiter)
        self.num_threads = None if num_threads is None else _as_count("num_threads", num_threads)
        self.progress = _as_bool("progress", progress)
        self.link = check_link(link)

    # ------------------------------------------------------------------ main loop
    def explain(self, x, baseline=None) -> LocalExplanation:
        """Explain the black box at ``x`` (``(D,)``, numpy or tensor); see the module docstring for the steps.

        :param baseline: IG baseline ``(D,)`` in user units (default: the training mean clipped to the box; for a
            categorical feature its most frequent value in the training data).
        """
        x = self._check_x(x)
        if baseline is not None:  # checked up front, before any black-box call
            self._check_x(baseline, "baseline")
        self._warn_unseen_categories(x)
        rng = np.random.RandomState(self.seed)
        torch_seed = int(rng.randint(0, 2**31 - 1))
        threads = torch.get_num_threads()
        try:
            if self.num_threads is not None:
                torch.set_num_threads(self.num_threads)
            with torch.random.fork_rng():
                torch.manual_seed(torch_seed)
                return self._explain(x, baseline, rng)
        finally:
            torch.set_num_threads(threads)

    def _explain(self, x: np.ndarray, baseline, rng: np.random.RandomState) -> LocalExplanation:
        act = self.active
        d = act.size
        scale = self.interval * self.sigma[act]
        dtype = self.black_box._torch_spec()[0] if self.black_box.input_type == "torch" else torch.float64
        eps = torch.finfo(dtype).eps
        coarse = np.flatnonzero(scale < 10 * eps * np.abs(x[act]))  # the whole box spans < ~20 representable steps
        if coarse.size:
            j = int(act[coarse[0]])
            raise ValueError(
                f"the box half-width interval × std is below the resolution of the black box's {dtype} inputs at x "
                f"for feature(s) {[self.feature_names[int(act[k])] for k in coarse[:10]]} (e.g. "
                f"{scale[coarse[0]]:.3g} at x = {x[j]:.6g}, where one step of {dtype} is {eps * abs(x[j]):.3g}); "
                "use a larger interval or centre the data."
            )
        cat_pos = {int(np.flatnonzero(act == c)[0]): c for c in self.categorical_features if c in act}
        lower = -torch.ones(d, dtype=_DT)
        upper = torch.ones(d, dtype=_DT)
        for p, c in cat_pos.items():
            codes = (self.categorical_values[c] - x[c]) / scale[p]
            lower[p], upper[p] = min(codes.min(), 0.0), max(codes.max(), 0.0)
        bounds = torch.stack([lower, upper])
        u0 = torch.zeros(d, dtype=_DT)

        # 1. x, the stencil and the initial Sobol design, one call
        X_init = self._initial_design(x, scale, cat_pos, d, rng)
        self._replaced: list[int] = []
        self._backward: dict[int, int] = {}  # feature -> row of x - h e_j (the forward stencil, completed)
        completed = self._completion_calls == 0
        self._exhausted: list[int] = []
        y_all = self.black_box(np.vstack([x[None, :], X_init]))
        X_all = self.black_box.last_input  # the rows as the black box received them (e.g. rounded to float32)
        self._rows_received = X_all  # the stencil's differences divide by the steps received

        messages: list[str] = []
        state = None
        n_fit = 0
        stopped = False
        bar = None
        if self.progress:
            from tqdm.auto import tqdm

            bar = tqdm(total=self.budget, initial=len(y_all), desc="black-box calls")
        while True:
            g_all, _ = to_link_scale(self.link, y_all)  # the surrogates' scale (see ``link``)
            ym, ys, z = standardise(g_all)
            model = make_surrogate(
                self._to_u(X_all, x, scale),
                torch.as_tensor(z, dtype=_DT),
                state,
                prior_scale=self.lengthscale_prior_scale,
            )
            n = len(y_all)
            if state is None or n >= self.budget or n >= self.refit_growth * n_fit:
                final = n >= self.budget
                messages += _tagged(
                    "acquisition surrogate",
                    model,
                    maxiter=self.final_maxiter if final else self.refit_maxiter,
                    final=final,
                    watch=_relevance_of if final and self.relevance_prior == "lognormal" else None,
                    watch_label="normalised relevances",
                )
                n_fit = n
            else:
                model.eval()
            state = model.state_dict()
            if n >= self.budget:
                break
            if self.gradient_tol is not None and self._gradient_ok(model, u0, ys, scale, g_all, y_all[0]):
                if n_fit != n:  # the rule holds with the old hyperparameters: refit on all samples, check again
                    messages += _tagged("acquisition surrogate", model, maxiter=self.refit_maxiter, final=False)
                    n_fit = n
                    state = model.state_dict()
                if self._gradient_ok(model, u0, ys, scale, g_all, y_all[0]):
                    messages += _tagged(  # the result's fit, to convergence
                        "acquisition surrogate",
                        model,
                        maxiter=self.final_maxiter,
                        watch=_relevance_of if self.relevance_prior == "lognormal" else None,
                        watch_label="normalised relevances",
                    )
                    stopped = True
                    break
            if not completed and self.budget - n <= self._completion_calls:
                completed = True
                js = self._completion_features(model, u0, ys, scale, g_all, self.budget - n)
                if js:
                    y_new = self.black_box(self._backward_rows(js, x, scale))
                    self._backward.update({int(j): len(y_all) + k for k, j in enumerate(js)})
                    X_all, y_all = np.vstack([X_all, self.black_box.last_input]), np.concatenate([y_all, y_new])
                    self._rows_received = X_all
                    if bar is not None:
                        bar.update(len(y_new))
                    continue
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                left = self.budget - n - (0 if completed else self._completion_calls)  # > 0: kept calls stay kept
                U_new = self._propose(model, u0, bounds, min(self.q, left), cat_pos, x, scale, rng)
            messages += [
                f"acquisition (n={n}): {w.category.__name__}: {str(w.message).splitlines()[0]}" for w in caught
            ]
            y_new = self.black_box(self._to_user(U_new, x, scale))
            X_all, y_all = np.vstack([X_all, self.black_box.last_input]), np.concatenate([y_all, y_new])
            if bar is not None:
                bar.update(len(y_new))
        if bar is not None:
            bar.close()
        if self._backward:
            every = len(self._backward) == len([j for j in act if j not in self.categorical_features])
            messages.append(completion_message([self.feature_names[j] for j in self._backward], every))
        messages += self._proposal_messages(cat_pos, d)
        g_all, notes = to_link_scale(self.link, y_all)
        messages += notes
        return self._result(model, x, X_all, y_all, g_all, ym, ys, scale, baseline, messages, stopped, rng)
