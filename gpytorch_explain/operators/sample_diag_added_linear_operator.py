#!/usr/bin/env python3
r"""``A + D`` with the diagonal ``D`` tied to the *sample* index: the joint GPX covariance
:math:`(\mathbf K + \sigma_w^2\mathbf I)\odot\mathbf Z\mathbf Z^\top`.

GPyTorch's ``ExactGP`` evaluates the kernel once on the joint train+test inputs and slices the blocks it needs.
The weight noise :math:`\sigma_w^2\|\mathbf z_i\|^2` belongs to sample :math:`i` only, so a block between two
disjoint index ranges (the test/train block) is :math:`\mathbf A`'s block alone, and a diagonal block is
:math:`\mathbf A`'s block plus the matching part of :math:`\mathbf D`. Other indices (partly overlapping ranges,
tensor indices) fall back to linear_operator's generic path, which is exact.

Example:
    >>> import torch
    >>> from linear_operator.operators import DenseLinearOperator, DiagLinearOperator
    >>> a = torch.randn(5, 5, dtype=torch.float64)
    >>> op = _SampleDiagAddedLinearOperator(DenseLinearOperator(a @ a.T), DiagLinearOperator(torch.ones(5).double()))
    >>> dense = a @ a.T + torch.eye(5, dtype=torch.float64)
    >>> torch.allclose(op[3:, :3].to_dense(), dense[3:, :3]), torch.allclose(op[3:, 3:].to_dense(), dense[3:, 3:])
    (True, True)
    >>> type(op[3:, 3:]).__name__
    '_SampleDiagAddedLinearOperator'
"""

from __future__ import annotations

from linear_operator.operators import (
    AddedDiagLinearOperator,
    DiagLinearOperator,
    LinearOperator,
    MatmulLinearOperator,
)

from .gpx_inducing_linear_operator import GPXInducingLinearOperator
from .low_rank_hadamard_linear_operator import LowRankHadamardLinearOperator

__all__: list[str] = []


def _contiguous_range(index, size: int) -> tuple[int, int] | None:
    if isinstance(index, slice):
        start, stop, step = index.indices(size)
        if step == 1:
            return start, max(start, stop)
    return None


class _SampleDiagAddedLinearOperator(AddedDiagLinearOperator):
    """``A + D`` where the diagonal ``D`` is tied to the sample index.

    Off-diagonal blocks (e.g. the test/train block of a joint train+test covariance) slice to
    ``A``'s block alone, and diagonal blocks to ``A``'s block plus ``D``'s; other indices fall
    back to the generic path.
    """

    def _getitem(self, row_index, col_index, *batch_indices):
        rows = _contiguous_range(row_index, self.size(-2))
        cols = _contiguous_range(col_index, self.size(-1))
        if rows is not None and cols is not None:
            base = self._linear_op._getitem(row_index, col_index, *batch_indices)
            if rows[1] <= cols[0] or cols[1] <= rows[0]:
                return base
            if rows == cols:
                diag = self._diag_tensor._diag
                diag = diag.expand(*self.batch_shape, diag.size(-1))[(*batch_indices, row_index)]
                return _SampleDiagAddedLinearOperator(base, DiagLinearOperator(diag))
        return super()._getitem(row_index, col_index, *batch_indices)


def _without_sample_diagonal(op):
    r"""``op`` with every GPX sample diagonal removed: the cross-covariance between two sets of samples.

    A GPX covariance evaluated on equal inputs is the joint one, :math:`(\mathbf K + \sigma_w^2\mathbf I)\odot
    \mathbf Z\mathbf Z^\top` (a :class:`_SampleDiagAddedLinearOperator`, or a
    :class:`~gpytorch_explain.operators.GPXInducingLinearOperator` whose diagonal is the sample diagonal). When
    those inputs are two different sets of samples that happen to be equal (the test/train block of an
    ``ExactGP`` prediction at the training inputs), the diagonal does not belong there. Wrappers built by kernels
    around it (``ScaleKernel``'s constant multiple, ``AdditiveKernel``'s sum, ...) are rebuilt from their
    arguments as linear_operator's representation tree does; anything else is returned unchanged.

    :return: ``(op_without_diagonal, found)``, ``found`` telling whether a sample diagonal was removed.
    """
    if isinstance(op, _SampleDiagAddedLinearOperator):
        return op._linear_op, True
    if isinstance(op, GPXInducingLinearOperator):
        return LowRankHadamardLinearOperator(MatmulLinearOperator(op.phi, op.phi.mT), op.z, op.z), True
    if not isinstance(op, LinearOperator):
        return op, False
    found = False
    args = []
    for arg in op._args:
        new, hit = _without_sample_diagonal(arg)
        args.append(new)
        found = found or hit
    if not found:
        return op, False
    return op.__class__(*args, **op._kwargs), True
