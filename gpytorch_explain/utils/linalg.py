#!/usr/bin/env python3
"""Dense linear-algebra helpers with closed-form gradients."""

from __future__ import annotations

import math
import warnings

import torch
from linear_operator.utils.cholesky import psd_safe_cholesky
from linear_operator.utils.errors import NanError, NotPSDError
from linear_operator.utils.warnings import NumericalWarning
from torch import Tensor

__all__ = [
    "dense_gaussian_nll",
    "dense_limit",
    "kron_identity",
    "shared_matrix",
    "solve_checked",
    "solve_triangular_shared",
]


def dense_limit() -> int:
    """The largest n GPX factorises densely (see :class:`gpytorch_explain.settings.max_cholesky_size`):
    ``max(gpytorch.settings.max_cholesky_size, gpytorch_explain.settings.max_cholesky_size)``."""
    from gpytorch import settings as gsettings

    from .. import settings as explain_settings

    return max(gsettings.max_cholesky_size.value(), explain_settings.max_cholesky_size.value())


def kron_identity(matrix: Tensor, d: int) -> Tensor:
    r""":math:`\mathbf P \otimes \mathbf I_d` for a batch of matrices ``(*batch, m, k)`` → ``(*batch, m d, k d)``.

    Entry ``(p d + a, q d + b)`` is :math:`P_{pq}\,\delta_{ab}`. Unlike :func:`torch.kron` (which takes the Kronecker
    product over the batch dimensions too and rejects non-contiguous views such as transposes or expansions), it
    broadcasts over the batch.

    >>> import torch
    >>> kron_identity(torch.tensor([[1.0, 2.0], [3.0, 4.0]]), 2)[0]
    tensor([1., 0., 2., 0.])
    """
    eye = torch.eye(d, dtype=matrix.dtype, device=matrix.device)
    blocks = matrix[..., :, None, :, None] * eye[:, None, :]  # (*batch, m, d, k, d)
    return blocks.reshape(*matrix.shape[:-2], matrix.size(-2) * d, matrix.size(-1) * d)


def shared_matrix(matrix: Tensor) -> Tensor | None:
    r"""The one matrix that a batch of matrices ``(*batch, n, k)`` repeats, or ``None`` when the members differ.

    An unbatched matrix is returned as it is. A batch is shared when every batch dimension longer than one has
    stride 0, as :meth:`torch.Tensor.expand` makes it; the shared member is then returned as a 2-D view.

    >>> import torch
    >>> a = torch.eye(2)
    >>> shared_matrix(a.expand(3, 2, 2)).shape, shared_matrix(torch.stack([a, 2 * a]))
    (torch.Size([2, 2]), None)
    """
    if matrix.dim() <= 2:
        return matrix
    if all(stride == 0 for size, stride in zip(matrix.shape[:-2], matrix.stride()[:-2], strict=True) if size > 1):
        return matrix[(0,) * (matrix.dim() - 2)]
    return None


def solve_triangular_shared(factor: Tensor, rhs: Tensor, *, upper: bool) -> Tensor:
    r""":func:`torch.linalg.solve_triangular` ``(factor, rhs, upper=upper)`` without a copy of a shared factor per
    batch member.

    torch copies the ``n x n`` factor once per batch member of the result whenever the factor is broadcast (an
    unbatched factor with batched right-hand sides, or an expanded one). When every member uses the same factor
    (:func:`shared_matrix`), the batch is folded into the columns instead,
    :math:`\mathbf L^{-1}[\mathbf b_1, \dots, \mathbf b_B]`, which costs one copy of the right-hand sides.

    >>> import torch
    >>> L = torch.tensor([[2.0, 0.0], [1.0, 1.0]])
    >>> b = torch.randn(4, 2, 3)
    >>> torch.allclose(solve_triangular_shared(L.expand(4, 2, 2), b, upper=False),
    ...                torch.linalg.solve_triangular(L, b, upper=False))
    True
    """
    shared = shared_matrix(factor)
    if shared is None or rhs.dim() <= 2:
        return torch.linalg.solve_triangular(factor, rhs, upper=upper)
    n, t = rhs.shape[-2:]
    batch = torch.broadcast_shapes(rhs.shape[:-2], factor.shape[:-2])
    folded = rhs.movedim(-2, 0).reshape(n, -1)  # (n, B·t)
    res = torch.linalg.solve_triangular(shared, folded, upper=upper)
    res = res.reshape(n, *rhs.shape[:-2], t).movedim(0, -2)
    return res if res.shape[:-2] == batch else res.expand(*batch, n, t)


#: CG iterations per round of a derived solve (see :func:`solve_checked`).
CG_ROUND_ITERATIONS = 500

#: The residual reduction each round asks CG for (relative to the round's right-hand side).
CG_ROUND_REDUCTION = 1e-3


def _relative_residual(operator, x: Tensor, rhs: Tensor) -> tuple[Tensor, float]:
    with torch.no_grad():
        resid = rhs.detach() - operator.matmul(x.detach())
        rel = resid.norm(dim=-2) / rhs.detach().norm(dim=-2).clamp_min(torch.finfo(rhs.dtype).tiny)
    return resid, rel.max().item()


def solve_checked(operator, rhs: Tensor, limit: float | None = None, what: str = "the solve") -> Tensor:
    r""":math:`\mathbf C^{-1}\mathbf B` through ``operator.solve``, with the relative residual checked.

    Iterative solvers (GPyTorch's CG above ``max_cholesky_size``) stop after a maximum number of
    iterations with only a warning; derived quantities (local weights, attributions) would then be
    silently wrong. This computes :math:`\max_j \|\mathbf C\mathbf x_j - \mathbf b_j\| / \|\mathbf b_j\|`
    (one extra product with :math:`\mathbf C`) and raises
    :class:`~gpytorch_explain.errors.ConvergenceError` when it exceeds ``limit`` (default:
    :func:`gpytorch_explain.settings.cg_residual_limit`) or the result is not finite.

    Without gradients, the solve runs in rounds on the current residual (iterative refinement,
    :math:`\mathbf x \leftarrow \mathbf x + \mathbf C^{-1}(\mathbf b - \mathbf C\mathbf x)`), each asking CG
    (linear_operator's ``linear_cg``) for a reduction of ``CG_ROUND_REDUCTION`` in at most ``CG_ROUND_ITERATIONS``
    iterations, within the total budget ``gpytorch.settings.max_cg_iterations``. ``linear_cg`` stops updating
    once :math:`\mathbf r^\top\mathbf M^{-1}\mathbf r` of its normalised residual falls below ``1e-10``, so in one
    run it cannot reach much below a relative residual of :math:`10^{-5}`, and a tighter tolerance made it spend
    its whole budget on the plateau (``2n`` iterations for GPX's derived solves). The rounds stop at the target
    ``gpytorch.settings.cg_tolerance``, or once a round no longer halves the residual while it is already within
    ``limit``. The target is at most :func:`gpytorch_explain.settings.derived_solve_tolerance` (GPyTorch's own
    default ``cg_tolerance``, 1.0, is meant for training). A solve that is direct (Cholesky, Woodbury) ends after the
    first round.

    Example:
        >>> import torch
        >>> from linear_operator.operators import DenseLinearOperator
        >>> a = torch.eye(3, dtype=torch.float64) * 2
        >>> solve_checked(DenseLinearOperator(a), torch.ones(3, 1, dtype=torch.float64)).squeeze(-1)
        tensor([0.5000, 0.5000, 0.5000], dtype=torch.float64)
    """
    from gpytorch import settings as gsettings

    from ..errors import ConvergenceError
    from ..settings import cg_residual_limit, derived_solve_tolerance

    if limit is None:
        limit = cg_residual_limit(rhs.dtype)
    budget = gsettings.max_cg_iterations.value()
    needs_grad = torch.is_grad_enabled() and (
        rhs.requires_grad or any(t.requires_grad for t in getattr(operator, "representation", lambda: ())())
    )
    if needs_grad:
        res = operator.solve(rhs)
        _check_finite(res, what, ConvergenceError)
        _, rel = _relative_residual(operator, res, rhs)
    else:
        # GPyTorch's own default cg_tolerance (1.0, meant for training) would end the rounds at once; a derived
        # solve aims at least at derived_solve_tolerance
        target = min(gsettings.cg_tolerance.value(), derived_solve_tolerance(rhs.dtype))
        res, resid, rel, used = None, rhs, 1.0, 0
        while used < budget:
            rounds = min(CG_ROUND_ITERATIONS, budget - used)
            round_tol = max(target / max(rel, 1e-300), CG_ROUND_REDUCTION)
            with (
                gsettings.max_cg_iterations(rounds),
                gsettings.cg_tolerance(round_tol),
                warnings.catch_warnings(),
            ):
                warnings.simplefilter("ignore", NumericalWarning)  # a round ending at its cap is expected
                step = operator.solve(resid)
            _check_finite(step, what, ConvergenceError)
            res = step if res is None else res + step
            used += rounds
            resid, new_rel = _relative_residual(operator, res, rhs)
            stalled = new_rel > 0.5 * rel
            rel = new_rel
            if rel <= target or (stalled and rel <= limit):
                break
    if rel > limit:
        raise ConvergenceError(
            f"Conjugate gradients did not converge for {what}: relative residual {rel:.2e} > {limit:.0e} "
            "(gpytorch_explain.settings.max_cg_residual). Raise gpytorch.settings.max_cg_iterations, lower "
            "gpytorch.settings.cg_tolerance, raise "
            "gpytorch.settings.max_preconditioner_size, use float64, or use an inducing-point base kernel "
            "(solved exactly)."
        )
    return res


def _check_finite(res: Tensor, what: str, error: type) -> None:
    if not torch.isfinite(res).all():
        raise error(f"{what} returned NaN or infinite values (the training covariance may be singular).")


class _DenseGaussianNLL(torch.autograd.Function):
    @staticmethod
    def forward(ctx, covar: Tensor, diff: Tensor) -> Tensor:
        try:  # GPyTorch's jittered Cholesky (gpytorch.settings.cholesky_jitter / cholesky_max_tries), as in its MLL
            chol = psd_safe_cholesky(covar)
        except (NotPSDError, NanError) as exc:
            raise torch.linalg.LinAlgError(
                f"The training covariance is not positive definite ({exc}); check the data scaling and the noise, or "
                "raise gpytorch.settings.cholesky_jitter."
            ) from None
        alpha = torch.cholesky_solve(diff.unsqueeze(-1), chol).squeeze(-1)
        ctx.save_for_backward(chol, alpha, diff)
        n = diff.size(-1)
        logdet = 2 * chol.diagonal(dim1=-2, dim2=-1).log().sum(-1)
        return 0.5 * ((diff * alpha).sum(-1) + logdet + n * math.log(2 * math.pi))

    @staticmethod
    def backward(ctx, grad_output: Tensor):
        chol, alpha, _ = ctx.saved_tensors
        g = grad_output[..., None, None]
        grad_covar = grad_diff = None
        if ctx.needs_input_grad[0]:
            # d/dC [½ dᵀC⁻¹d + ½ log|C|] = ½ (C⁻¹ − ααᵀ)
            grad_covar = torch.cholesky_inverse(chol)
            if alpha.dim() == 1:
                grad_covar.addr_(alpha, alpha, alpha=-1)
            else:
                grad_covar.sub_(alpha.unsqueeze(-1) * alpha.unsqueeze(-2))
            grad_covar.mul_(0.5 * g)
        if ctx.needs_input_grad[1]:
            grad_diff = grad_output[..., None] * alpha
        return grad_covar, grad_diff


def dense_gaussian_nll(covar: Tensor, diff: Tensor) -> Tensor:
    r"""Negative log density :math:`-\log\mathcal N(\mathbf d \mid \mathbf 0, \mathbf C)` of a dense Gaussian.

    .. math::

        \tfrac12 \mathbf d^\top \mathbf C^{-1} \mathbf d + \tfrac12 \log|\mathbf C| + \tfrac n2 \log 2\pi,
        \qquad
        \frac{\partial}{\partial \mathbf C}
        = \tfrac12 \left(\mathbf C^{-1} - \boldsymbol\alpha\boldsymbol\alpha^\top\right),
        \quad \boldsymbol\alpha = \mathbf C^{-1}\mathbf d .

    One Cholesky factorisation forward and one ``cholesky_inverse`` backward: about half the work
    of differentiating through ``torch.linalg.cholesky`` and a triangular solve. As in GPyTorch's
    marginal likelihood, a covariance that is not numerically positive definite gets jitter on its
    diagonal (``gpytorch.settings.cholesky_jitter``, up to ``cholesky_max_tries`` tenfold increases,
    each with a ``NumericalWarning``); the value and gradient are then those of the jittered matrix.
    If that fails too, a ``torch.linalg.LinAlgError`` says so.

    :param covar: :math:`\mathbf C`, ``(..., n, n)``, symmetric positive definite.
    :param diff: :math:`\mathbf d = \mathbf y - \boldsymbol\mu`, ``(..., n)``.

    Example:
        >>> import torch
        >>> from gpytorch_explain.utils import dense_gaussian_nll
        >>> C = torch.eye(3, dtype=torch.float64) * 2
        >>> d = torch.ones(3, dtype=torch.float64)
        >>> ref = -torch.distributions.MultivariateNormal(torch.zeros(3, dtype=torch.float64), C).log_prob(d)
        >>> bool(torch.isclose(dense_gaussian_nll(C, d), ref))
        True
    """
    return _DenseGaussianNLL.apply(covar, diff)
