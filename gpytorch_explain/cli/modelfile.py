#!/usr/bin/env python3
r"""The model file written by ``gpytorch-explain fit`` and read by ``gpytorch-explain explain``.

One ``torch.save`` file holding a dict of tensors, strings and numbers only (read back with
``torch.load(weights_only=True)``, so loading a file never runs code):

* ``format`` (:data:`FORMAT`), ``format_version`` (:data:`FORMAT_VERSION`) and ``package_version``;
* ``kind``: ``"gpx"`` (:class:`~gpytorch_explain.GPXModel`) or ``"gpr"`` (:class:`StandardGPR`);
* ``state_dict``: the fitted hyperparameters;
* ``train_x``, ``train_z`` (GPX with separate explanation features, else absent) and ``train_y``: the
  standardised training data the model is conditioned on;
* ``feature_names``, ``z_names`` and ``target_name``;
* ``x_mean``, ``x_std``, ``z_mean``, ``z_std``, ``y_mean``, ``y_std``: the standardisation
  :math:`\tilde x_j = (x_j - \bar x_j) / s_j`, :math:`\tilde y = (y - \bar y) / s_y` (population stds of the
  training columns; 1 for a constant column);
* ``n``, ``final_loss``, ``iterations``: a record of the fit.
"""

from __future__ import annotations

import sys

import gpytorch
import numpy as np
import torch
from torch import Tensor

from .. import __version__
from .dataio import CLIError, atomic_path

__all__ = ["FORMAT", "FORMAT_VERSION", "StandardGPR", "build_model", "load_payload", "save_payload", "standardise"]

FORMAT = "gpytorch-explain-model"
#: bump when the payload's keys or meaning change; files with another version are refused
FORMAT_VERSION = 1
_DTYPE = torch.float64


class StandardGPR(gpytorch.models.ExactGP):
    """GP regression for ``--model gpr``: constant mean, ``ScaleKernel(RBFKernel(ard_num_dims=D))``, Gaussian noise.

    Example:
        >>> import torch
        >>> x = torch.randn(10, 2, dtype=torch.float64)
        >>> StandardGPR(x, x[:, 0]).covar_module.base_kernel.lengthscale.shape
        torch.Size([1, 2])
    """

    def __init__(self, train_x: Tensor, train_y: Tensor):
        super().__init__(train_x, train_y, gpytorch.likelihoods.GaussianLikelihood())
        self.mean_module = gpytorch.means.ConstantMean()
        self.covar_module = gpytorch.kernels.ScaleKernel(gpytorch.kernels.RBFKernel(ard_num_dims=train_x.size(-1)))
        self.to(train_x.dtype)

    def forward(self, x: Tensor) -> gpytorch.distributions.MultivariateNormal:
        return gpytorch.distributions.MultivariateNormal(self.mean_module(x), self.covar_module(x))


def standardise(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Column means and (population) stds of ``values`` (``(n, k)``); a constant column gets std 1.

    A column is constant when its std is 0 or below 1e-12 of its mean's magnitude (round-off), whatever its units.

    Example:
        >>> import numpy as np
        >>> mean, std = standardise(np.array([[1.0, 5.0], [3.0, 5.0]]))
        >>> mean.tolist(), std.tolist()
        ([2.0, 5.0], [1.0, 1.0])
        >>> std = standardise(np.array([[1e-13], [3e-13]]))[1]  # not constant: its std is 1e-13
        >>> bool(np.isclose(std[0], 1e-13, rtol=1e-9, atol=0.0))
        True
    """
    mean = values.mean(0)
    std = values.std(0)
    tiny = 1e-12 * np.abs(mean)  # relative: a column in units of 1e-13 is not constant
    return mean, np.where((std > tiny) & (std > 0), std, 1.0)


def build_model(payload: dict) -> gpytorch.models.ExactGP:
    """The fitted model of a payload, in eval mode (float64), conditioned on its standardised training data."""
    x = payload["train_x"].to(_DTYPE)
    y = payload["train_y"].to(_DTYPE)
    if payload["kind"] == "gpx":
        from .. import GPXModel

        z = payload.get("train_z")
        model = GPXModel(x, y, None if z is None else z.to(_DTYPE), feature_names=payload["z_names"])
    else:
        model = StandardGPR(x, y)
    try:
        model.load_state_dict(payload["state_dict"])
    except (RuntimeError, KeyError) as err:
        raise CLIError(f"the model file's parameters do not fit a {payload['kind']} model: {err}") from None
    return model.eval()


_REQUIRED = (
    "kind",
    "state_dict",
    "train_x",
    "train_y",
    "feature_names",
    "z_names",
    "target_name",
    "x_mean",
    "x_std",
    "z_mean",
    "z_std",
    "y_mean",
    "y_std",
)


def save_payload(payload: dict, path: str) -> None:
    """Write ``payload`` (plus the format keys) to ``path`` atomically."""
    payload = {"format": FORMAT, "format_version": FORMAT_VERSION, "package_version": __version__, **payload}
    with atomic_path(path) as tmp:
        torch.save(payload, tmp)


def load_payload(path: str) -> dict:
    """Read a model file, refusing files that are not ``gpytorch-explain fit`` output or have another format."""
    try:
        payload = torch.load(path, map_location="cpu", weights_only=True)
    except Exception:  # torch raises many types for a file that is not its format (or holds code)
        raise CLIError(
            f"{path} is not a gpytorch-explain model file (torch.load cannot read it safely); "
            "create one with `gpytorch-explain fit`"
        ) from None
    if not isinstance(payload, dict) or payload.get("format") != FORMAT:
        raise CLIError(f"{path} is not a gpytorch-explain model file; create one with `gpytorch-explain fit`")
    version = payload.get("format_version")
    if version != FORMAT_VERSION:
        raise CLIError(
            f"{path} has model-file format version {version} (written by gpytorch-explain "
            f"{payload.get('package_version', '?')}); this gpytorch-explain {__version__} reads format "
            f"{FORMAT_VERSION}: refit with `gpytorch-explain fit`"
        )
    if payload.get("package_version") != __version__:
        print(
            f"note: {path} was written by gpytorch-explain {payload.get('package_version', '?')} (this is "
            f"{__version__}); the file format is the same",
            file=sys.stderr,
        )
    missing = [key for key in _REQUIRED if key not in payload]
    if missing or payload["kind"] not in ("gpx", "gpr"):
        raise CLIError(f"{path} is a damaged gpytorch-explain model file (missing {', '.join(missing) or 'kind'})")
    _check_shapes(payload, path)
    return payload


def _check_shapes(payload: dict, path: str) -> None:
    """The payload's arrays agree in their sizes (a damaged or hand-edited file gives a message, not a traceback)."""

    def size(key: str, dim: int = 0) -> int | None:
        value = payload.get(key)
        if value is None:
            return None
        if torch.is_tensor(value):
            return int(value.shape[dim]) if value.dim() > dim else -1
        return len(value)

    train_x, train_y = payload["train_x"], payload["train_y"]
    problems = []
    if not (torch.is_tensor(train_x) and train_x.dim() == 2 and torch.is_tensor(train_y) and train_y.dim() == 1):
        problems.append("train_x must be a matrix and train_y a vector")
    else:
        n, d = train_x.shape
        if train_y.numel() != n:
            problems.append(f"train_x has {n} rows, train_y {train_y.numel()}")
        for key in ("feature_names", "x_mean", "x_std"):
            if size(key) != d:
                problems.append(f"{key} has {size(key)} entries for {d} features")
        train_z = payload.get("train_z")
        d_z = int(train_z.shape[-1]) if torch.is_tensor(train_z) and train_z.dim() == 2 else d
        if torch.is_tensor(train_z) and (train_z.dim() != 2 or train_z.shape[0] != n):
            problems.append(f"train_z has shape {tuple(train_z.shape)} for {n} rows")
        for key in ("z_names", "z_mean", "z_std"):
            if size(key) != d_z:
                problems.append(f"{key} has {size(key)} entries for {d_z} explanation features")
    if problems:
        raise CLIError(f"{path} is a damaged gpytorch-explain model file ({'; '.join(problems)})")
