#!/usr/bin/env python3
r"""Per-sample explanations: predictions, local weights and feature contributions with uncertainty."""

from __future__ import annotations

import operator
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import Tensor

__all__ = ["OUTCOMES", "GPXExplanation"]

#: what ``prediction_mean`` / ``prediction_std`` describe
OUTCOMES: tuple[str, ...] = ("regression", "probability", "other")


@dataclass
class GPXExplanation:
    r"""Explanations of :math:`m` predictions by :math:`d` features.

    For test sample :math:`p` with explanation features :math:`\mathbf z_p`, the local weights
    :math:`\mathbf w_p` have posterior mean :math:`\boldsymbol\mu_p` and covariance
    :math:`\boldsymbol\Sigma_p`; the contributions :math:`\boldsymbol\phi_p = \mathbf w_p \odot \mathbf z_p`
    then have mean :math:`\boldsymbol\mu_p \odot \mathbf z_p` and covariance
    :math:`\operatorname{diag}(\mathbf z_p)\boldsymbol\Sigma_p\operatorname{diag}(\mathbf z_p)`, and they sum
    to the latent prediction :math:`f_p = \sum_l \phi_{pl}` (mean and variance: ``latent_std`` is the std of
    :math:`f_p`, the error bar that matches the contributions).

    Uncertainty convention (text and plots): every "±" and every error bar is **±1 posterior std**, labelled
    "latent" (the contributions and :math:`f`) or "predictive" (:math:`y`, with observation noise).

    All attributes are tensors (``m`` points, ``d`` features).

    Attributes:
        x: the inputs, ``(m, D)``.
        z: the features the weights multiply, ``(m, d)`` (``z = x`` unless the model was built with ``train_z``).
        prediction_mean: predictive mean of :math:`y_*` (``(m,)``); for a binary classifier
            (``outcome="probability"``) the probability :math:`P(y_* = 1)`.
        prediction_std: predictive std of :math:`y_*` (``(m,)``); for a binary classifier the Bernoulli std.
        latent_std: posterior std of :math:`f_*` (without observation noise).
        weights_mean: posterior mean of the local weights, ``(m, d)``.
        weights_covariance: per-point posterior covariance of the weights, ``(m, d, d)``.
        feature_names: optional list of ``d`` names (default ``x0, x1, ...`` when z = x, else ``z0, z1, ...``).
        outcome: ``"regression"`` (Gaussian likelihood: :math:`y = f + \varepsilon`), ``"probability"`` (binary
            classification: the prediction is :math:`P(y=1)`, the contributions are on the latent scale) or
            ``"other"`` (any other likelihood).
        latent_scale: name of the latent's scale in text and plots (e.g. ``"probit"``, ``"logit"``).
        intercept: the constant mean that the weights do not explain (``GPXModel(..., intercept=True)`` or
            ``standardize_y=True``; 0 otherwise): :math:`\mathbb E[f_*] = \text{intercept} + \sum_l \phi_l`.

    Example:
        >>> import torch
        >>> from gpytorch_explain import GPXModel
        >>> x = torch.randn(30, 2, dtype=torch.float64)
        >>> model = GPXModel(x, x[:, 0] - x[:, 1], feature_names=["a", "b"]).fit(max_iter=10)
        >>> expl = model.explain(x[:3])
        >>> expl.contributions_mean.shape
        torch.Size([3, 2])
        >>> sorted(expl.to_numpy())[:3]
        ['contributions_mean', 'contributions_std', 'feature_names']
        >>> len(expl[-1]), len(expl[torch.tensor(0)])
        (1, 1)
    """

    x: Tensor
    z: Tensor
    prediction_mean: Tensor
    prediction_std: Tensor
    latent_std: Tensor
    weights_mean: Tensor
    weights_covariance: Tensor
    feature_names: Sequence[str] | None = field(default=None)
    outcome: str = "regression"
    latent_scale: str = "latent"
    intercept: float = 0.0

    def __post_init__(self):
        d = self.weights_mean.size(-1)
        if self.z.size(-1) != d:
            raise ValueError(f"z has {self.z.size(-1)} columns but the weights have d = {d}.")
        if self.outcome not in OUTCOMES:
            raise ValueError(f"outcome must be one of {OUTCOMES}, got {self.outcome!r}.")
        if self.feature_names is None:
            same = self.x.shape == self.z.shape and torch.equal(self.x, self.z)
            self.feature_names = [f"{'x' if same else 'z'}{l}" for l in range(d)]
        if isinstance(self.feature_names, str):
            raise TypeError("feature_names must be a sequence of names, not a single string.")
        self.feature_names = [str(name) for name in self.feature_names]
        if len(self.feature_names) != d:
            raise ValueError(
                f"feature_names has {len(self.feature_names)} names but the explanation has d = {d} features."
            )

    def __len__(self) -> int:
        return self.weights_mean.size(0)

    def _point(self, i) -> int:
        """A single point index (int, numpy integer or 0-d integer tensor; negative counts from the end)."""
        if isinstance(i, bool) or (
            torch.is_tensor(i) and (i.dim() != 0 or i.is_floating_point() or i.dtype == torch.bool)
        ):
            raise TypeError(f"A point index must be an integer, got {i!r}.")
        try:
            i = operator.index(i)
        except TypeError as err:
            raise TypeError(f"A point index must be an integer, got {type(i).__name__}.") from err
        m = len(self)
        if not -m <= i < m:
            raise IndexError(f"point index {i} is out of range for an explanation of {m} points.")
        return i % m

    @property
    def weights_std(self) -> Tensor:
        """Posterior std of each local weight, ``(m, d)``."""
        return self.weights_covariance.diagonal(dim1=-2, dim2=-1).clamp_min(0).sqrt()

    @property
    def contributions_mean(self) -> Tensor:
        r"""Mean of :math:`\boldsymbol\phi = \mathbf w \odot \mathbf z`, ``(m, d)``."""
        return self.weights_mean * self.z

    @property
    def contributions_covariance(self) -> Tensor:
        r"""Per-point covariance of :math:`\boldsymbol\phi`, ``(m, d, d)``."""
        return self.z.unsqueeze(-1) * self.weights_covariance * self.z.unsqueeze(-2)

    @property
    def contributions_std(self) -> Tensor:
        r"""Std of :math:`\boldsymbol\phi`, :math:`|\mathbf z| \odot \operatorname{std}(\mathbf w)`, ``(m, d)``."""
        return self.z.abs() * self.weights_std

    @property
    def latent_mean(self) -> Tensor:
        r"""Posterior mean of the latent :math:`f_* = \text{intercept} + \sum_l \phi_l` (the intercept plus the sum
        of the contributions), ``(m,)``."""
        return self.contributions_mean.sum(-1) + self.intercept

    def to_numpy(self) -> dict[str, np.ndarray | list[str] | float | str]:
        """All fields (and derived contributions and latent mean) as NumPy arrays, with ``feature_names``, the
        ``intercept`` (float; ``latent_mean = intercept + contributions_mean.sum(-1)``), ``outcome`` and
        ``latent_scale`` (strings)."""
        out: dict[str, np.ndarray | list[str] | float | str] = {}
        for name in (
            "x",
            "z",
            "prediction_mean",
            "prediction_std",
            "latent_std",
            "weights_mean",
            "weights_std",
            "weights_covariance",
            "contributions_mean",
            "contributions_std",
            "latent_mean",
        ):
            out[name] = getattr(self, name).detach().cpu().numpy()
        out["feature_names"] = list(self.feature_names)
        out["intercept"] = float(self.intercept)
        out["outcome"] = self.outcome
        out["latent_scale"] = self.latent_scale
        return out

    @staticmethod
    def _check_top_k(top_k: int | None) -> None:
        if top_k is not None and (isinstance(top_k, bool) or not isinstance(top_k, (int, np.integer)) or top_k < 1):
            raise ValueError(f"top_k must be a positive integer or None (all features), got {top_k!r}.")

    def __getitem__(self, index) -> GPXExplanation:
        """The explanations of a subset of points.

        ``index``: an integer (Python, NumPy or 0-d tensor; negative counts from the end; out of range raises
        ``IndexError``) gives one point; a slice, a list / NumPy array / tensor of indices or a boolean mask gives
        several.
        """
        if isinstance(index, tuple):
            raise TypeError(
                f"Index an explanation by points only (an integer, slice, index array or mask), got the tuple "
                f"{index!r}; for point i, feature j use e[i].contributions_mean[0, j]."
            )
        if isinstance(index, slice):
            pass
        elif isinstance(index, (int, np.integer)) or (torch.is_tensor(index) and index.dim() == 0):
            i = self._point(index)
            index = slice(i, i + 1)
        else:
            index = torch.as_tensor(np.asarray(index) if not torch.is_tensor(index) else index)
            if index.numel() == 0:
                index = index.long()
            if index.dtype == torch.bool:
                if index.shape != (len(self),):
                    raise IndexError(f"A boolean mask must have shape ({len(self)},), got {tuple(index.shape)}.")
            elif index.is_floating_point() or index.dim() != 1:
                raise TypeError(f"Index with an integer, a slice or a 1-d integer / boolean array, got {index!r}.")
            elif index.numel() and not (-len(self) <= int(index.min()) and int(index.max()) < len(self)):
                raise IndexError(f"point indices out of range for an explanation of {len(self)} points.")
            index = index.to(self.weights_mean.device)
        return GPXExplanation(
            x=self.x[index],
            z=self.z[index],
            prediction_mean=self.prediction_mean[index],
            prediction_std=self.prediction_std[index],
            latent_std=self.latent_std[index],
            weights_mean=self.weights_mean[index],
            weights_covariance=self.weights_covariance[index],
            feature_names=self.feature_names,
            outcome=self.outcome,
            latent_scale=self.latent_scale,
            intercept=self.intercept,
        )

    def headline(self, i: int = 0) -> list[str]:
        """The two lines that state the prediction of sample ``i`` and its scale (used by :meth:`summary`)."""
        i = self._point(i)
        scale = "latent f" if self.latent_scale == "latent" else f"latent f ({self.latent_scale} scale)"
        total = "sum of contributions"
        if self.intercept != 0:
            total = f"intercept {self.intercept:+.4f} + {total}"
        lines = [
            f"{scale} = {total} = {self.latent_mean[i].item():+.4f} ± {self.latent_std[i].item():.4f} "
            "(± 1 std, latent posterior)"
        ]
        mean, std = self.prediction_mean[i].item(), self.prediction_std[i].item()
        if self.outcome == "probability":
            lines.append(f"P(y=1) = {mean:.4f} (predictive probability; not a sum of contributions)")
        elif self.outcome == "regression":
            lines.append(f"prediction of y = {mean:+.4f} ± {std:.4f} (± 1 std, predictive: latent + observation noise)")
        else:
            lines.append(f"prediction of y = {mean:+.4f} ± {std:.4f} (± 1 std, predictive, the likelihood's scale)")
        return lines

    def summary(self, i: int = 0, top_k: int | None = None) -> str:
        """A text table of sample ``i``: contributions and their 1 std (latent scale), largest magnitude first.

        The first two lines give the latent :math:`f` (= the sum of the contributions) ± 1 latent std, and the
        prediction on the outcome's scale (± 1 predictive std; for classification :math:`P(y=1)`).
        """
        i = self._point(i)
        self._check_top_k(top_k)
        mean = self.contributions_mean[i].detach().cpu()
        std = self.contributions_std[i].detach().cpu()
        order = torch.argsort(mean.abs(), descending=True)
        if top_k is not None:
            order = order[:top_k]
        width = max(len(n) for n in [*self.feature_names, "feature"])
        lines = [
            *self.headline(i),
            f"{'feature'.ljust(width)}  {'contribution':>13}  {'1 std':>9}  {'weight':>9}",
        ]
        for l in order.tolist():
            lines.append(
                f"{self.feature_names[l].ljust(width)}  {mean[l].item():>+13.4f}  {std[l].item():>9.4f}  "
                f"{self.weights_mean[i, l].item():>+9.4f}"
            )
        return "\n".join(lines)

    def plot(self, i: int = 0, ax=None, top_k: int | None = 20, kind: str = "contributions"):
        r"""Horizontal bar chart of sample ``i`` with ±1 posterior std error bars (GPX paper, Figure 1).

        Positive bars are red, negative blue. The title gives the latent :math:`f` (the sum of the contributions)
        ± its 1 std (latent), the same uncertainty the bars show, and the prediction on the outcome's scale.
        Needs matplotlib (``pip install gpytorch-explain[plot]``).

        :param i: Which sample.
        :param ax: A matplotlib Axes to draw on (a new figure if ``None``).
        :param top_k: Show the ``top_k`` largest-magnitude features (``None``: all).
        :param kind: ``"contributions"`` (:math:`\mathbf w \odot \mathbf z`) or ``"weights"``.
        :return: The Axes.
        """
        try:
            import matplotlib.pyplot as plt
        except ImportError as err:  # pragma: no cover - depends on the environment
            raise ImportError("plot() needs matplotlib: pip install 'gpytorch-explain[plot]'") from err
        i = self._point(i)
        self._check_top_k(top_k)
        if kind == "contributions":
            mean, std = self.contributions_mean[i], self.contributions_std[i]
        elif kind == "weights":
            mean, std = self.weights_mean[i], self.weights_std[i]
        else:
            raise ValueError(f"kind must be 'contributions' or 'weights', got {kind!r}.")
        mean = mean.detach().cpu().numpy()
        std = std.detach().cpu().numpy()
        order = np.argsort(-np.abs(mean))
        if top_k is not None:
            order = order[:top_k]
        order = order[::-1]  # largest at the top
        if ax is None:
            _, ax = plt.subplots(figsize=(6.5, 0.3 * len(order) + 1.6))
        colors = ["tab:red" if v > 0 else "tab:blue" for v in mean[order]]
        names = [self.feature_names[j] for j in order]
        ax.barh(range(len(order)), mean[order], xerr=std[order], color=colors, capsize=3, alpha=0.85)
        ax.set_yticks(range(len(order)))
        ax.set_yticklabels(names)
        ax.axvline(0.0, color="black", linewidth=0.8)
        what = "contribution to latent f" if kind == "contributions" else "local weight"
        ax.set_xlabel(f"{what} (error bars: ±1 posterior std, latent)")
        latent = f"latent f = {self.latent_mean[i].item():.3f} ± {self.latent_std[i].item():.3f} (±1 std, latent)"
        if self.outcome == "probability":
            second = f"P(y=1) = {self.prediction_mean[i].item():.3f}"
        else:
            second = (
                f"prediction of y = {self.prediction_mean[i].item():.3f} ± {self.prediction_std[i].item():.3f} "
                "(±1 std, predictive)"
            )
        ax.set_title(f"sample {i}: {latent}\n{second}", fontsize=9)
        ax.figure.tight_layout()
        return ax
