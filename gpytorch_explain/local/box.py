#!/usr/bin/env python3
r"""The sampling box of :class:`~gpytorch_explain.local.LocalGPExplainer`: the instance's checks and the map between
user units and box units.

A row :math:`\mathbf X` in user units and its box coordinates :math:`\mathbf u` (the perturbed features only) are
related by :math:`X_j = x_j + u_j s_j` with :math:`s_j = r\sigma_j` (``scale``): the box
:math:`\mathbf x \pm r\boldsymbol\sigma` is :math:`[-1, 1]^d`. A categorical coordinate is snapped back to the
nearest value the training data takes; a feature that is never perturbed (zero variance) keeps ``x``'s value in
every row, seen or not.
"""

from __future__ import annotations

import warnings

import numpy as np
import torch

from .result import _to_numpy
from .tabular import as_instance

_DT = torch.float64


class _BoxMixin:
    """Coordinates of :class:`~gpytorch_explain.local.LocalGPExplainer` (its attributes: ``num_features``,
    ``codec``, ``active``, ``categorical_features``, ``categorical_values``, ``feature_names``, ``stencil``)."""

    def _check_x(self, x, name: str = "x") -> np.ndarray:
        names = self.feature_names if getattr(self, "_named", False) else None
        x = as_instance(x, self.num_features, self.codec, name, names)
        if not np.isfinite(x).all():
            raise ValueError(f"{name} contains NaN or infinite values.")
        return x

    def _warn_unseen_categories(self, x: np.ndarray) -> None:
        """A ``UserWarning`` for each categorical feature whose value in ``x`` is not among the training data's."""
        for c in self.categorical_features:
            vals = self.categorical_values[c]
            if np.isin(x[c], vals):
                continue
            if self.codec is not None and c in self.codec.levels:
                shown, value = self.codec.seen_text(c), repr(self.codec.levels[c][int(x[c])])
            else:
                shown, value = ", ".join(f"{v:g}" for v in vals[:10]) + (", ..." if vals.size > 10 else ""), f"{x[c]:g}"
            rest = (
                ("so are its stencil rows; " if self.stencil is not None else "")
                + "the other samples take seen values only"
                if c in self.active
                else "the feature has zero variance in training_data, so every sample keeps x's value"
            )
            warnings.warn(
                f"x's categorical feature {self.feature_names[c]!r} (index {c}) has the value {value}, which "
                f"training_data never takes (seen: {shown}); x itself is evaluated with it, {rest}.",
                UserWarning,
                stacklevel=3,
            )

    def _to_user(self, U: torch.Tensor, x: np.ndarray, scale: np.ndarray) -> np.ndarray:
        X = np.tile(x, (U.shape[0], 1))
        X[:, self.active] = x[self.active] + _to_numpy(U) * scale
        active = set(self.active.tolist())
        for c in self.categorical_features:  # snap the codes back to the exact seen values
            if c not in active:  # never perturbed: every row keeps x's value, seen or not
                continue
            vals = self.categorical_values[c]
            X[:, c] = vals[np.abs(X[:, c][:, None] - vals[None, :]).argmin(1)]
        return X

    def _to_u(self, X: np.ndarray, x: np.ndarray, scale: np.ndarray) -> torch.Tensor:
        return torch.as_tensor((X[:, self.active] - x[self.active]) / scale, dtype=_DT)

    def _backward_rows(self, features: list[int], x: np.ndarray, scale: np.ndarray) -> np.ndarray:
        r"""The rows :math:`\mathbf x - \delta r\sigma_j\mathbf e_j` that complete the forward stencil to central
        differences at ``features``, in user units; like the stencil's, they keep ``x``'s categories."""
        pos = {j: p for p, j in enumerate(self.active)}
        U = torch.zeros(len(features), self.active.size, dtype=_DT)
        for k, j in enumerate(features):
            U[k, pos[j]] = -self.stencil
        X = self._to_user(U, x, scale)
        X[:, self.categorical_features] = x[self.categorical_features]
        return X
