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

from linear_operator.operators import AddedDiagLinearOperator, DiagLinearOperator

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

