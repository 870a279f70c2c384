"""linear_operator's standard battery for InducingWeightPosteriorLinearOperator, in float64.

The reference is formed densely and independently of the operator's column blocks: the interleaved
:math:`\\mathbf E = \\mathbf I_d \\otimes \\boldsymbol\\Phi_*^\\top` is built as a Kronecker product with its columns
permuted from feature-major to point-major order, :math:`\\mathbf H = \\mathbf L^{-1}\\mathbf E` by a triangular
solve, and :math:`\\boldsymbol\\Sigma = \\mathbf P\\otimes\\mathbf I_d + \\mathbf H^\\top\\mathbf H`.
"""

import unittest

import torch
from linear_operator.operators import DenseLinearOperator
from linear_operator.test.linear_operator_test_case import LinearOperatorTestCase

from gpytorch_explain.operators import InducingWeightPosteriorLinearOperator
from gpytorch_explain.settings import max_block_elements

M_POINTS, M_IND, D = 3, 2, 2  # m test points, M inducing features, d explanation features: an md = 6 operator


def _parts(*batch, seed=0, m=M_POINTS, m_ind=M_IND, d=D):
    """P (diagonal 1, eigenvalues >= 1/2), Φ* (small, so that the Hᵀ H term stays below 1) and L of I + A."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(*batch, m, 2, generator=gen, dtype=torch.float64)
    prior = 0.5 * torch.exp(-0.5 * torch.cdist(x, x).pow(2)) + 0.5 * torch.eye(m, dtype=torch.float64)
    phi = 0.4 * torch.randn(*batch, m, m_ind, generator=gen, dtype=torch.float64)
    a = torch.randn(*batch, d * m_ind, d * m_ind, generator=gen, dtype=torch.float64)
    capacitance = torch.eye(d * m_ind, dtype=torch.float64) + a @ a.mT / (d * m_ind)
    return prior, phi, torch.linalg.cholesky(capacitance)


def _dense(prior, phi, chol, d):
    m, m_ind = phi.shape[-2:]
    e = torch.kron(torch.eye(d, dtype=phi.dtype), phi.mT.contiguous())  # (dM, d·m), column l·m + p
    order = torch.arange(d * m).view(d, m).mT.reshape(-1)  # point-major column p·d + l <- l·m + p
    e = e[..., order]
    h = torch.linalg.solve_triangular(chol, e, upper=False)
    return torch.kron(prior, torch.eye(d, dtype=prior.dtype)) + h.mT @ h


class TestInducingWeightPosteriorLinearOperator(LinearOperatorTestCase, unittest.TestCase):
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
        prior, phi, chol = _parts(seed=self.seed)
        return InducingWeightPosteriorLinearOperator(
            DenseLinearOperator(prior.requires_grad_(True)), phi.requires_grad_(True), chol.requires_grad_(True), D
        )

    def evaluate_linear_op(self, linear_op):
        return _dense(linear_op.prior_covar.to_dense(), linear_op.test_features, linear_op.capacitance_cholesky, D)

    def test_point_blocks_on_both_routes(self):
        """The per-point blocks by column blocks of L⁻¹ (many points) and by triangular solves (few), in chunks."""
        op = self.create_linear_op()
        dense = self.evaluate_linear_op(op).detach()
        m = dense.size(-1) // D
        expected = torch.stack([dense[..., p * D : (p + 1) * D, p * D : (p + 1) * D] for p in range(m)], dim=-3)
        for solve_route in (False, True):
            # block_budget("inducing_weight_posterior") is half the setting: the default (one chunk), and one point
            # per chunk
            for budget in (max_block_elements.value(), 2 * D * D * M_IND):
                fresh = self.create_linear_op()
                with (
                    max_block_elements(budget),
                    unittest.mock.patch.object(
                        InducingWeightPosteriorLinearOperator, "_solve_route", lambda self, r=solve_route: r
                    ),
                ):
                    torch.testing.assert_close(fresh.point_blocks().detach(), expected, rtol=1e-12, atol=1e-12)
                    torch.testing.assert_close(fresh.to_dense().detach(), dense, rtol=1e-12, atol=1e-12)

    def test_rejects_inconsistent_shapes(self):
        prior, phi, chol = _parts()
        with self.assertRaisesRegex(ValueError, "Inconsistent shapes"):
            InducingWeightPosteriorLinearOperator(prior, phi, chol, D + 1)


class TestInducingWeightPosteriorLinearOperatorBatch(TestInducingWeightPosteriorLinearOperator):
    seed = 1

    def create_linear_op(self):
        prior, phi, chol = _parts(3, seed=self.seed)
        return InducingWeightPosteriorLinearOperator(
            DenseLinearOperator(prior.requires_grad_(True)), phi.requires_grad_(True), chol.requires_grad_(True), D
        )


def test_batch_indexing_and_transpose_with_shared_test_features():
    # a batched capacitance factor with one Φ* (m, M) and one P: the size came from Φ* alone and op[b] indexed the
    # unbatched arguments; the Kronecker product rejected the expanded (non-contiguous) prior
    prior, phi, _ = _parts(seed=6)
    _, _, chol = _parts(2, seed=7)
    op = InducingWeightPosteriorLinearOperator(prior, phi, chol, D)
    assert op.shape == (2, M_POINTS * D, M_POINTS * D)
    for b in range(2):
        ref = _dense(prior, phi, chol[b], D)
        assert torch.allclose(op[b].to_dense(), ref, atol=1e-12)
        assert torch.allclose(op.to_dense()[b], ref, atol=1e-12)
        assert torch.allclose(op.mT.to_dense()[b], ref.mT, atol=1e-12)


def test_capacitance_factor_shared_by_a_batch(monkeypatch):
    # batched P and Φ* with one capacitance factor: it is inverted and solved once for the batch (a 2-D factor in
    # every triangular solve, as torch would copy a broadcast factor per member), with the dense results per member
    prior, phi, _ = _parts(3, seed=8)
    _, _, chol = _parts(seed=9)
    seen = []
    solve = torch.linalg.solve_triangular

    def spy(a, b, **kwargs):
        seen.append(a.dim())
        return solve(a, b, **kwargs)

    monkeypatch.setattr(torch.linalg, "solve_triangular", spy)
    rhs = torch.randn(3, M_POINTS * D, 2, generator=torch.Generator().manual_seed(10), dtype=torch.float64)
    for elements in (10**6, 4):  # one block; a point at a time
        with max_block_elements(elements):
            op = InducingWeightPosteriorLinearOperator(prior, phi, chol, D)
            refs = torch.stack([_dense(prior[b], phi[b], chol, D) for b in range(3)])
            seen_before = len(seen)
            assert torch.allclose(op.to_dense(), refs, atol=1e-12)
            assert torch.allclose(op.diagonal(), refs.diagonal(dim1=-2, dim2=-1), atol=1e-12)
            assert torch.allclose(op @ rhs, refs @ rhs, atol=1e-12)
            assert torch.allclose(op[2].to_dense(), refs[2], atol=1e-12)
            assert len(seen) > seen_before
    # the reference's own solves are the 2-D ones above too; the operator's must be as well
    assert set(seen) == {2}
