#!/usr/bin/env python3
r"""The result of :meth:`~gpytorch_explain.local.LocalGPExplainer.explain`: scores with uncertainty, samples, plots."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from .tabular import is_frame, is_series

__all__ = ["LocalExplanation"]


@dataclass
class LocalExplanation:
    r"""A local explanation of a black box at one instance ``x`` (all arrays numpy, in the user's units).

    The surrogates share the samples. The acquisitions use the paper's ARD-RBF surrogate. The relevance comes from
    an ARD-RBF refit with the SAAS shrinkage prior (``LocalGPExplainer(relevance_prior="saas")``, the default;
    ``"lognormal"``: from the acquisition surrogate itself). The gradient, the integrated gradients,
    :meth:`predict` and ``fidelity`` come from the attribution surrogate, which adds a linear trend to the ARD RBF
    (``linear_trend=True``, the default; with ``False`` they come from the acquisition surrogate). With
    ``LocalGPExplainer(link="logit")`` the surrogates model the logit of a probability and the gradient, the
    integrated gradients and :meth:`predict` are on the probability scale (``gpytorch_explain.local.link``);
    ``relevance`` and ``fidelity`` are the logit surrogate's.

    :ivar relevance: ``(D,)`` ARD relevance :math:`1/\ell_i` (lengthscales in box units
        :math:`r\sigma_i`) normalised to sum to 1 (the paper's score); 0 for zero-variance features, ≈ 0 (a
        lengthscale of up to :math:`10^4` box half-widths) for features without a detectable effect under SAAS.
        With ``LocalGPExplainer(relevance_bootstrap=B)`` (``B = 8`` by default) it is the mean of that score over
        ``B`` refits of the relevance surrogate on bootstrap resamples of the samples (bagging: a single fit's
        lengthscales are a jumpy function of 50 samples); with ``B = 0``, the single fit's score.
    :ivar relevance_std: ``(D,)`` the std of the normalised :math:`1/\ell_i` over those bootstrap refits (0 with
        ``B = 0`` and for zero-variance features): which relevances the samples fix firmly and which they do not.
        It is *not* an error bar for a rerun: each refit starts at the full fit's hyperparameters, is cut after
        30 L-BFGS-B iterations and sees the same sampled points, while another seed samples other points. On the
        benchmarks' Boston / ExtraTrees and breast-cancer / SVC explanations (50 calls) it was 0.56× and 0.39×
        (medians) the std of ``relevance`` across seeds, so it is left out of :meth:`summary` and :meth:`plot`.
    :ivar lengthscales: ``(D,)`` the lengthscales of the relevance surrogate fitted on all samples, in the user's
        units (``inf`` for zero-variance features).
    :ivar gradient_mean: ``(D,)`` posterior mean of :math:`\partial f/\partial x_i` of the surrogate at ``x``;
        with a stencil, the stencil's finite difference instead for the features where the two contradict each other
        (``gradient_from_stencil``).
    :ivar gradient_std: ``(D,)`` its posterior standard deviation (latent), widened by the stencil check to reach the
        finite difference (and, for the forward stencil, to include its truncation error).
    :ivar gradient_from_stencil: ``(D,)`` bool: ``True`` where ``gradient_mean`` is the stencil's finite difference
        :math:`d_i` rather than the surrogate's slope :math:`m_i`, because their gap exceeded both the surrogate's
        std and the difference's own error estimate (truncation and noise; see ``LocalGPExplainer(stencil=...)``).
    :ivar integrated_gradients: ``(D,)`` posterior mean of the surrogate's integrated gradients from
        ``baseline`` to ``x`` (they sum to the surrogate's :math:`f(\mathbf x) - f(\mathbf b)`).
    :ivar integrated_gradients_std: ``(D,)`` their posterior standard deviation.
    :ivar x_samples: ``(n, D)`` every row the black box was called on, in call order, ``x`` first
        (``n`` = budget, or fewer when the stopping rule fired), as the black box received them: a float32
        ``torch.nn.Module`` gets (and the surrogates are fitted on) the rows rounded to float32, here cast back to
        float64.
    :ivar y_samples: ``(n,)`` the black box's outputs.
    :ivar fidelity: leave-one-out :math:`R^2` of the surrogate on its samples (closed form); NaN when the black box
        returned the same value at every sample (``warnings`` says so).
    :ivar warnings: messages from the surrogate fits and checks (empty when all went well).
    :ivar link: the surrogates' output scale, ``"identity"`` or ``"logit"`` (see above).
    :ivar codec: for ``training_data`` given as a pandas DataFrame, its
        :class:`~gpytorch_explain.local.FrameCodec` (``None`` otherwise): the arrays above hold the codes of
        its non-numeric columns, :meth:`samples_frame` the rows as the black box received them.
    """

    x: np.ndarray
    relevance: np.ndarray
    gradient_mean: np.ndarray
    gradient_std: np.ndarray
    integrated_gradients: np.ndarray
    integrated_gradients_std: np.ndarray
    baseline: np.ndarray
    x_samples: np.ndarray
    y_samples: np.ndarray
    fidelity: float
    feature_names: list[str]
    acquisition: str
    lengthscales: np.ndarray
    stopped_early: bool = False
    warnings: list[str] = field(default_factory=list)
    codec: object = field(default=None, repr=False)
    link: str = "identity"
    relevance_std: np.ndarray | None = None
    gradient_from_stencil: np.ndarray | None = None
    _predict: object = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if self.relevance_std is None:
            self.relevance_std = np.zeros_like(np.asarray(self.relevance, dtype=np.float64))
        if self.gradient_from_stencil is None:
            self.gradient_from_stencil = np.zeros(np.shape(self.relevance), dtype=bool)

    def predict(self, X) -> tuple[np.ndarray, np.ndarray]:
        r"""The surrogate's posterior mean and std (latent) at ``X`` (``(m, D)``, user units, or a DataFrame); with
        ``link="logit"`` the mean and std of the probability :math:`\sigma(g)` under the logit's posterior."""
        if self._predict is None:
            raise RuntimeError("This explanation carries no surrogate.")
        if self.codec is not None and is_series(X):  # one row, as explain() takes it
            X = X.to_frame().T
        if self.codec is not None and is_frame(X):
            X = self.codec.encode(X)
        elif is_frame(X) or is_series(X):
            X = X.to_numpy()
        X = X.detach().cpu().numpy() if torch.is_tensor(X) else X
        try:
            X = np.atleast_2d(np.asarray(X, dtype=np.float64))
        except (TypeError, ValueError) as err:
            raise ValueError(f"X must be numeric rows ({err}).") from err
        if X.ndim != 2 or X.shape[1] != self.x.size:
            raise ValueError(f"X must be (m, {self.x.size}) or one row ({self.x.size},), got shape {X.shape}.")
        if not np.isfinite(X).all():
            raise ValueError(f"X contains NaN or infinite values (in {int((~np.isfinite(X).all(1)).sum())} row(s)).")
        return self._predict(X)

    def samples_frame(self):
        """The sampled rows as the black box received them: a DataFrame (needs ``training_data`` as a DataFrame)."""
        if self.codec is None:
            raise RuntimeError("samples_frame() needs an explainer built on a pandas DataFrame; see x_samples.")
        return self.codec.decode(self.x_samples)

    def to_frame(self):
        """The per-feature table as a pandas DataFrame indexed by feature name (needs pandas).

        Columns: ``value`` (x; categories as values for a DataFrame's text columns), ``relevance``,
        ``relevance_std``, ``gradient_mean``, ``gradient_std``, ``gradient_from_stencil``, ``integrated_gradients``,
        ``integrated_gradients_std``, ``baseline``, ``lengthscale``; rows in feature order.
        """
        try:
            import pandas as pd
        except ImportError as err:  # pragma: no cover - depends on the environment
            raise ImportError("to_frame() needs pandas: pip install pandas") from err
        value, baseline = list(self.x), list(self.baseline)
        if self.codec is not None:
            value = [self.codec.value_text(j, v) if j in self.codec.levels else v for j, v in enumerate(self.x)]
            baseline = [
                self.codec.value_text(j, v) if j in self.codec.levels else v for j, v in enumerate(self.baseline)
            ]
        return pd.DataFrame(
            {
                "value": value,
                "relevance": self.relevance,
                "relevance_std": self.relevance_std,
                "gradient_mean": self.gradient_mean,
                "gradient_std": self.gradient_std,
                "gradient_from_stencil": self.gradient_from_stencil,
                "integrated_gradients": self.integrated_gradients,
                "integrated_gradients_std": self.integrated_gradients_std,
                "baseline": baseline,
                "lengthscale": self.lengthscales,
            },
            index=pd.Index(self.feature_names, name="feature"),
        )

    def _value_text(self, j: int) -> str:
        if self.codec is not None and j in self.codec.levels:
            return self.codec.value_text(j, self.x[j])[:10]
        return f"{self.x[j]:.4g}"

    def _top(self, top_k: int | None) -> np.ndarray:
        """Feature positions by decreasing relevance, the first ``top_k`` (all for ``None``)."""
        order = np.argsort(-self.relevance, kind="stable")
        if top_k is None:
            return order
        if isinstance(top_k, (bool, np.bool_)) or not isinstance(top_k, (int, np.integer)) or top_k < 1:
            raise ValueError(f"top_k must be None or a positive integer, got {top_k!r}.")
        return order[:top_k]

    def summary(self, top_k: int | None = None) -> str:
        """A text table of the features ordered by relevance (± is 1 posterior std, latent)."""
        order = self._top(top_k)
        width = max([len(n) for n in self.feature_names] + [7])
        lines = [
            f"Local GP explanation ({self.acquisition}, {len(self.y_samples)} black-box evaluations, "
            f"{'surrogates on the logit, ' if self.link == 'logit' else ''}"
            f"LOO R² = {self.fidelity:.3f}{', stopped early' if self.stopped_early else ''})",
            f"{'feature':<{width}}  {'value':>10}  {'relevance':>9}  {'gradient ± 1 std':>24}  {'IG ± 1 std':>24}",
        ]
        for j in order:
            lines.append(
                f"{self.feature_names[j]:<{width}}  {self._value_text(j):>10}  {self.relevance[j]:>9.3f}  "
                f"{self.gradient_mean[j]:>11.4g} ± {self.gradient_std[j]:<10.3g}  "
                f"{self.integrated_gradients[j]:>11.4g} ± {self.integrated_gradients_std[j]:<10.3g}"
            )
        if self.warnings:
            lines.append(f"{len(self.warnings)} warning(s); see .warnings")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.summary()

    def plot(self, top_k: int | None = None, axes=None):
        """Relevance, gradient and IG bars (error bars: ±1 posterior std, latent). Needs matplotlib.

        :return: the three matplotlib Axes.
        """
        try:
            import matplotlib.pyplot as plt
        except ImportError as err:  # pragma: no cover - depends on the environment
            raise ImportError("Plotting needs matplotlib: pip install matplotlib") from err
        order = self._top(top_k)[::-1]
        names = [self.feature_names[j] for j in order]
        if axes is None:
            _, axes = plt.subplots(1, 3, figsize=(13, 0.3 * len(order) + 1.6), sharey=True)
        pos = np.arange(len(order))
        axes[0].barh(pos, self.relevance[order], color="tab:gray")
        axes[0].set_xlabel("ARD relevance 1/ℓ (sums to 1)")
        for ax, mean, std, label in (
            (axes[1], self.gradient_mean, self.gradient_std, "∂f/∂x at x"),
            (axes[2], self.integrated_gradients, self.integrated_gradients_std, "integrated gradients"),
        ):
            vals = mean[order]
            ax.barh(pos, vals, xerr=std[order], capsize=3, color=np.where(vals > 0, "tab:red", "tab:blue"), alpha=0.85)
            ax.axvline(0.0, color="black", linewidth=0.8)
            ax.set_xlabel(f"{label} (error bars: ±1 posterior std)")
        axes[0].set_yticks(pos)
        axes[0].set_yticklabels(names)
        axes[0].figure.suptitle(
            f"Local GP explanation: {len(self.y_samples)} calls ({self.acquisition}), LOO R² = {self.fidelity:.2f}"
        )
        axes[0].figure.tight_layout()
        return axes


def _to_numpy(t: torch.Tensor) -> np.ndarray:
    return t.detach().cpu().double().numpy()
