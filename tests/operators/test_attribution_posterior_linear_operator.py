"""linear_operator's standard battery for AttributionPosteriorLinearOperator (posterior gradients of an RBF GP),
in float64: Cholesky factor (unbatched and batched), LOVE-style root, lazily computed rows, and a middle matrix.

The reference is dense and independent of the derived-covariance code: for :math:`k(\\mathbf x, \\mathbf x') =
\\exp(-\\|\\mathbf x - \\mathbf x'\\|^2 / 2)` the gradient covariances are written out by hand,

.. math::

    \\operatorname{Cov}(\\partial_i f(\\mathbf x), f(\\mathbf x')) = -k\\,(x_i - x'_i), \\qquad
    \\operatorname{Cov}(\\partial_i f(\\mathbf x), \\partial_j f(\\mathbf x'))
    = k\\,(\\delta_{ij} - (x_i - x'_i)(x_j - x'_j)),

and :math:`\\boldsymbol\\Sigma = \\mathbf P - \\mathbf B^\\top \\mathbf C^{-1} \\mathbf B` is formed densely.
"""

import unittest

import torch
from gpytorch.kernels import RBFKernel
from linear_operator.test.linear_operator_test_case import LinearOperatorTestCase

from gpytorch_explain.attribution import DerivedCovariance, GradientFunctional
from gpytorch_explain.operators import AttributionPosteriorLinearOperator

N, M, D = 5, 3, 2  # training points, points explained, features: an mD = 6 operator
NOISE = 1.0  # keeps the posterior well conditioned: prior variances 1, posterior ones above 1/2


def _kernel():
    kernel = RBFKernel().double()
    kernel.lengthscale = 1.0
    return kernel


def _cross(x, X):
    """(*batch, m, D, n): -k(x_p, X_j) (x_pi - X_ji)."""
    diff = x.unsqueeze(-2) - X.unsqueeze(-3)  # (m, n, D)
    k = torch.exp(-0.5 * diff.pow(2).sum(-1))
    return (-k.unsqueeze(-1) * diff).transpose(-1, -2)


def _joint(x):
    """(*batch, mD, mD): k (δ_ij - (x_pi - x_qi)(x_pj - x_qj)), row p·D + i."""
    diff = x.unsqueeze(-2) - x.unsqueeze(-3)  # (m, m, D)
    k = torch.exp(-0.5 * diff.pow(2).sum(-1))
    eye = torch.eye(x.size(-1), dtype=x.dtype)
    block = k[..., None, None] * (eye - diff.unsqueeze(-1) * diff.unsqueeze(-2))  # (m, m, D, D)
    m, d = x.shape[-2:]
    return block.transpose(-3, -2).reshape(*x.shape[:-2], m * d, m * d)


def _data(*batch, seed=0):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(*batch, M, D, generator=gen, dtype=torch.float64)
    X = torch.randn(*batch, N, D, generator=gen, dtype=torch.float64)
    covar = torch.exp(-0.5 * torch.cdist(X, X).pow(2)) + NOISE * torch.eye(N, dtype=torch.float64)
    return x, X, covar


class TestAttributionPosteriorLinearOperator(LinearOperatorTestCase, unittest.TestCase):
    seed = 0
    should_test_sample = True
    batch = ()

    def setUp(self):
        # the battery draws its right-hand sides in the default dtype
        self._default_dtype = torch.get_default_dtype()
        torch.set_default_dtype(torch.float64)
        super().setUp()

    def tearDown(self):
        super().tearDown()
        torch.set_default_dtype(self._default_dtype)

    def _factor(self, covar):
        return torch.linalg.cholesky(covar), "cholesky"

    def create_linear_op(self):
        x, X, covar = _data(*self.batch, seed=self.seed)
        factor, factor_type = self._factor(covar)
        rows = _cross(x, X)
        derived = DerivedCovariance(_kernel(), GradientFunctional())
        torch.testing.assert_close(derived.cross(x, X), rows, rtol=1e-12, atol=1e-12)  # the two agree
        return AttributionPosteriorLinearOperator(
            x.requires_grad_(True),
            rows.requires_grad_(True),
            factor.requires_grad_(True),
            factor_type=factor_type,
            derived=derived,
        )

    def _rows(self, linear_op):
        rows = linear_op.rows
        return rows.reshape(*rows.shape[:-3], -1, rows.size(-1)).mT  # B: (n, mD)

    def _reduction(self, linear_op, b):
        v = torch.linalg.solve_triangular(linear_op.factor, b, upper=False)
        return v.mT @ v

    def evaluate_linear_op(self, linear_op):
        return _joint(linear_op.x) - self._reduction(linear_op, self._rows(linear_op))

    def test_point_blocks(self):
        op = self.create_linear_op()
        dense = self.evaluate_linear_op(op).detach()
        expected = torch.stack([dense[..., p * D : (p + 1) * D, p * D : (p + 1) * D] for p in range(M)], dim=-3)
        torch.testing.assert_close(op.point_blocks().detach(), expected, rtol=1e-10, atol=1e-10)


class TestAttributionPosteriorLinearOperatorBatch(TestAttributionPosteriorLinearOperator):
    seed = 1
    batch = (3,)


class TestAttributionPosteriorLinearOperatorRoot(TestAttributionPosteriorLinearOperator):
    """A rank-deficient root R = L⁻ᵀ[:, :4] of C⁻¹ (R Rᵀ below C⁻¹, so the result stays positive definite)."""

    seed = 2

    def _factor(self, covar):
        eye = torch.eye(N, dtype=torch.float64)
        return torch.linalg.solve_triangular(torch.linalg.cholesky(covar), eye, upper=False).mT[..., :4], "root"

    def _reduction(self, linear_op, b):
        v = linear_op.factor.mT @ b
        return v.mT @ v


class TestAttributionPosteriorLinearOperatorMiddle(TestAttributionPosteriorLinearOperator):
    """A variational-style middle matrix: Σ = P - Bᵀ L⁻ᵀ M L⁻¹ B with M = diag(u), 0 < u < 1."""

    seed = 3

    def create_linear_op(self):
        x, X, covar = _data(seed=self.seed)
        middle = torch.diag(torch.linspace(0.3, 0.9, N, dtype=torch.float64))
        return AttributionPosteriorLinearOperator(
            x.requires_grad_(True),
            _cross(x, X).requires_grad_(True),
            torch.linalg.cholesky(covar).requires_grad_(True),
            derived=DerivedCovariance(_kernel(), GradientFunctional()),
            middle=middle,
        )

    def _reduction(self, linear_op, b):
        v = torch.linalg.solve_triangular(linear_op.factor, b, upper=False)
        return v.mT @ linear_op.middle @ v


class TestAttributionPosteriorLinearOperatorLazyRows(TestAttributionPosteriorLinearOperator):
    """Rows computed from the training inputs X (a representation tensor) whenever they are needed."""

    seed = 4

    def create_linear_op(self):
        x, X, covar = _data(seed=self.seed)
        return AttributionPosteriorLinearOperator(
            x.requires_grad_(True),
            X.requires_grad_(True),
            torch.linalg.cholesky(covar).requires_grad_(True),
            derived=DerivedCovariance(_kernel(), GradientFunctional()),
            lazy_rows=True,
        )

    def _rows(self, linear_op):
        rows = _cross(linear_op.x, linear_op.train_inputs)
        return rows.reshape(*rows.shape[:-3], -1, rows.size(-1)).mT
