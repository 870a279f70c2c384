#!/usr/bin/env python3
"""One small interface for explainers, so benchmarks and metrics treat them alike."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

__all__ = ["Explainer", "ExplainerOutput", "safe_ratio", "to_numpy"]


def to_numpy(value) -> np.ndarray | None:
    """A tensor or array as a float64 numpy array (``None`` stays ``None``)."""
    if value is None:
        return None
    if torch.is_tensor(value):
        return value.detach().cpu().double().numpy()
    return np.asarray(value, dtype=np.float64)


def safe_ratio(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    """``num / den`` elementwise, 0 where ``den == 0`` (weights = contribution / (x - baseline))."""
    return np.where(den != 0, num / np.where(den != 0, den, 1.0), 0.0)


@dataclass
class ExplainerOutput:
    r"""What an explainer says about ``m`` samples with ``D`` features.

    All attributes are numpy float64 arrays.

    Attributes:
        contributions: ``(m, D)``, each feature's additive share of the prediction (or, for relevance-only
            methods such as ARD and KL, the relevance; see :attr:`Explainer.additive`).
        std: ``(m, D)`` or ``None``, the std of the contributions where the explainer has a posterior.
        weights: ``(m, D)`` or ``None``, the local linear weights behind the contributions (GPX's
            :math:`\mathbf w`, a linear model's coefficients, the path-averaged gradient of IG), used by
            :func:`~gpytorch_explain.metrics.stability`.
    """

    contributions: np.ndarray
    std: np.ndarray | None = None
    weights: np.ndarray | None = None

    def __post_init__(self):
        self.contributions = to_numpy(self.contributions)
        self.std = to_numpy(self.std)
        self.weights = to_numpy(self.weights)
        if self.contributions.ndim != 2:
            raise ValueError(f"contributions must be (m, D), got shape {self.contributions.shape}.")
        for name in ("std", "weights"):
            value = getattr(self, name)
            if value is not None and value.shape != self.contributions.shape:
                raise ValueError(
                    f"{name} must have the shape of contributions {self.contributions.shape}, got {value.shape}."
                )


class Explainer(ABC):
    """An explainer: ``explain(x)`` returns an :class:`ExplainerOutput` for the ``(m, D)`` inputs ``x``.

    Subclasses set :attr:`name` (used in tables) and :attr:`additive` (``True`` when the contributions add
    up to the prediction, possibly minus a baseline prediction; ``False`` for relevances such as ARD or KL).
    """

    #: Display name of the method (used in tables and plots).
    name: str = "explainer"
    #: Whether the contributions add up to the prediction (possibly minus a baseline prediction).
    additive: bool = True

    @abstractmethod
    def explain(self, x: Tensor) -> ExplainerOutput:
        """Explain the predictions at ``x`` (``(m, D)``)."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r})"
