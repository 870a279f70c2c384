"""The one Gauss–Legendre / chunking helper module of attribution/ (``attribution/_quadrature.py``): rules exact
for polynomials to degree 2n-1 (against exact integrals), dtype/device kept, chunks that cover the range in order
within their element budget, and the budget read at call time."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import gpytorch_explain
import gpytorch_explain.attribution._quadrature as Q
from gpytorch_explain.attribution._rbf_moments import _chunks as rbf_chunks


@pytest.mark.parametrize("order", [1, 2, 5, 16, 32])
def test_gauss_legendre_is_exact_to_degree_2n_minus_1(order):
    t, w = Q.gauss_legendre(order, torch.zeros((), dtype=torch.float64))
    assert t.dtype == w.dtype == torch.float64 and t.shape == w.shape == (order,)
    assert ((t > 0) & (t < 1)).all()
    for k in range(2 * order):
        assert float((w * t**k).sum()) == pytest.approx(1.0 / (k + 1), rel=1e-13, abs=1e-15)
    if 1 < order <= 5:  # degree 2n is not integrated exactly (visible above round-off for small n)
        assert abs(float((w * t ** (2 * order)).sum()) - 1.0 / (2 * order + 1)) > 1e-15


def test_gauss_legendre_matches_numpy_and_follows_like():
    nodes, weights = np.polynomial.legendre.leggauss(7)
    t_np, w_np = Q.gauss_legendre_np(7)
    np.testing.assert_allclose(t_np, (nodes + 1) / 2, rtol=0, atol=0)
    np.testing.assert_allclose(w_np, weights / 2, rtol=0, atol=0)
    t, w = Q.gauss_legendre(7, torch.zeros(3, dtype=torch.float32))
    assert t.dtype == torch.float32 and w.dtype == torch.float32
    assert math.isclose(float(w.sum()), 1.0, rel_tol=1e-6)


CASES = [(0, 3, 10), (1, 3, 10), (10, 3, 10), (10, 100, 10), (7, 0, 7)]


@pytest.mark.parametrize(("total", "per_item", "budget"), CASES)
def test_chunk_slices_cover_the_range_in_budget(total, per_item, budget):
    chunks = Q.chunk_slices(total, per_item, budget)
    covered = [i for s in chunks for i in range(s.start, s.stop)]
    assert covered == list(range(total))
    step = max(1, budget // max(1, per_item))
    assert all(0 < s.stop - s.start <= step for s in chunks)


def test_rbf_chunks_keep_one_empty_slice_for_no_rows():
    assert rbf_chunks(0, 5) == [slice(0, 0)]
    assert rbf_chunks(3, 1) == [slice(0, 3)]


def test_point_chunks_read_the_budget_when_called():
    x = torch.zeros(2, 5, 3)  # batch 2, m = 5, D = 3
    X = torch.zeros(4, 3)  # n = 4: 2 * 3 * 4 = 24 elements per point
    assert Q.point_chunks(x, X) == [slice(0, 5)]
    with gpytorch_explain.settings.max_block_elements(48):
        assert Q.point_chunks(x, X) == [slice(0, 2), slice(2, 4), slice(4, 5)]
        assert Q.point_chunks(x, X, batch_shape=(3, 1)) == [slice(i, i + 1) for i in range(5)]  # 6 * 12 = 72 > 48


def test_numel():
    assert Q.numel(()) == 1 and Q.numel((2, 3)) == 6 and Q.numel(torch.Size([4])) == 4
