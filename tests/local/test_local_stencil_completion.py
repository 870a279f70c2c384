"""The forward stencil completed to central differences (``LocalGPExplainer(stencil_completion=...)``).

Once only ``floor(stencil_completion * free)`` calls are left (``free``: the calls after ``x``, the forward stencil and
the Sobol points; only when ``free`` is at least half the stenciled features; 0.5 by default), the explainer calls
the black box at :math:`\\mathbf x - h_j\\mathbf e_j` for every stenciled feature when the calls suffice, else for
the features whose forward difference it trusts least, and reads the central difference
:math:`(f(\\mathbf x + h_j\\mathbf e_j) - f(\\mathbf x - h_j\\mathbf e_j)) / 2h_j` there: truncation
:math:`O(h_j^2 f''')` instead of :math:`O(h_j f'')`. Checked against differences recomputed from the returned samples
and against the true gradient of smooth black boxes with steep features.
"""

import functools
import math
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from gpytorch_explain.local import LocalGPExplainer as _LocalGPExplainer

# relevance-only options (the gradient, IG and samples do not depend on them)
LocalGPExplainer = functools.partial(_LocalGPExplainer, relevance_bootstrap=0, relevance_prior="lognormal")


def _steep_box(dim: int = 8, seed: int = 0):
    """A linear black box plus one steep tanh along x0 just beyond x: f'' is large at x along x0 only."""
    rs = np.random.RandomState(seed)
    X = rs.randn(300, dim)
    x = X[0]
    a = rs.uniform(-1, 1, dim)

    def f(Z):
        return Z @ a + 2.0 * np.tanh(4.0 * (Z[:, 0] - x[0] - 0.3))

    truth = a.copy()
    truth[0] += 8.0 / np.cosh(4.0 * 0.3) ** 2
    return f, X, x, truth


def test_the_number_of_completion_calls():
    f, X, x, _ = _steep_box()
    for share, expect in ((0.0, 0), (0.5, 11), (1.0, 22), (0.3, 6)):
        ex = LocalGPExplainer(f, X, budget=38, stencil_kind="forward", stencil_completion=share)
        assert ex.n_initial == 7  # free = 38 - (x + 8 forward rows + 7 Sobol points) = 22
        assert ex._completion_calls == math.floor(share * 22) == expect
    # fewer acquisition calls than half the stenciled features: none (x + 8 rows + 3 Sobol points, 3 calls left)
    ex = LocalGPExplainer(f, X, budget=15, stencil_kind="forward", stencil_completion=1.0)
    assert ex.n_initial == 3 and ex._completion_calls == 0
    assert LocalGPExplainer(f, X, budget=16, stencil_kind="forward", stencil_completion=1.0)._completion_calls == 4
    # 0.5 by default
    assert LocalGPExplainer(f, X, budget=38, stencil_kind="forward")._completion_calls == 11
    # the central stencil and no stencil: nothing to complete
    assert LocalGPExplainer(f, X, budget=40, stencil_kind="central")._completion_calls == 0
    assert LocalGPExplainer(f, X, budget=40, stencil=None)._completion_calls == 0
    for bad in (-0.1, 1.5, float("nan")):
        with pytest.raises(ValueError, match="stencil_completion"):
            LocalGPExplainer(f, X, budget=40, stencil_completion=bad)


def test_a_completed_feature_reads_the_central_difference():
    rng = np.random.RandomState(0)
    data = rng.randn(100, 3)
    ex = LocalGPExplainer(lambda X: X.sum(1), data, budget=30, stencil=0.1, stencil_kind="forward")
    scale = np.array([1.0, 2.0, 0.5])
    h = 0.1 * scale
    y_all = np.array([0.0, 0.3, 0.5, 0.2, 9.0, -0.1])  # x, x + h e_0..2, (a Sobol row), x - h e_1
    ex._backward = {1: 5}
    model = SimpleNamespace(likelihood=SimpleNamespace(noise=torch.tensor([1e-4], dtype=torch.float64)))
    cont, hh, d, b, c, a = ex._stencil_terms(y_all, scale, np.zeros(3), None, 1.0)
    np.testing.assert_allclose(hh, h)
    np.testing.assert_allclose(d, [0.3 / h[0], (0.5 - (-0.1)) / (2 * h[1]), 0.2 / h[2]], rtol=1e-15)
    np.testing.assert_array_equal(c, [2.0, 0.5, 2.0])
    # the completed feature's error bound: half the spread of its one-sided differences, (0.5 - 0) / h and
    # (0 - (-0.1)) / h; the forward ones have no truncation estimate without a model
    spread = 0.5 * abs(0.5 / h[1] - 0.1 / h[1])
    np.testing.assert_allclose(a, [0.0, spread, 0.0], rtol=1e-15)
    np.testing.assert_array_equal(b, 0.0)
    # with a model the forward features get a truncation estimate; the completed one none, and keeps its bound
    model.posterior = None  # not needed by the terms below: only _forward_bias reads the model
    ex._forward_bias = lambda *args: np.array([0.7, 0.7, 0.7])
    _, _, _, b, _, a = ex._stencil_terms(y_all, scale, np.zeros(3), model, 1.0)
    np.testing.assert_array_equal(b, [0.7, 0.0, 0.7])
    np.testing.assert_allclose(a, [0.0, spread, 0.0], rtol=1e-15)


def test_completion_spends_calls_at_x_minus_h_and_reports_the_central_difference():
    f, X, x, truth = _steep_box()
    ex = LocalGPExplainer(f, X, budget=38, seed=0, stencil_kind="forward", stencil_completion=0.5)
    res = ex.explain(x)
    D = X.shape[1]
    assert res.x_samples.shape == (38, D)  # the budget is exact
    h = ex.stencil * ex.interval * X.std(0)
    back = ex._backward
    assert ex._completion_calls == 11 and list(back) == list(range(D))  # 11 calls suffice: every feature, in order
    assert sorted(back.values()) == list(range(back[0], back[0] + D))  # one batch
    for j, row in back.items():
        expect = x.copy()
        expect[j] -= h[j]
        np.testing.assert_allclose(res.x_samples[row], expect, rtol=0, atol=1e-12)
    central = (res.y_samples[1] - res.y_samples[back[0]]) / (2 * h[0])
    forward = (res.y_samples[1] - res.y_samples[0]) / h[0]
    assert abs(central - truth[0]) < 0.2 * abs(forward - truth[0])  # O(h^2) against O(h)
    # the reported slope: the surrogate's within its widened std of the central difference, or the difference itself
    assert abs(res.gradient_mean[0] - central) <= res.gradient_std[0] * (1 + 1e-12)
    if res.gradient_from_stencil[0]:
        assert res.gradient_mean[0] == pytest.approx(central, rel=1e-12)
    z = np.abs(res.gradient_mean - truth) / res.gradient_std
    assert np.all(z < 2.0), z
    assert any(w.startswith("stencil completion") and "x0" in w for w in res.warnings)
    # without completion: no row at x - h e_0, and the steep feature's interval is wider
    off = LocalGPExplainer(f, X, budget=38, seed=0, stencil_kind="forward", stencil_completion=0).explain(x)
    assert not any(w.startswith("stencil completion") for w in off.warnings)
    assert not np.any(np.all(np.isclose(off.x_samples, x - h[0] * np.eye(D)[0], rtol=0, atol=1e-12), axis=1))
    assert res.gradient_std[0] < off.gradient_std[0]


def test_completion_is_deterministic_under_a_seed():
    f, X, x, _ = _steep_box(dim=6, seed=1)
    kw = dict(budget=24, seed=5, stencil_kind="forward", stencil_completion=0.5)
    a, b = LocalGPExplainer(f, X, **kw).explain(x), LocalGPExplainer(f, X, **kw).explain(x)
    np.testing.assert_array_equal(a.x_samples, b.x_samples)
    np.testing.assert_array_equal(a.gradient_mean, b.gradient_mean)
    np.testing.assert_array_equal(a.gradient_std, b.gradient_std)


def test_with_fewer_calls_than_features_the_most_doubtful_are_completed():
    f, X, x, truth = _steep_box()
    ex = LocalGPExplainer(f, X, budget=30, seed=0, stencil_kind="forward")
    res = ex.explain(x)
    assert ex._completion_calls == 7 and res.x_samples.shape == (30, 8)  # 15 acquisition calls, 7 kept
    assert 0 in ex._backward and len(ex._backward) <= 7  # the steep feature is among them
    h = ex.stencil * ex.interval * X.std(0)
    central = (res.y_samples[1] - res.y_samples[ex._backward[0]]) / (2 * h[0])
    forward = (res.y_samples[1] - res.y_samples[0]) / h[0]
    assert abs(central - truth[0]) < 0.2 * abs(forward - truth[0])
    # the central difference's own truncation (third derivative) is not in the std: the steep feature sits near 2
    z = np.abs(res.gradient_mean - truth) / res.gradient_std
    assert np.mean(z < 2.0) >= 0.8 and z.max() < 3.0, z
