"""linear_operator's standard battery for LowRankHadamardLinearOperator (square and rectangular)."""

import unittest

import torch
from linear_operator.operators import DenseLinearOperator
from linear_operator.test.linear_operator_test_case import LinearOperatorTestCase, RectangularLinearOperatorTestCase

from gpytorch_explain import LowRankHadamardLinearOperator


def _psd(n, *batch, seed=0):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(*batch, n, 3, generator=gen, dtype=torch.float32)
    dist = (x.unsqueeze(-2) - x.unsqueeze(-3)).pow(2).sum(-1)
    return torch.exp(-0.5 * dist) + 1e-2 * torch.eye(n, dtype=torch.float32)


class TestLowRankHadamardLinearOperator(LinearOperatorTestCase, unittest.TestCase):
    seed = 0
    should_test_sample = True

    def create_linear_op(self):
        K = _psd(5).requires_grad_(True)
        z = torch.randn(5, 2, dtype=torch.float32).requires_grad_(True)
        return LowRankHadamardLinearOperator(DenseLinearOperator(K), z)

    def evaluate_linear_op(self, linear_op):
        return linear_op.base_linear_op.to_dense() * (linear_op.left_factor @ linear_op.right_factor.mT)


class TestLowRankHadamardLinearOperatorBatch(TestLowRankHadamardLinearOperator):
    seed = 1

    def create_linear_op(self):
        K = _psd(5, 3, seed=1).requires_grad_(True)
        z = torch.randn(3, 5, 4, dtype=torch.float32).requires_grad_(True)
        return LowRankHadamardLinearOperator(DenseLinearOperator(K), z)


class TestLowRankHadamardLinearOperatorMultiBatch(TestLowRankHadamardLinearOperator):
    seed = 2
    skip_slq_tests = True

    def create_linear_op(self):
        K = _psd(5, 2, 3, seed=2).requires_grad_(True)
        z = torch.randn(2, 3, 5, 2, dtype=torch.float32).requires_grad_(True)
        return LowRankHadamardLinearOperator(DenseLinearOperator(K), z)


class TestLowRankHadamardLinearOperatorRectangular(RectangularLinearOperatorTestCase, unittest.TestCase):
    seed = 3

    def create_linear_op(self):
        K = torch.randn(5, 4, dtype=torch.float32).requires_grad_(True)
        z1 = torch.randn(5, 3, dtype=torch.float32).requires_grad_(True)
        z2 = torch.randn(4, 3, dtype=torch.float32).requires_grad_(True)
        return LowRankHadamardLinearOperator(DenseLinearOperator(K), z1, z2)

    def evaluate_linear_op(self, linear_op):
        return linear_op.base_linear_op.to_dense() * (linear_op.left_factor @ linear_op.right_factor.mT)


class TestLowRankHadamardLinearOperatorRectangularBatch(TestLowRankHadamardLinearOperatorRectangular):
    seed = 4

    def create_linear_op(self):
        K = torch.randn(2, 5, 4, dtype=torch.float32).requires_grad_(True)
        z1 = torch.randn(2, 5, 3, dtype=torch.float32).requires_grad_(True)
        z2 = torch.randn(2, 4, 3, dtype=torch.float32).requires_grad_(True)
        return LowRankHadamardLinearOperator(DenseLinearOperator(K), z1, z2)
