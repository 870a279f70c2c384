#!/usr/bin/env python3
r"""Per-sample explanations: predictions, local weights and feature contributions with uncertainty."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import Tensor

__all__ = ["GPXExplanation"]


@dataclass
class GPXExplanation:
    r"""Explanations of :math:`m` predictions by :math:`d` features.

    For test sample :math:`p` with explanation features :math:`\mathbf z_p`, the local weights
    :math:`\mathbf w_p` have posterior mean :math:`\boldsymbol\mu_p` and covariance
    :math:`\boldsymbol\Sigma_p`; the contributions :math:`\boldsymbol\phi_p = \mathbf w_p \odot \mathbf z_p`
    then have mean :math:`\boldsymbol\mu_p \odot \mathbf z_p` and covariance
    :math:`\operatorname{diag}(\mathbf z_p)\boldsymbol\Sigma_p\operatorname{diag}(\mathbf z_p)`, and they sum
    to the latent prediction :math:`f_p = \sum_l \phi_{pl}`.

    Attributes (all tensors; ``m`` points, ``d`` features):
        x, z: the inputs, ``(m, D)`` and ``(m, d)``.
        prediction_mean, prediction_std: predictive mean and std of :math:`y_*` (``(m,)``).
        latent_std: posterior std of :math:`f_*` (without observation noise).
        weights_mean: ``(m, d)``; weights_covariance: per-point ``(m, d, d)``.
        feature_names: optional list of ``d`` names.

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
    """

    x: Tensor
    z: Tensor
    prediction_mean: Tensor
    prediction_std: Tensor
    latent_std: Tensor
    weights_mean: Tensor
    weights_covariance: Tensor
    feature_names: Sequence[str] | None = field(default=None)

    def __post_init__(self):
        if self.feature_names is None:
            self.feature_names = [f"z{l}" for l in range(self.z.size(-1))]
        self.feature_names = list(self.feature_names)

    def __len__(self) -> int:
        return self.weights_mean.size(0)

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

    def to_numpy(self) -> dict[str, np.ndarray | list[str]]:
        """All fields (and derived contributions) as NumPy arrays."""
        out: dict[str, np.ndarray | list[str]] = {}
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
        ):
            out[name] = getattr(self, name).detach().cpu().numpy()
        out["feature_names"] = list(self.feature_names)
        return out

    def __getitem__(self, index) -> GPXExplanation:
        """The explanations of a subset of points (``int``, slice or index tensor)."""
        if isinstance(index, int):
            index = slice(index, index + 1) if index != -1 else slice(-1, None)
        return GPXExplanation(
            x=self.x[index],
            z=self.z[index],
            prediction_mean=self.prediction_mean[index],
            prediction_std=self.prediction_std[index],
            latent_std=self.latent_std[index],
            weights_mean=self.weights_mean[index],
            weights_covariance=self.weights_covariance[index],
            feature_names=self.feature_names,
        )

    def summary(self, i: int = 0, top_k: int | None = None) -> str:
        """A text table of sample ``i``: contributions ± std, largest magnitude first."""
        mean = self.contributions_mean[i].detach().cpu()
        std = self.contributions_std[i].detach().cpu()
        order = torch.argsort(mean.abs(), descending=True)
        if top_k is not None:
            order = order[:top_k]
        width = max(len(n) for n in self.feature_names)
        lines = [
            f"prediction {self.prediction_mean[i].item():+.4f} ± {self.prediction_std[i].item():.4f} "
            f"(sum of contributions {mean.sum().item():+.4f})",
            f"{'feature'.ljust(width)}  {'contribution':>13}  {'± std':>9}  {'weight':>9}",
        ]
        for l in order.tolist():
            lines.append(
                f"{self.feature_names[l].ljust(width)}  {mean[l].item():>+13.4f}  {std[l].item():>9.4f}  "
                f"{self.weights_mean[i, l].item():>+9.4f}"
            )
        return "\n".join(lines)

    def plot(self, i: int = 0, ax=None, top_k: int | None = 20, kind: str = "contributions"):
        """Horizontal bar chart of sample ``i`` with ±1 std error bars (GPX paper, Figure 1).

        Positive bars are red, negative blue. Needs matplotlib (``pip install gpytorch-explain[plot]``).

        :param i: Which sample.
        :param ax: A matplotlib Axes to draw on (a new figure if ``None``).
        :param top_k: Show the ``top_k`` largest-magnitude features (``None``: all).
        :param kind: ``"contributions"`` (:math:`\\mathbf w \\odot \\mathbf z`) or ``"weights"``.
        :return: The Axes.
        """
        try:
            import matplotlib.pyplot as plt
        except ImportError as err:  # pragma: no cover - depends on the environment
            raise ImportError("plot() needs matplotlib: pip install 'gpytorch-explain[plot]'") from err
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
            _, ax = plt.subplots(figsize=(6, 0.3 * len(order) + 1.2))
        colors = ["tab:red" if v > 0 else "tab:blue" for v in mean[order]]
        names = [self.feature_names[j] for j in order]
        ax.barh(range(len(order)), mean[order], xerr=std[order], color=colors, capsize=3, alpha=0.85)
        ax.set_yticks(range(len(order)))
        ax.set_yticklabels(names)
        ax.axvline(0.0, color="black", linewidth=0.8)
        ax.set_xlabel("contribution to prediction" if kind == "contributions" else "local weight")
        ax.set_title(
            f"sample {i}: prediction {self.prediction_mean[i].item():.3f} ± {self.prediction_std[i].item():.3f}"
        )
        ax.figure.tight_layout()
        return ax
