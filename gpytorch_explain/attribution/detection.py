#!/usr/bin/env python3
r"""Whether a model's attribution GP may use the closed forms, verified on the model itself.

The closed forms (:mod:`~gpytorch_explain.attribution.derived`) differentiate ``mean_module`` and ``covar_module`` of
the raw inputs. They are valid only when the model's prior *is* that: ``forward(x)`` returns
:math:`\mathcal N(m(\mathbf x), k(\mathbf x, \mathbf x))` with no transform of :math:`\mathbf x` (a deep-kernel
feature extractor, BoTorch's ``input_transform``) and no transform of the outputs (BoTorch's ``outcome_transform``),
and a single-output kernel. :func:`fallback_reason` checks the attributes and then compares ``model.forward`` with
``mean_module``/``covar_module`` at probe points (training inputs and shifted copies of them); any other model
takes the exact autograd fallback (:mod:`~gpytorch_explain.attribution.fallback`).

Example:
    >>> import torch, gpytorch
    >>> x = torch.rand(10, 2, dtype=torch.float64)
    >>> class DKL(gpytorch.models.ExactGP):
    ...     def __init__(self):
    ...         super().__init__(x, x.sum(-1), gpytorch.likelihoods.GaussianLikelihood())
    ...         self.net = torch.nn.Linear(2, 2).double()
    ...         self.mean_module = gpytorch.means.ZeroMean()
    ...         self.covar_module = gpytorch.kernels.RBFKernel()
    ...     def forward(self, x):
    ...         z = self.net(x)
    ...         return gpytorch.distributions.MultivariateNormal(self.mean_module(z), self.covar_module(z))
    >>> fallback_reason(DKL()) is not None
    True
"""

from __future__ import annotations

import torch
from gpytorch.distributions import MultitaskMultivariateNormal, MultivariateNormal
from gpytorch.kernels import Kernel
from linear_operator import to_dense

from .._compat import is_botorch_model
from .variational import variational_inducing_points

__all__ = ["affine_transforms", "fallback_reason", "MULTITASK_KERNELS"]

#: kernels whose outputs are indexed by task: the closed forms are single-output
MULTITASK_KERNELS = ("IndexKernel", "MultitaskKernel", "LCMKernel", "PositiveIndexKernel")


def _is_botorch(model) -> bool:
    return is_botorch_model(model)


def fallback_reason(model) -> str | None:
    """``None`` when the closed forms are verified to apply to ``model``; otherwise why not (for the warning)."""
    from ..models import GPXModel

    if isinstance(model, GPXModel):
        return None
    affine = affine_transforms(model)
    for attr in ("input_transform", "outcome_transform"):
        tf = getattr(model, attr, None)
        if tf is not None and affine is None:
            return f"it has an {attr} ({type(tf).__name__}) that is not a fixed affine map of all columns"
    if _is_botorch(model) and getattr(model, "num_outputs", 1) > 1:
        return f"it is a BoTorch model with {model.num_outputs} outputs"
    covar = getattr(model, "covar_module", None)
    if not isinstance(covar, Kernel):
        return "it has no `covar_module` Kernel"
    names = {type(mod).__name__ for mod in covar.modules()}
    hit = names.intersection(MULTITASK_KERNELS)
    if hit:
        return f"its covar_module contains the multi-task kernel {sorted(hit)[0]}"
    return _probe_forward(model)


def affine_transforms(model) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None:
    r"""``(coefficient (D,), offset (D,), outcome std ())`` when a BoTorch model's transforms are fixed affine maps.

    BoTorch's ``Normalize``/``AffineInputTransform`` over all columns maps :math:`\mathbf u = (\mathbf x -
    \mathbf o)/\mathbf c` and ``Standardize(m=1)`` maps the outcome :math:`y = \mu_y + \sigma_y\tilde y`, so the
    user's latent is :math:`f(\mathbf x) = \mu_y + \sigma_y\tilde f(\mathbf u)` and by the chain rule
    :math:`\partial_i f = (\sigma_y/c_i)\,\partial_{u_i}\tilde f`, while integrated gradients along the straight
    path (which stays straight in :math:`\mathbf u`) are :math:`\mathrm{IG}_i f(\mathbf x) = \sigma_y
    \mathrm{IG}_i\tilde f(\mathbf u)`. ``None`` for any other transform, or none at all.
    """
    if not _is_botorch(model):
        return None
    tin = getattr(model, "input_transform", None)
    tout = getattr(model, "outcome_transform", None)
    if tin is None and tout is None:
        return None
    dtype_like = model.train_inputs[0] if getattr(model, "train_inputs", None) else None
    if dtype_like is None:
        return None
    D = dtype_like.size(-1)
    coef = torch.ones(D, dtype=dtype_like.dtype, device=dtype_like.device)
    offset = torch.zeros_like(coef)
    ystd = torch.ones((), dtype=coef.dtype, device=coef.device)
    if tin is not None:
        from botorch.models.transforms.input import AffineInputTransform

        if type(tin) not in _affine_input_types() or getattr(tin, "indices", None) is not None:
            return None
        if not isinstance(tin, AffineInputTransform) or tin.learn_coefficients and tin.training:
            return None
        if not getattr(model, "_has_transformed_inputs", False):  # train_inputs must be in transformed units
            return None
        c, o = tin.coefficient.detach(), tin.offset.detach()
        if c.numel() != D or o.numel() != D:
            return None
        coef, offset = c.reshape(D).to(coef), o.reshape(D).to(coef)
    if tout is not None:
        from botorch.models.transforms.outcome import Standardize

        if type(tout) is not Standardize or tout._m != 1 or tout.stdvs.numel() != 1:
            return None
        ystd = tout.stdvs.detach().reshape(()).to(coef)
    return coef, offset, ystd


def _affine_input_types() -> tuple[type, ...]:
    from botorch.models.transforms.input import AffineInputTransform, InputStandardize, Normalize

    return (Normalize, InputStandardize, AffineInputTransform)


def _probe_points(model) -> torch.Tensor | None:
    from gpytorch.models import ApproximateGP

    if isinstance(model, ApproximateGP):
        try:
            X = variational_inducing_points(model)
        except Exception:  # noqa: BLE001 - the variational path reports its own errors later
            return None
    else:
        inputs = getattr(model, "train_inputs", None)
        if not inputs:
            return None
        X = inputs[0]
    if X.dim() == 1:
        X = X.unsqueeze(-1)
    X = X.detach()
    P = X[..., : min(4, X.size(-2)), :]
    spread = X.reshape(-1, X.size(-1)).std(0) if X.size(-2) > 1 else torch.ones(X.size(-1)).to(X)
    spread = torch.where(spread > 0, spread, torch.ones_like(spread))
    return torch.cat([P, P + 0.37 * spread, P - 0.61 * spread.flip(-1)], dim=-2)


def _probe_forward(model) -> str | None:
    P = _probe_points(model)
    if P is None:
        return None  # nothing to probe: the conditioning code reports the missing data
    mean_module = getattr(model, "mean_module", None)
    try:
        with torch.no_grad():
            prior = model.forward(P)
            ref_cov = to_dense(model.covar_module(P))
            ref_mean = mean_module(P) if mean_module is not None else torch.zeros_like(ref_cov[..., 0])
    except Exception as err:  # noqa: BLE001 - any failure means the closed forms are not verified
        return f"its forward could not be compared with mean_module/covar_module ({type(err).__name__}: {err})"
    if isinstance(prior, MultitaskMultivariateNormal) or not isinstance(prior, MultivariateNormal):
        return f"its forward returns a {type(prior).__name__}"
    cov = prior.covariance_matrix
    mean = prior.mean
    try:
        torch.broadcast_shapes(cov.shape, ref_cov.shape)
        torch.broadcast_shapes(mean.shape, ref_mean.shape)
    except RuntimeError:
        return "its forward's prior has another shape than covar_module(x)"
    eps = 1e-4 if cov.dtype in (torch.float32, torch.float16, torch.bfloat16) else 1e-8
    cscale = ref_cov.abs().max().clamp_min(torch.finfo(cov.dtype).tiny)
    mscale = ref_mean.abs().max().clamp_min(1.0)
    if (cov - ref_cov).abs().max() > eps * cscale:
        return "its forward's prior covariance differs from covar_module(x) (e.g. a feature extractor in forward)"
    if (mean - ref_mean).abs().max() > eps * mscale:
        return "its forward's prior mean differs from mean_module(x)"
    return None
