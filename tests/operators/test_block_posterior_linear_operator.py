"""linear_operator's standard battery for BlockPosteriorLinearOperator, the base class of the posterior operators.

It is abstract (subclasses provide the prior and the rows of B), so the battery runs on the smallest concrete
subclass, :class:`_DensePosterior`, which holds P and B as dense tensors and uses every default of the base class
(products with B, root products, in-place chunk solves, the reduction blocks). The reference is
:math:`\\mathbf P - \\mathbf B^\\top \\mathbf C^{-1} \\mathbf B` formed densely, P, B and C being blocks of one
random positive definite joint covariance. The subclasses' own batteries are in
test_weight_posterior_linear_operator.py and test_attribution_posterior_linear_operator.py.
"""

import unittest

import torch
from linear_operator.operators import LinearOperator
from linear_operator.test.linear_operator_test_case import LinearOperatorTestCase

from gpytorch_explain.operators import BlockPosteriorLinearOperator
from gpytorch_explain.settings import max_block_elements

N, M, D = 5, 3, 2


class _DensePosterior(BlockPosteriorLinearOperator):
    """P (``(*batch, md, md)``) and the rows of Bᵀ (``(*batch, m, d, n)``) as dense tensors."""

    def __init__(self, prior, rows, factor, factor_type="cholesky"):
        super().__init__(prior, rows, factor, factor_type=factor_type)
        self.prior = prior
        self.rows = rows
        self._init_factor(factor, factor_type)

    @property
    def num_points(self):
        return self.rows.size(-3)

    @property
    def num_features(self):
        return self.rows.size(-2)

    def _size(self):
        md = self.num_points * self.num_features
        return torch.Size((*self.rows.shape[:-3], md, md))

    def _transpose_nonbatch(self) -> LinearOperator:
        return self.__class__(self.prior.mT, self.rows, self.factor, self.factor_type)

    def _b_rows(self, points):
        return self.rows[..., points, :, :]

    def _prior_dense(self):
        return self.prior

    def _prior_point_blocks(self):
        m, d = self.num_points, self.num_features
        blocks = self.prior.reshape(*self.prior.shape[:-2], m, d, m, d)
        return torch.diagonal(blocks, dim1=-4, dim2=-2).movedim(-1, -3)


def _parts(*batch, seed=0):
    """A joint Gaussian prior over (m·d outputs, n targets) and its conditional: positive definite by construction."""
    gen = torch.Generator().manual_seed(seed)
    a = torch.randn(*batch, M * D + N, M * D + N, generator=gen, dtype=torch.float64)
    joint = a @ a.mT / (M * D + N) + torch.eye(M * D + N, dtype=torch.float64)
    prior, b, covar = joint[..., : M * D, : M * D], joint[..., M * D :, : M * D], joint[..., M * D :, M * D :]
    rows = b.mT.reshape(*batch, M, D, N)
    return prior, rows, covar


class TestBlockPosteriorLinearOperator(LinearOperatorTestCase, unittest.TestCase):
    seed = 0
    should_test_sample = True
    batch = ()
    factor_type = "cholesky"

    def setUp(self):
        # the battery draws its right-hand sides in the default dtype
        self._default_dtype = torch.get_default_dtype()
        torch.set_default_dtype(torch.float64)
        super().setUp()

    def tearDown(self):
        super().tearDown()
        torch.set_default_dtype(self._default_dtype)

    def _factor(self, covar):
        if self.factor_type == "root":  # R Rᵀ = C⁻¹
            eye = torch.eye(N, dtype=torch.float64)
            return torch.linalg.solve_triangular(torch.linalg.cholesky(covar), eye, upper=False).mT
        return torch.linalg.cholesky(covar)

    def create_linear_op(self):
        prior, rows, covar = _parts(*self.batch, seed=self.seed)
        factor = self._factor(covar)
        return _DensePosterior(
            prior.requires_grad_(True), rows.requires_grad_(True), factor.requires_grad_(True), self.factor_type
        )

    def evaluate_linear_op(self, linear_op):
        f = linear_op.factor
        b = linear_op.rows.reshape(*linear_op.rows.shape[:-3], M * D, N).mT
        # L⁻¹B by a triangular solve (only the lower triangle of L enters, as in the operator), or RᵀB
        v = torch.linalg.solve_triangular(f, b, upper=False) if self.factor_type == "cholesky" else f.mT @ b
        return linear_op.prior - v.mT @ v

    def test_point_blocks_in_chunks(self):
        """One chunk, and one point per chunk (the in-place buffered solves without autograd)."""
        dense = self.evaluate_linear_op(self.create_linear_op()).detach()
        expected = torch.stack([dense[..., p * D : (p + 1) * D, p * D : (p + 1) * D] for p in range(M)], dim=-3)
        for budget in (max_block_elements.value(), 1):  # block_budget("block_posterior"): the default; 1 element
            with max_block_elements(budget), torch.no_grad():
                op = self.create_linear_op()
                torch.testing.assert_close(op.point_blocks(), expected, rtol=1e-10, atol=1e-10)
                torch.testing.assert_close(op.to_dense(), dense, rtol=1e-10, atol=1e-10)

    def test_rejects_an_unknown_factor_type(self):
        prior, rows, covar = _parts()
        with self.assertRaisesRegex(ValueError, "factor_type must be one of"):
            _DensePosterior(prior, rows, covar, "qr")


class TestBlockPosteriorLinearOperatorBatch(TestBlockPosteriorLinearOperator):
    seed = 1
    batch = (3,)


class TestBlockPosteriorLinearOperatorRoot(TestBlockPosteriorLinearOperator):
    seed = 2
    factor_type = "root"
