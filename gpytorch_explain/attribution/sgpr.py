#!/usr/bin/env python3
r"""Attribution GPs of SGPR models: an ``ExactGP`` whose ``covar_module`` is an ``InducingPointKernel``.

GPyTorch's SGPR (Titsias, 2009) replaces the prior covariance of the training data by the Nyström kernel
:math:`\mathbf Q_{\mathbf{XX}} = \mathbf K_{\mathbf{XU}}\mathbf K_{\mathbf{UU}}^{-1}\mathbf K_{\mathbf{UX}}` of the
base kernel :math:`k` at the inducing points :math:`\mathbf U` (:math:`M` of them). In eval mode its prediction
strategy conditions on the training data with

.. math::

    \mathbf C = \mathbf Q_{\mathbf{XX}} + \boldsymbol\Lambda, \qquad
    \boldsymbol\Lambda = \operatorname{diag}(\text{noise}) \;\big[+ \operatorname{diag}(\mathbf K_{\mathbf{XX}}
    - \mathbf Q_{\mathbf{XX}})\big],

where the bracketed term is present when ``gpytorch.settings.sgpr_diagonal_correction`` is on (the default; it
makes the conditioning FITC-like) and the noise may be heteroscedastic (``FixedNoiseGaussianLikelihood``).
:math:`\boldsymbol\Lambda` is read from the model's own prediction strategy, so both settings are followed.

**The posterior process.** For any diagonal :math:`\boldsymbol\Lambda` the SGPR predictive mean is that of a
sparse variational posterior :math:`q(f) = \int p(f\mid\mathbf u)\,q(\mathbf u)\,d\mathbf u` with the optimal
:math:`q(\mathbf u) = \mathcal N(\mathbf m_u, \mathbf S_u)`,

.. math::

    \mathbf S_u = \mathbf K_{\mathbf{UU}}\boldsymbol\Sigma\mathbf K_{\mathbf{UU}}, \quad
    \boldsymbol\Sigma = (\mathbf K_{\mathbf{UU}} + \mathbf K_{\mathbf{UX}}\boldsymbol\Lambda^{-1}
    \mathbf K_{\mathbf{XU}})^{-1}, \quad
    \mathbf m_u = \mathbf S_u\mathbf K_{\mathbf{UU}}^{-1}\mathbf K_{\mathbf{UX}}\boldsymbol\Lambda^{-1}
    (\mathbf y - \mu(\mathbf X)),

and the covariance of that process is

.. math::

    \operatorname{Cov}_q[f(\mathbf x), f(\mathbf x')] = k(\mathbf x, \mathbf x')
    - \mathbf k_{\mathbf x\mathbf U}\big(\mathbf K_{\mathbf{UU}}^{-1} - \boldsymbol\Sigma\big)
    \mathbf k_{\mathbf U\mathbf x'}
    = k(\mathbf x, \mathbf x') - \mathbf Q_{\mathbf x\mathbf X}\mathbf C^{-1}\mathbf Q_{\mathbf X\mathbf x'}

(push-through identity). Its variances equal GPyTorch's SGPR predictive variances with the diagonal correction
on. GPyTorch's *joint* predictive covariance uses :math:`\mathbf Q` instead of :math:`k` off the diagonal: it is
this process plus an independent nugget :math:`k(\mathbf x, \mathbf x) - Q(\mathbf x, \mathbf x)` at each
evaluation point (or, with the correction off, the degenerate process with prior :math:`\mathbf Q`). A nugget is
white noise without derivatives, so the attribution GPs are those of :math:`q(f)` above, the smooth process whose
marginals are GPyTorch's; its mean is GPyTorch's predictive mean exactly.

Every linear functional :math:`\mathcal L` (gradients, integrated gradients) of :math:`q(f)` is a GP with

.. math::

    \mathbb E[\mathcal L f(\mathbf x)] = \mathcal L\mu(\mathbf x) + \mathbf B^\top\mathbf K_{\mathbf{UU}}^{-1}
    \mathbf m_u, \qquad
    \operatorname{Cov}[\mathcal L f(\mathbf x), \mathcal L f(\mathbf x')] = \mathcal L\mathcal L' k(\mathbf x,
    \mathbf x') - \mathbf B^\top\big(\mathbf K_{\mathbf{UU}}^{-1} - \mathbf K_{\mathbf{UU}}^{-1}\mathbf S_u
    \mathbf K_{\mathbf{UU}}^{-1}\big)\mathbf B',

with :math:`\mathbf B = \operatorname{Cov}(f(\mathbf U), \mathcal L f(\mathbf x))` the derived cross-covariance of
the *base* kernel (closed forms where available). In whitened form, with :math:`\mathbf K_{\mathbf{UU}} =
\mathbf L\mathbf L^\top` (the same ``psd_safe_cholesky`` as GPyTorch), :math:`\mathbf V = \mathbf L^{-1}
\mathbf K_{\mathbf{UX}}` and :math:`\mathbf A = \mathbf I + \mathbf V\boldsymbol\Lambda^{-1}\mathbf V^\top`:
:math:`\mathbf S_w = \mathbf A^{-1}`, :math:`\mathbf m_w = \mathbf A^{-1}\mathbf V\boldsymbol\Lambda^{-1}
(\mathbf y - \mu(\mathbf X))`, and the attribution GP is exactly the variational one of
:class:`~gpytorch_explain.attribution.variational.VariationalConditioning` with weights
:math:`\mathbf a = \mathbf L^{-\top}\mathbf m_w` and middle matrix
:math:`\mathbf I - \mathbf A^{-1} = \mathbf A^{-1}(\mathbf A - \mathbf I)`.

**Cost.** :math:`\mathbf V\boldsymbol\Lambda^{-1}\mathbf V^\top` and :math:`\mathbf V\boldsymbol\Lambda^{-1}
\mathbf r` are accumulated over chunks of training rows (``max_block_elements // 4`` elements, see
:class:`gpytorch_explain.settings.max_block_elements`): :math:`O(nM^2)` time,
:math:`O(M^2 + n)` memory beyond one chunk, never anything :math:`n\times n`. The inducing-space algebra runs in
float64 (GPyTorch's ``_linalg_dtype_cholesky``) and is cached on the model's prediction strategy, so it is
recomputed only when GPyTorch itself rebuilds its caches (``model.train()``, ``set_train_data``, ...). Each call
then costs :math:`O(mDM)` derived cross-covariances plus :math:`O(mDM^2)` for the point blocks.
"""

from __future__ import annotations

import torch
from gpytorch import settings as gsettings
from gpytorch.kernels import InducingPointKernel, Kernel
from gpytorch.means import Mean
from gpytorch.models import ExactGP
from linear_operator import to_dense
from linear_operator.operators import LowRankRootAddedDiagLinearOperator
from linear_operator.utils.cholesky import psd_safe_cholesky
from torch import Tensor

from .._compat import _linalg_dtype_cholesky
from ..errors import ModelStateError
from ..settings import block_budget
from ..utils import ensure_prediction_strategy
from ._quadrature import chunk_slices
from .derived import DEFAULT_ORDER
from .functionals import Functional
from .variational import VariationalConditioning

__all__ = [
    "TRAIN_CHUNK_ELEMENTS",
    "contains_inducing_point_kernel",
    "is_sgpr_model",
    "sgpr_conditioning",
    "sgpr_functional_posterior",
    "sgpr_model_parts",
]

#: largest number of elements of :math:`\mathbf K_{\mathbf{UX}}` formed at once at the default
#: ``max_block_elements`` (kept for import compatibility; the live budget is ``block_budget("sgpr_train_rows")``,
#: ``max_block_elements // 4``)
TRAIN_CHUNK_ELEMENTS = 2**22

_CACHE_ATTR = "_gpytorch_explain_sgpr_conditioning"


def contains_inducing_point_kernel(kernel: Kernel) -> bool:
    """Whether ``kernel`` is or contains (at any depth) an ``InducingPointKernel``."""
    return any(isinstance(module, InducingPointKernel) for module in kernel.modules())


def is_sgpr_model(model) -> bool:
    """Whether ``model`` is an ``ExactGP`` whose ``covar_module`` is itself an ``InducingPointKernel`` (SGPR)."""
    return isinstance(model, ExactGP) and isinstance(getattr(model, "covar_module", None), InducingPointKernel)


def sgpr_model_parts(model: ExactGP) -> tuple[Kernel, Mean | None]:
    r"""The base kernel :math:`k` and the prior mean of an SGPR model, after checking its structure.

    :raises NotImplementedError: a subclass of ``InducingPointKernel`` (it may change the predictive), ``active_dims``
        on the ``InducingPointKernel``, or a base kernel that contains another ``InducingPointKernel``.
    """
    ipk = model.covar_module
    if type(ipk) is not InducingPointKernel:
        raise NotImplementedError(
            f"Attribution GPs support gpytorch's InducingPointKernel itself, not the subclass {type(ipk).__name__} "
            "(it may change the predictive distribution)."
        )
    if ipk.active_dims is not None:
        raise NotImplementedError(
            "An InducingPointKernel with active_dims is not supported; put active_dims on its base kernel instead."
        )
    base = ipk.base_kernel
    if contains_inducing_point_kernel(base):
        raise NotImplementedError("Nested InducingPointKernels are not supported.")
    mean = getattr(model, "mean_module", None)
    if mean is not None and not isinstance(mean, Mean):
        raise NotImplementedError(f"mean_module must be a gpytorch Mean, got {type(mean).__name__}.")
    return base, mean


def _noise_diagonal(strategy) -> Tensor:
    r""":math:`\boldsymbol\Lambda` (``(*batch, n)``): the diagonal part of the strategy's own training covariance."""
    covar = strategy.lik_train_train_covar
    if hasattr(covar, "evaluate_kernel"):
        covar = covar.evaluate_kernel()
    if not isinstance(covar, LowRankRootAddedDiagLinearOperator):
        raise NotImplementedError(
            "Expected the SGPR training covariance to be a LowRankRootAddedDiagLinearOperator (Nyström root plus a "
            f"diagonal), got {type(covar).__name__}; this likelihood / kernel combination is not supported."
        )
    return covar._diag_tensor.diagonal(dim1=-1, dim2=-2)


def _train_rows(total: int, width: int) -> list[slice]:
    """Slices of training rows whose ``width``-wide blocks hold at most ``max_block_elements // 4`` elements."""
    return chunk_slices(total, width, block_budget("sgpr_train_rows"))


def _compute_conditioning(model: ExactGP, strategy) -> VariationalConditioning:
    base, mean = sgpr_model_parts(model)
    U = model.covar_module.inducing_points
    X = strategy.train_inputs[0]
    if X.dim() == 1:
        X = X.unsqueeze(-1)
    dtype, work = U.dtype, _linalg_dtype_cholesky.value()
    if work not in (torch.float32, torch.float64) or torch.finfo(work).eps > torch.finfo(dtype).eps:
        work = dtype

    lam = _noise_diagonal(strategy).to(work)  # (*b, n)
    labels = strategy.train_labels
    if torch.isnan(labels).any():
        raise NotImplementedError("Training targets with NaNs are not supported for SGPR attribution GPs.")
    resid = (labels - strategy.train_prior_dist.mean).to(work)  # (*b, n)

    # K_UU = L Lᵀ, exactly as GPyTorch's InducingPointKernel factorises it (jitter only when needed)
    Kuu = to_dense(base(U, U))
    L = psd_safe_cholesky(Kuu)
    L_w = L.to(work)

    # accumulate G = V Λ⁻¹ Vᵀ and g = V Λ⁻¹ r over chunks of training rows (V = L⁻¹ K_UX)
    G = g = None
    n, M = X.size(-2), U.size(-2)
    for rows in _train_rows(n, M):
        Kux = to_dense(base(U, X[..., rows, :])).to(work)  # (*b, M, c)
        batch = torch.broadcast_shapes(L_w.shape[:-2], Kux.shape[:-2])
        V = torch.linalg.solve_triangular(L_w.expand(*batch, M, M), Kux.expand(*batch, *Kux.shape[-2:]), upper=False)
        W = V / lam[..., None, rows]
        G_c = W @ V.mT
        g_c = W @ resid[..., rows, None]
        G = G_c if G is None else G + G_c
        g = g_c if g is None else g + g_c
    if G is None:  # no training data: the prior
        G = torch.zeros(M, M, dtype=work, device=U.device)
        g = torch.zeros(M, 1, dtype=work, device=U.device)
    G = 0.5 * (G + G.mT)
    eye = torch.eye(M, dtype=work, device=U.device)
    chol_A = torch.linalg.cholesky(eye + G)  # A = I + G has eigenvalues ≥ 1
    m_w = torch.cholesky_solve(g, chol_A)  # A⁻¹ V Λ⁻¹ r
    batch = torch.broadcast_shapes(L_w.shape[:-2], m_w.shape[:-2])
    a = torch.linalg.solve_triangular(L_w.mT.expand(*batch, M, M), m_w.expand(*batch, M, 1), upper=True)
    a = a.squeeze(-1)  # L⁻ᵀ m_w = K_UU⁻¹ m_u
    middle = torch.cholesky_solve(G, chol_A)  # A⁻¹ G = I − A⁻¹, without the cancellation when G is small
    middle = 0.5 * (middle + middle.mT)
    return VariationalConditioning(
        kernel=base,
        mean_module=mean,
        inducing_points=U,
        cholesky=L.to(dtype),
        weights=a.to(dtype),
        middle=middle.to(dtype),
    )


def sgpr_conditioning(model: ExactGP) -> VariationalConditioning:
    r"""The whitened inducing-space quantities :math:`(\mathbf U, \mathbf L, \mathbf a, \mathbf I - \mathbf A^{-1})`.

    Cached on the model's prediction strategy (built as GPyTorch's own first prediction would build it) when
    ``gpytorch.settings.detach_test_caches`` is on (the default; the cached tensors are then detached, like
    GPyTorch's caches). With it off the quantities are recomputed on every call so that gradients flow to the
    hyperparameters.

    :raises ModelStateError: the model is in train mode or has no training data.
    :raises NotImplementedError: unsupported structure (see :func:`sgpr_model_parts`).
    """
    sgpr_model_parts(model)
    if model.training:
        raise ModelStateError("Attributions need the model in eval mode: call model.eval() first.")
    if model.train_inputs is None or model.train_targets is None:
        raise ModelStateError("Attributions need a model with training data; this one has none.")
    strategy = ensure_prediction_strategy(model)
    detach = gsettings.detach_test_caches.on()
    if detach:
        cached = getattr(strategy, _CACHE_ATTR, None)
        if cached is not None:
            return cached
        with torch.no_grad():
            cond = _compute_conditioning(model, strategy)
        cond = VariationalConditioning(
            kernel=cond.kernel,
            mean_module=cond.mean_module,
            inducing_points=cond.inducing_points.detach(),
            cholesky=cond.cholesky.detach(),
            weights=cond.weights.detach(),
            middle=cond.middle.detach(),
        )
        setattr(strategy, _CACHE_ATTR, cond)
        return cond
    return _compute_conditioning(model, strategy)


def sgpr_functional_posterior(model: ExactGP, functional: Functional, x: Tensor, order: int = DEFAULT_ORDER):
    r"""The attribution GP :math:`\mathcal L f(\mathbf x)` of an SGPR model (see the module docstring).

    :param model: An ``ExactGP`` in eval mode with a Gaussian likelihood whose ``covar_module`` is an
        ``InducingPointKernel``.
    :param functional: :class:`~gpytorch_explain.attribution.GradientFunctional` or
        :class:`~gpytorch_explain.attribution.IntegratedGradientFunctional`.
    :param x: Points ``(m, D)`` (or ``(*batch, m, D)``), already checked against the training inputs.
    :param order: Gauss–Legendre order for base kernels without closed forms.
    :return: An :class:`~gpytorch_explain.attribution.AttributionDistribution`, mean ``(*batch, m, D)``, lazy
        interleaved covariance (the derived cross-covariances are ``m × D × M``, so nothing scales with ``n``).
    """
    cond = sgpr_conditioning(model)
    return cond.functional_posterior(functional, x.to(cond.inducing_points.device), order=order)
