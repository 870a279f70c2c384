"""linear_operator's standard battery for FeatureScaledLinearOperator, in float64, unbatched and batched.

The reference is the dense :math:`(\\mathbf I_m\\otimes\\mathbf S)\\boldsymbol\\Sigma(\\mathbf I_m\\otimes\\mathbf S)`
formed with an explicit diagonal matrix.
"""

import unittest

import torch
from linear_operator.operators import DenseLinearOperator
from linear_operator.test.linear_operator_test_case import LinearOperatorTestCase

from gpytorch_explain.operators import FeatureScaledLinearOperator


def _psd(n, *batch, seed=0):
    """An RBF Gram matrix plus the identity: diagonal 2, eigenvalues in [1, n + 1]. (With half of it plus half the
    identity, log-determinant near 0, the battery's stochastic log-determinant missed its absolute tolerance 0.03.)"""
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(*batch, n, 3, generator=gen, dtype=torch.float64)
    return torch.exp(-0.5 * torch.cdist(x, x).pow(2)) + torch.eye(n, dtype=torch.float64)


class TestFeatureScaledLinearOperator(LinearOperatorTestCase, unittest.TestCase):
    seed = 0
    should_test_sample = True

    def setUp(self):
        # the battery draws its right-hand sides in the default dtype
        self._default_dtype = torch.get_default_dtype()
        torch.set_default_dtype(torch.float64)
        super().setUp()

    def tearDown(self):
        super().tearDown()
        torch.set_default_dtype(self._default_dtype)

    def create_linear_op(self):
        base = _psd(6, seed=self.seed).requires_grad_(True)  # m = 3 points, d = 2 features
        scale = torch.tensor([0.8, 1.25], dtype=torch.float64, requires_grad=True)
        return FeatureScaledLinearOperator(DenseLinearOperator(base), scale)

    def evaluate_linear_op(self, linear_op):
        c = linear_op.scale  # (*batch, d)
        m = linear_op.size(-1) // c.size(-1)
        s = torch.diag_embed(torch.cat([c] * m, dim=-1))
        return s @ linear_op.base.to_dense() @ s

    def test_point_blocks(self):
        op = self.create_linear_op()
        dense = self.evaluate_linear_op(op).detach()
        d = op.scale.size(-1)
        m = dense.size(-1) // d
        expected = torch.stack([dense[..., p * d : (p + 1) * d, p * d : (p + 1) * d] for p in range(m)], dim=-3)
        torch.testing.assert_close(op.point_blocks().detach(), expected, rtol=1e-12, atol=1e-12)

    def test_rejects_a_scale_that_does_not_divide_the_size(self):
        with self.assertRaisesRegex(ValueError, "not a multiple of d = 4"):
            FeatureScaledLinearOperator(DenseLinearOperator(_psd(6)), torch.ones(4, dtype=torch.float64))


class TestFeatureScaledLinearOperatorBatch(TestFeatureScaledLinearOperator):
    seed = 1

    def create_linear_op(self):
        base = _psd(6, 3, seed=self.seed).requires_grad_(True)
        scale = torch.tensor([0.8, 1.25], dtype=torch.float64, requires_grad=True)
        return FeatureScaledLinearOperator(DenseLinearOperator(base), scale)


class TestFeatureScaledLinearOperatorMultiBatch(TestFeatureScaledLinearOperator):
    seed = 2
    skip_slq_tests = True  # as linear_operator's own multi-batch cases

    def create_linear_op(self):
        base = _psd(6, 2, 3, seed=self.seed).requires_grad_(True)
        scale = torch.tensor([0.9, 1.1, 1.2], dtype=torch.float64, requires_grad=True)
        return FeatureScaledLinearOperator(DenseLinearOperator(base), scale)
