#!/usr/bin/env python3
r"""Attribution GPs of any model whose predictive is differentiable in :math:`\mathbf x`, by autograd.

The gradient and the integrated gradients are linear functionals of the latent :math:`f`, so their posterior is
obtained from the model's own *joint* posterior over points, whatever happens inside ``forward`` (a deep-kernel
feature extractor, an input transform, BoTorch's ``Normalize``/``Standardize``, a user composition). Write each
attribution as a weighted sum of directional derivatives at path nodes :math:`\mathbf a_{pl}`,

.. math::

    \mathcal L_i f(\mathbf x_p) = \sum_l W_{pli}\, \partial_i f(\mathbf a_{pl}),

(the gradient: one node :math:`\mathbf a_{p1} = \mathbf x_p`, :math:`W = 1`; IG with baselines
:math:`\mathbf b_r` and Gauss–Legendre nodes :math:`(t_q, w_q)`: :math:`\mathbf a = \mathbf b_r + t_q(\mathbf x_p -
\mathbf b_r)`, :math:`W = w_q(x_{pi} - b_{ri})/k`). With :math:`\mu(\mathbf a)` and
:math:`\Sigma(\mathbf a, \mathbf a')` the posterior mean and joint covariance of :math:`f`,

.. math::

    \mathbb E[\mathcal L_i f(\mathbf x_p)] = \sum_l W_{pli}\,\partial_i\mu(\mathbf a_{pl}), \qquad
    \operatorname{Cov}(\mathcal L_i f(\mathbf x_p), \mathcal L_j f(\mathbf x_q)) = \sum_{l,l'} W_{pli} W_{ql'j}
    \,\partial_i\partial'_j\Sigma(\mathbf a_{pl}, \mathbf a_{ql'}),

both by reverse-mode autograd of one call of the model on the stacked nodes (``model(Z)`` for GPyTorch models,
``model.posterior(Z).mvn`` for BoTorch models, which includes their input and outcome transforms).

**Coincident nodes.** GPyTorch computes squared distances as :math:`\|\mathbf x\|^2 + \|\mathbf x'\|^2 -
2\mathbf x^\top\mathbf x'` clamped at 0: where :math:`\mathbf x = \mathbf x'` round-off below 0 zeroes the second
derivative at random. The mixed derivative is therefore evaluated with the second argument shifted,
:math:`H(\delta) = \partial\partial'\Sigma(\mathbf a, \mathbf a' + \delta\mathbf u)` (:math:`\mathbf u` the training
inputs' column scales over :math:`\sqrt D`), at :math:`\delta, 2\delta, 4\delta`, and Richardson-extrapolated to
:math:`\delta = 0`: :math:`H(0) \approx (8H(\delta) - 6H(2\delta) + H(4\delta))/3`, exact up to
:math:`O(\delta^3)` for any :math:`C^2` covariance (Matérn-3/2's :math:`O(r)` term included).
:math:`\delta = 10^{-4}` in float64 (relative error about :math:`10^{-12}(\text{scale}/\ell)^3`) and
:math:`3\cdot10^{-2}` in float32.

Cost: one model call on :math:`4N` points (:math:`N = m\times` nodes: the nodes and three shifted copies) and
:math:`mD` batched backward passes. Memory grows as :math:`mD\,N^2`; the calls are chunked.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from gpytorch.distributions import MultitaskMultivariateNormal, MultivariateNormal
from linear_operator import to_dense
from torch import Tensor

from .._compat import is_botorch_model
from ..errors import KernelNotDifferentiableError
from ..settings import block_budget
from ._differentiability import check_mean_square_differentiable
from ._quadrature import gauss_legendre
from .attribution_distribution import AttributionDistribution
from .completeness_gaps import CompletenessGaps
from .functionals import Functional, GradientFunctional

__all__ = [
    "JointPosterior",
    "autograd_functional_moments",
    "available_memory",
    "check_fallback_memory",
    "fallback_completeness",
    "fallback_posterior",
    "path_nodes",
]


class JointPosterior:
    r"""The latent joint posterior of a model at arbitrary points, as ``(mean (T, N), covariance (T, N, N))``.

    ``T`` indexes outputs (1 for a single-output model; the batch of a batch-independent model; the tasks of a
    ``MultitaskMultivariateNormal``, whose cross-task covariances are dropped). GPyTorch models are called
    (``model(Z)``, the posterior through ``forward``); BoTorch models give ``model.posterior(Z).mvn`` in the units
    the user sees (input and outcome transforms applied).
    """

    def __init__(self, model):
        self.model = model
        self.botorch = _is_botorch_model(model)
        self._dense = None

    def _use_dense(self, Z: Tensor) -> bool:
        """GPyTorch's multitask (Kronecker) predictive covariance is not differentiable in the test inputs (its
        autograd mixed derivatives come out near the prior's): such models are conditioned densely here."""
        if self._dense is None:
            from gpytorch.models import ExactGP

            self._dense = False
            if isinstance(self.model, ExactGP) and not self.botorch:
                with torch.no_grad():
                    self._dense = isinstance(self.model.forward(Z[..., :1, :]), MultitaskMultivariateNormal)
        return self._dense

    def _dense_posterior(self, Z: Tensor) -> MultitaskMultivariateNormal:
        r"""The exact posterior from the prior of ``forward`` on ``[X, Z]`` by one dense Cholesky:
        :math:`\mathbf m_Z + \mathbf K_{ZX}\mathbf C^{-1}(\mathbf y - \mathbf m_X)`,
        :math:`\mathbf K_{ZZ} - \mathbf K_{ZX}\mathbf C^{-1}\mathbf K_{XZ}` (:math:`\mathbf C` with the likelihood's
        noise)."""
        model = self.model
        X = model.train_inputs[0]
        n = X.size(-2)
        full = torch.cat([X.expand(*Z.shape[:-2], *X.shape[-2:]), Z], dim=-2)
        prior = model.forward(full)
        T = prior.mean.size(-1)
        mean = prior.mean.reshape(*prior.mean.shape[:-2], -1)  # interleaved (point, task)
        K = _multitask_covariance(model, full, prior)
        nt = n * T
        with torch.no_grad():
            train = model.forward(X)
            C = model.likelihood(train).covariance_matrix
            L = torch.linalg.cholesky(C)
            y = model.train_targets.reshape(*model.train_targets.shape[:-2], -1)
            alpha = torch.cholesky_solve((y - mean[..., :nt].detach()).unsqueeze(-1), L)
        Kzx = K[..., nt:, :nt]
        post_mean = mean[..., nt:] + (Kzx @ alpha).squeeze(-1)
        V = torch.linalg.solve_triangular(L, Kzx.mT, upper=False)
        post_cov = K[..., nt:, nt:] - V.mT @ V
        N = Z.size(-2)
        from linear_operator.operators import DenseLinearOperator

        mean_nt = post_mean.reshape(*post_mean.shape[:-1], N, T)
        return MultitaskMultivariateNormal(mean_nt, DenseLinearOperator(post_cov), interleaved=True)

    def distribution(self, Z: Tensor):
        if self._use_dense(Z):
            return self._dense_posterior(Z)
        if self.botorch:
            post = self.model.posterior(Z)
            mvn = getattr(post, "mvn", None)
            if mvn is None:
                raise NotImplementedError(
                    f"The BoTorch posterior {type(post).__name__} has no Gaussian `mvn`; attributions need a Gaussian "
                    "latent posterior."
                )
            return mvn
        return self.model(Z)

    def __call__(self, Z: Tensor) -> tuple[Tensor, Tensor]:
        dist = self.distribution(Z)
        if isinstance(dist, MultitaskMultivariateNormal):
            mean = dist.mean  # (*b, N, T)
            N, T = mean.shape[-2:]
            cov = dist.covariance_matrix
            if dist._interleaved:
                cov = cov.reshape(*cov.shape[:-2], N, T, N, T).diagonal(dim1=-3, dim2=-1)  # (*b, N, N, T)
            else:
                cov = cov.reshape(*cov.shape[:-2], T, N, T, N).diagonal(dim1=-4, dim2=-2)  # (*b, N, N, T)
            mean = mean.movedim(-1, -2).reshape(-1, N)
            cov = cov.movedim(-1, -3).reshape(-1, N, N)
            return mean, cov
        if isinstance(dist, MultivariateNormal):
            mean = dist.mean
            N = mean.size(-1)
            return mean.reshape(-1, N), dist.covariance_matrix.reshape(-1, N, N)
        raise TypeError(f"The model's posterior is a {type(dist).__name__}, not a (multitask) MultivariateNormal.")

    def output_shape(self, like: Tensor) -> torch.Size:
        """Batch shape of the outputs (``()`` for a single output)."""
        with torch.no_grad():
            dist = self.distribution(like[:1])
        if isinstance(dist, MultitaskMultivariateNormal):
            return torch.Size((*dist.batch_shape, dist.event_shape[-1]))
        return dist.batch_shape


def _multitask_covariance(model, full: Tensor, prior: MultitaskMultivariateNormal) -> Tensor:
    """Interleaved prior covariance, twice differentiable in the inputs.

    linear_operator's Kronecker product (``MultitaskKernel``) loses the second derivatives in its backward, so a
    ``MultitaskKernel`` whose forward is ``k_data(x, x') ⊗ B`` is formed densely here; the result is checked against
    the model's own prior values.
    """
    from gpytorch.kernels import MultitaskKernel

    covar = getattr(model, "covar_module", None)
    if type(covar) is MultitaskKernel:
        kd = to_dense(covar.data_covar_module(full))
        B = to_dense(covar.task_covar_module.covar_matrix)
        K = (kd[..., :, None, :, None] * B[..., None, :, None, :]).reshape(
            *kd.shape[:-2], *(s * B.size(-1) for s in kd.shape[-2:])
        )
        with torch.no_grad():
            ref = prior.covariance_matrix.detach() if prior._interleaved else None
        if ref is not None and torch.allclose(K.detach(), ref, rtol=1e-6, atol=1e-10 * float(ref.abs().max())):
            return K
    raise NotImplementedError(
        f"Multi-task models are supported by the autograd fallback with a MultitaskKernel covar_module (interleaved); "
        f"this one has {type(covar).__name__} (linear_operator's structured operators lose the second derivatives "
        "the attribution covariances need)."
    )


def _is_botorch_model(model) -> bool:
    return is_botorch_model(model)


def path_nodes(functional: Functional, x: Tensor, order: int) -> tuple[Tensor, Tensor]:
    r"""Nodes :math:`\mathbf a_{pl}` ``(m, L, D)`` and weights :math:`W_{pli}` ``(m, L, D)`` of the functional."""
    if isinstance(functional, GradientFunctional):
        return x.unsqueeze(-2), torch.ones_like(x).unsqueeze(-2)

    b = functional.baselines.to(x)  # (k, D)
    t, w = gauss_legendre(order, x)
    delta = x.unsqueeze(-2) - b  # (m, k, D)
    nodes = b.unsqueeze(-2) + t[:, None] * delta.unsqueeze(-2)  # (m, k, Q, D)
    weights = w[:, None] * delta.unsqueeze(-2) / b.size(0)
    m, D = x.shape
    return nodes.reshape(m, -1, D), weights.reshape(m, -1, D)


def _check_connected(value: Tensor, inputs: Tensor, what: str) -> None:
    if not value.requires_grad:
        raise KernelNotDifferentiableError(
            f"The model's posterior {what} is disconnected from autograd with respect to its inputs (computed "
            "outside torch, e.g. in numpy, or detached): its derivatives cannot be taken, and returning zeros would "
            "claim 'no effect'. Implement the kernel/forward with differentiable torch operations."
        )


def _grad(out: Tensor, inputs: Tensor, create_graph: bool = False) -> Tensor:
    (g,) = torch.autograd.grad(out, inputs, create_graph=create_graph, retain_graph=True, allow_unused=True)
    if g is None:
        _check_connected(out.new_zeros(()), inputs, "output")
    return g


def autograd_mean(joint: JointPosterior, nodes: Tensor, weights: Tensor) -> Tensor:
    r""":math:`\sum_l W_{pli}\partial_i\mu(\mathbf a_{pl})`, ``(T, m, D)``."""
    m, L, D = nodes.shape
    with torch.enable_grad():
        A = nodes.detach().reshape(m * L, D).requires_grad_(True)
        mean, _ = _mean_only(joint, A)
        _check_connected(mean, A, "mean")
        out = []
        for t in range(mean.size(0)):
            g = _grad(mean[t].sum(), A, create_graph=False)
            out.append((g.reshape(m, L, D) * weights).sum(-2))
    return torch.stack(out).detach()


def _mean_only(joint: JointPosterior, A: Tensor) -> tuple[Tensor, None]:
    dist = joint.distribution(A)
    mean = dist.mean
    if isinstance(dist, MultitaskMultivariateNormal):
        mean = mean.movedim(-1, -2)
    return mean.reshape(-1, A.size(-2)), None


def _mixed(joint: JointPosterior, nodes: Tensor, weights: Tensor, shifts: list[tuple[float, Tensor]]) -> Tensor:
    r"""Contracted mixed derivatives of :math:`\sum_c w_c\Sigma(\mathbf a, \mathbf a' + \mathbf s_c)` for
    ``shifts`` :math:`[(w_c, \mathbf s_c)]`, ``(T, m, D, m, D)``: one model call on all shifted copies (the second
    argument is one leaf, so :math:`\partial_{\mathbf a'}` of each term is its mixed derivative)."""
    m, L, D = nodes.shape
    N = m * L
    with torch.enable_grad():
        A = nodes.detach().reshape(N, D).clone().requires_grad_(True)
        B = nodes.detach().reshape(N, D).clone().requires_grad_(True)
        Bs = [B + shift for _, shift in shifts]
        _, cov = joint(torch.cat([A, *Bs], dim=-2))
        _check_connected(cov, A, "covariance")
        S = sum(w * cov[..., :N, N * (k + 1) : N * (k + 2)] for k, (w, _) in enumerate(shifts))  # (T, N, N)
        outs = []
        for t in range(S.size(0)):
            g = _grad(S[t].sum(), A, create_graph=True)  # (N, D): Σ_P' ∂_i S[P, P']
            c = (g.reshape(m, L, D) * weights).sum(-2).reshape(-1)  # (m·D,)
            if not c.requires_grad:
                outs.append(nodes.new_zeros(m, D, m, D))
                continue
            rows = []
            step = max(1, block_budget("fallback_batched") // max(1, N * N))
            eye = torch.eye(m * D, dtype=c.dtype, device=c.device)
            for r0 in range(0, m * D, step):
                r1 = min(m * D, r0 + step)
                try:
                    (h,) = torch.autograd.grad(
                        c, B, grad_outputs=eye[r0:r1], retain_graph=True, is_grads_batched=True, allow_unused=True
                    )
                except RuntimeError:
                    h = torch.stack(
                        [torch.autograd.grad(c[r], B, retain_graph=True, allow_unused=True)[0] for r in range(r0, r1)]
                    )
                rows.append(torch.zeros(r1 - r0, N, D, dtype=c.dtype, device=c.device) if h is None else h)
            h = torch.cat(rows).reshape(m * D, m, L, D)
            outs.append((h * weights).sum(-2).reshape(m, D, m, D).detach())
    return torch.stack(outs)


def input_scales(X: Tensor | None, like: Tensor) -> Tensor:
    """Per-column scales of the training inputs (1 where unknown or constant), ``(D,)``."""
    D = like.size(-1)
    if X is None or X.size(-2) < 2:
        return torch.ones(D, dtype=like.dtype, device=like.device)
    s = X.detach().reshape(-1, X.size(-1)).to(like).std(0)
    return torch.where(s > 0, s, torch.ones_like(s))


def autograd_covariance(joint: JointPosterior, nodes: Tensor, weights: Tensor, scales: Tensor) -> Tensor:
    r"""Joint covariance ``(T, m·D, m·D)`` (interleaved) by Richardson-extrapolated mixed derivatives."""
    delta = 1e-4 if nodes.dtype == torch.float64 else 3e-2
    u = scales.to(nodes) / math.sqrt(max(1, int((scales != 0).sum())))
    H = _mixed(joint, nodes, weights, [(8.0 / 3.0, delta * u), (-2.0, 2.0 * delta * u), (1.0 / 3.0, 4.0 * delta * u)])
    T, m, D = H.shape[0], H.shape[1], H.shape[2]
    H = H.reshape(T, m * D, m * D)
    return 0.5 * (H + H.mT)


def autograd_functional_moments(
    joint: JointPosterior, functional: Functional, x: Tensor, order: int, scales: Tensor
) -> tuple[Tensor, Tensor]:
    """Mean ``(T, m, D)`` and joint covariance ``(T, m·D, m·D)`` of the functional at ``x`` ``(m, D)``."""
    nodes, weights = path_nodes(functional, x, order)
    mean = autograd_mean(joint, nodes, weights)
    # shift only along columns the posterior depends on: a shifted categorical column (compared by equality in
    # e.g. BoTorch's CategoricalKernel) would change the covariance instead of avoiding the coincidence
    live = (mean != 0).reshape(-1, x.size(-1)).any(0)
    if not live.any():
        live = torch.ones_like(live)
    return mean, autograd_covariance(joint, nodes, weights, scales * live.to(scales))


def latent_moments(joint: JointPosterior, points: Tensor) -> tuple[Tensor, Tensor]:
    """Posterior mean ``(T, P)`` and covariance ``(T, P, P)`` of the latent at ``points``."""
    with torch.no_grad():
        return joint(points)


LatentFn = Callable[[Tensor], tuple[Tensor, Tensor]]


def available_memory(device: torch.device) -> int | None:
    """Free memory in bytes on ``device`` (``MemAvailable`` on Linux CPUs), ``None`` when unknown."""
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        return int(free)
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:  # pragma: no cover - not Linux
        return None
    return None


def fallback_memory_estimate(functional: Functional, x: Tensor, order: int, num_train: int = 0) -> int:
    """Rough peak bytes of one autograd-fallback call (model call on ``2N`` points, batched mixed derivatives)."""
    m, D = x.shape[-2:]
    nodes = 1 if isinstance(functional, GradientFunctional) else functional.num_baselines * int(order)
    N = m * nodes
    size = x.element_size()
    rows = min(m * D, max(1, block_budget("fallback_batched") // max(1, N * N)))
    return size * (6 * (num_train + 4 * N) ** 2 + 4 * rows * N * N + 8 * N * num_train)


def check_fallback_memory(functional: Functional, x: Tensor, order: int, num_train: int = 0) -> None:
    """Raise ``MemoryError`` (with the estimate and the alternatives) when the call cannot fit in free memory."""
    need = fallback_memory_estimate(functional, x, order, num_train)
    free = available_memory(x.device)
    if free is not None and need > 0.8 * free:
        raise MemoryError(
            f"The autograd fallback at {x.size(-2)} points (order {order}) needs about {need / 2**30:.1f} GiB, "
            f"more than the {free / 2**30:.1f} GiB free on {x.device}. Call it on fewer points at a time, pass a "
            "smaller explicit order=, or use a model the closed forms cover (mean_module + covar_module of the raw "
            "inputs; SGPR or variational models for large n)."
        )


# --------------------------------------------------------------------------- used by PosteriorGradient / IG
def fallback_posterior(owner, x: Tensor, order: int):
    """The attribution distribution of ``owner`` (a ``PosteriorGradient``/``PosteriorIntegratedGradients`` on the
    autograd path) at ``x`` ``(m, D)``: mean ``(*outputs, m, D)``, dense interleaved covariance."""
    import warnings

    from linear_operator.operators import DenseLinearOperator

    X = owner._raw_train_inputs()
    inputs = getattr(owner.model, "train_inputs", None)
    n = inputs[0].size(-2) if inputs else 0
    check_fallback_memory(owner.functional, x, order, n)
    if not hasattr(owner, "_not_differentiable"):  # probed once per owner; the verdict is kept
        try:
            check_mean_square_differentiable(
                lambda R: latent_moments(owner._joint, R)[1], x[0].detach(), input_scales(X, x), "The model's posterior"
            )
            owner._not_differentiable = None
        except KernelNotDifferentiableError as err:
            owner._not_differentiable = err
    if owner._not_differentiable is not None:
        raise KernelNotDifferentiableError(str(owner._not_differentiable))
    mean, cov = autograd_functional_moments(owner._joint, owner.functional, x, order, input_scales(X, x))
    shape = owner._joint.output_shape(x)
    m, D = x.shape
    mean = mean.reshape(*shape, m, D)
    cov = cov.reshape(*shape, m * D, m * D)
    var = cov.diagonal(dim1=-2, dim2=-1).reshape(*shape, m, D)
    dead = ((mean == 0) & (var == 0)).reshape(-1, m, D).all(0).all(0)
    if dead.any() and not getattr(owner, "_warned_dead", False):
        owner._warned_dead = True
        cols = dead.nonzero().flatten().tolist()
        warnings.warn(
            f"{type(owner).__name__}: input columns {cols} have exactly zero gradient and zero variance at every "
            "point: the model's posterior does not depend on them differentiably (categorical columns, e.g. of a "
            "MixedSingleTaskGP, or ignored inputs). Their attributions are not defined; integrated gradients "
            "through such columns are incomplete (check completeness(x)).",
            stacklevel=4,
        )
    return AttributionDistribution(mean, DenseLinearOperator(cov), interleaved=True)


def fallback_completeness(owner, x: Tensor, attr):
    """Completeness of an autograd-path IG against the model's own joint posterior of ``f(x)`` and ``f(b)``."""

    m, D = x.shape
    shape = attr.mean.shape[:-2]
    cov = attr.covariance_matrix.detach().reshape(*shape, m, D, m, D)
    sum_mean = attr.mean.detach().sum(-1)
    sum_var = torch.diagonal(cov, dim1=-4, dim2=-2).sum((-3, -2))  # (*shape, m)
    b = owner.baselines
    kb = b.size(0)
    w = torch.cat([torch.ones(1, dtype=x.dtype, device=x.device), torch.full((kb,), -1.0 / kb).to(x)])
    mean_out, var_out = [], []
    for p in range(m):
        with torch.no_grad():
            mean, cov_p = owner._joint(torch.cat([x[p : p + 1], b], dim=-2))
        mean_out.append((mean * w).sum(-1))
        var_out.append(((cov_p * w.unsqueeze(-1)) * w).sum((-1, -2)))
    diff_mean = torch.stack(mean_out, dim=-1).reshape(sum_mean.shape)
    diff_var = torch.stack(var_out, dim=-1).reshape(sum_var.shape)
    return CompletenessGaps(
        mean_gap=sum_mean - diff_mean,
        variance_gap=sum_var - diff_var,
        attribution_sum_mean=sum_mean,
        prediction_difference_mean=diff_mean,
        attribution_sum_variance=sum_var,
        prediction_difference_variance=diff_var,
    )
