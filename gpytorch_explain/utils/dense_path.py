#!/usr/bin/env python3
r"""GPX's dense prediction path: when it is taken, the memory it needs, and its factor built in place.

Predictions of a :class:`~gpytorch_explain.GPXModel` (the mean cache :math:`\mathbf C^{-1}(\mathbf y - \mathbf m)`,
the latent covariance, the per-point weight covariances and attributions) go through one Cholesky factor of the
:math:`n \times n` training covariance :math:`\mathbf C` when :func:`uses_dense_path` says so: always up to
:func:`~gpytorch_explain.utils.dense_limit`, and above it, unless ``gpytorch_explain.settings.max_cholesky_size`` is
set explicitly (a hard cap) or ``gpytorch.settings.fast_pred_var()`` asks for LOVE, as long as
:func:`dense_path_bytes` fits :class:`gpytorch_explain.settings.dense_memory_budget`.

:func:`dense_cholesky` builds that factor in *one* :math:`n \times n` buffer: :math:`\mathbf C` is written into it in
row blocks (nothing else :math:`n \times n` is formed or cached: neither the kernel matrix nor
:math:`\mathbf Z\mathbf Z^\top`), the diagonals are added in place, and LAPACK/cuSOLVER factorise it in place
(``torch.linalg.cholesky_ex`` with ``out=`` the column-major view of the buffer, which for a symmetric matrix holds
the same numbers). The factor is that column-major view, which triangular solves read without a copy.

Example:
    >>> import torch
    >>> from linear_operator.operators import DenseLinearOperator
    >>> a = torch.randn(6, 6, dtype=torch.float64)
    >>> c = a @ a.T + 6 * torch.eye(6, dtype=torch.float64)
    >>> L = dense_cholesky(DenseLinearOperator(c))
    >>> torch.allclose(L, torch.linalg.cholesky(c))
    True
"""

from __future__ import annotations

import math
import warnings

import torch
from linear_operator import settings as linop_settings
from linear_operator import to_dense
from linear_operator.operators import AddedDiagLinearOperator, LinearOperator
from linear_operator.utils.errors import NanError, NotPSDError
from linear_operator.utils.warnings import NumericalWarning
from torch import Tensor

from .linalg import dense_limit

__all__ = ["DENSE_BLOCK_COPIES", "dense_cholesky", "dense_fits", "dense_path_bytes", "uses_dense_path"]

#: Row-block-sized temporaries counted for one block of :math:`\mathbf C` being computed (the kernel's own
#: intermediates, the feature product, the block itself). ``benchmarks/dense_path_memory.py`` measured about 2 with
#: ``ScaleKernel(RBFKernel)``; 4 leaves room for kernels with more intermediates.
DENSE_BLOCK_COPIES = 4


def _block_rows(n: int, batch_numel: int) -> int:
    from ..settings import block_budget

    return max(1, block_budget("dense_rows") // max(1, n * batch_numel))


def dense_path_bytes(n: int, dtype: torch.dtype, batch_numel: int = 1) -> float:
    r"""Peak bytes of :func:`dense_cholesky` on an :math:`n \times n` covariance (times ``batch_numel``):

    .. math::

        s\,\beta\,\bigl(n^2 + c\,\min(b\,n,\; n^2)\bigr),

    with :math:`s` the item size, :math:`\beta` the batch size, :math:`b` the rows of a block (site ``dense_rows`` of
    :class:`gpytorch_explain.settings.max_block_elements`) and :math:`c =` ``DENSE_BLOCK_COPIES`` block-sized
    temporaries. One :math:`n \times n` buffer holds :math:`\mathbf C` and then its factor.

    Example:
        >>> import torch
        >>> round(dense_path_bytes(100_000, torch.float32) / 4e10, 4)  # one 40 GB matrix and 4 blocks of 41 rows
        1.0016
    """
    itemsize = torch.finfo(dtype).bits // 8
    block = _block_rows(n, batch_numel) * n
    return float(itemsize) * batch_numel * (float(n) * n + DENSE_BLOCK_COPIES * min(block, n * n))


def dense_fits(n: int, dtype: torch.dtype, device=None, batch_numel: int = 1, free: int | None = None) -> bool:
    """Whether :func:`dense_path_bytes` is within :class:`gpytorch_explain.settings.dense_memory_budget` on
    ``device`` (``free``: the free bytes to take the default budget from, read now when ``None``).

    Example:
        >>> import torch
        >>> from gpytorch_explain.settings import dense_memory_budget
        >>> with dense_memory_budget(10**9):
        ...     dense_fits(10_000, torch.float64), dense_fits(20_000, torch.float64)
        (True, False)
    """
    from ..settings import dense_budget_bytes

    return dense_path_bytes(n, dtype, batch_numel) <= dense_budget_bytes(device, free)


def uses_dense_path(
    n: int, dtype: torch.dtype, device=None, batch_numel: int = 1, free: int | None = None, grow: bool = True
) -> bool:
    """Whether GPX predicts through one dense Cholesky factor of the :math:`n \\times n` training covariance.

    Yes up to :func:`~gpytorch_explain.utils.dense_limit`. Above it, only when ``grow`` (the caller's covariance is
    no Woodbury or interpolated operator), ``gpytorch_explain.settings.max_cholesky_size`` is at its default (an
    explicit value is a hard cap), ``gpytorch.settings.fast_pred_var()`` is off (which asks for LOVE) and
    :func:`dense_fits`.
    """
    from gpytorch import settings as gsettings

    from ..settings import max_cholesky_size

    if n <= dense_limit():
        return True
    if not grow or max_cholesky_size.is_set() or gsettings.fast_pred_var.on():
        return False
    return dense_fits(n, dtype, device, batch_numel, free)


def _peel_diagonals(covar: LinearOperator) -> tuple[LinearOperator, list[Tensor]]:
    """``covar = core + D_1 + D_2 + ...``: the core operator and the diagonals (``AddedDiagLinearOperator`` layers,
    e.g. GPX's weight noise and the likelihood's noise)."""
    diags = []
    while isinstance(covar, AddedDiagLinearOperator):
        diags.append(covar._diag_tensor.diagonal(dim1=-1, dim2=-2))
        covar = covar._linear_op
    return covar, diags


def _fill(core: LinearOperator, diags: list[Tensor], out: Tensor | None) -> Tensor:
    """Write ``core + sum(diags)`` into ``out`` (allocated when ``None``) in row blocks."""
    shape = core.shape
    n = shape[-1]
    if out is None:
        out = torch.empty(shape, dtype=core.dtype, device=core.device)
    step = _block_rows(n, math.prod(shape[:-2]))
    for start in range(0, n, step):
        rows = slice(start, min(start + step, n))
        block = to_dense(core[..., rows, :])
        if not torch.isfinite(block).all():
            raise NanError(f"The training covariance has non-finite entries in rows {rows.start}-{rows.stop - 1}.")
        out[..., rows, :] = block
        del block
    diagonal = out.diagonal(dim1=-2, dim2=-1)
    for d in diags:
        diagonal.add_(d)
    return out


def dense_cholesky(covar: LinearOperator | Tensor) -> Tensor:
    r"""The lower Cholesky factor :math:`\mathbf L` of ``covar`` (no autograd graph), built in one
    :math:`n \times n` buffer (see the module docstring); peak memory :func:`dense_path_bytes`.

    When the matrix is not numerically positive definite, it is rebuilt with linear_operator's
    ``cholesky_jitter`` (times :math:`10^i`, up to ``cholesky_max_tries`` times) added to the diagonal of the
    failed batch members, with a ``NumericalWarning``, as ``linear_operator.utils.cholesky.psd_safe_cholesky`` does;
    ``NotPSDError`` after that. The result is a column-major (transposed) view of the buffer.
    """
    if torch.is_tensor(covar):
        from linear_operator.operators import DenseLinearOperator

        covar = DenseLinearOperator(covar)
    with torch.no_grad():
        core, diags = _peel_diagonals(covar)
        jitter = linop_settings.cholesky_jitter.value(covar.dtype)
        tries = linop_settings.cholesky_max_tries.value()
        buffer = _fill(core, diags, None)
        info = torch.empty(buffer.shape[:-2], dtype=torch.int32, device=buffer.device)
        added = torch.zeros(info.shape, dtype=buffer.dtype, device=buffer.device)
        previous = 0.0
        for attempt in range(tries + 1):
            if attempt:  # rebuild: the failed factorisation overwrote the buffer
                current = jitter * 10 ** (attempt - 1)
                added += (info > 0).to(added.dtype) * (current - previous)
                previous = current
                _fill(core, diags, buffer)
                buffer.diagonal(dim1=-2, dim2=-1).add_(added.unsqueeze(-1))
                message = f"A not p.d., added jitter of {current:.1e} to the diagonal"
                warnings.warn(message, NumericalWarning, stacklevel=2)
            factor = buffer.mT  # column-major: LAPACK factorises it where it is
            torch.linalg.cholesky_ex(factor, out=(factor, info))
            if not torch.any(info):
                return factor
        raise NotPSDError(
            f"Matrix not positive definite after repeatedly adding jitter up to {jitter * 10 ** (tries - 1):.1e}."
        )
