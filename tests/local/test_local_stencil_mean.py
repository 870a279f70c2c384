"""``gradient_mean`` takes the stencil's finite difference where it and the surrogate's slope contradict each other.

The rule (``LocalGPExplainer._stencil_check``): with the surrogate's slope :math:`m_j \\pm s_j` and the difference
:math:`d_j` with its own error estimate :math:`e_j = \\sqrt{b_j^2 + c\\,\\sigma_n^2/h_j^2}` (forward truncation
:math:`b_j`, the surrogate's noise std :math:`\\sigma_n` carried by the difference of two outputs: :math:`c = 2`
forward, :math:`1/2` central), the mean becomes :math:`d_j` when :math:`|d_j - m_j| > \\max(s_j, e_j)`; the std is
:math:`\\sqrt{s_j^2 + (d_j - m_j)^2 + b_j^2}` either way. Checked here against a direct computation of the rule, and
end to end against the differences recomputed from the returned samples.
"""

import functools
import math
from types import SimpleNamespace

import numpy as np
import torch

from gpytorch_explain.local import LocalGPExplainer as _LocalGPExplainer

LocalGPExplainer = functools.partial(_LocalGPExplainer, relevance_bootstrap=0)


def test_the_rule_against_a_direct_computation():
    rng = np.random.RandomState(0)
    data = rng.randn(100, 3)
    ex = LocalGPExplainer(lambda X: X.sum(1), data, budget=20, stencil=0.1, stencil_kind="central")
    assert ex.stencil == 0.1 and ex.stencil_kind == "central"
    scale = np.array([1.0, 1.0, 0.01])  # box half-widths (user units): h = 0.1 * scale
    h = 0.1 * scale
    d = np.array([1.0, 1.0, 1.0])  # the central differences the rows below give
    y_all = np.zeros(7)
    y_all[1::2], y_all[2::2] = d * h, -d * h  # x + h e_j, x - h e_j
    g_mean = np.array([1.05, 2.0, 2.0])
    g_std = np.array([0.1, 0.1, 0.1])
    noise, ys = 1e-4, 1.0
    model = SimpleNamespace(likelihood=SimpleNamespace(noise=torch.tensor([noise], dtype=torch.float64)))
    messages: list[str] = []
    mean, std = g_mean.copy(), g_std.copy()
    replaced = ex._stencil_check(y_all, scale, mean, std, messages, model, ys)

    own = math.sqrt(0.5) * math.sqrt(noise) * ys / h  # the central difference's error (no truncation term)
    gap = np.abs(d - g_mean)
    expect_replaced = [j for j in range(3) if gap[j] > max(g_std[j], own[j])]
    assert expect_replaced == [1]  # feature 0: inside the std; feature 2: its tiny step makes the difference noisy
    assert replaced == expect_replaced
    np.testing.assert_allclose(mean, np.where(np.isin(np.arange(3), expect_replaced), d, g_mean), rtol=0, atol=0)
    np.testing.assert_allclose(std, np.hypot(g_std, gap), rtol=1e-15)
    assert len(messages) == 1 and "for 2 feature(s)" in messages[0]
    assert "For 1 of them (x1)" in messages[0] and "gradient_from_stencil" in messages[0]


def _tanh_box(case: int, dim: int = 8):
    """A smooth black box with steep tanh features near x (one lengthscale per feature misreads some of them)."""
    rs = np.random.RandomState(100 + case)
    X = rs.randn(300, dim)
    x = X[0]
    a = rs.uniform(-1, 1, dim)
    b = rs.uniform(-1.5, 1.5, dim) * (rs.rand(dim) < 0.5)
    k = rs.uniform(1, 6, dim)
    c = x + rs.uniform(-1, 1, dim)

    def f(Z):
        return Z @ a + (b * np.tanh(k * (Z - c))).sum(1)

    return f, X, x, a + b * k / np.cosh(k * (x - c)) ** 2


def test_gradient_from_stencil_is_the_forward_difference_of_the_returned_samples():
    f, X, x, truth = _tanh_box(3)
    ex = LocalGPExplainer(f, X, budget=16, seed=3, stencil_completion=0)  # completed: test_local_stencil_completion
    res = ex.explain(x)
    assert ex.stencil_kind == "forward"
    D = X.shape[1]
    h = ex.stencil * ex.interval * X.std(0)
    np.testing.assert_allclose(res.x_samples[1 : 1 + D], x + np.diag(h), rtol=0, atol=1e-12)
    d = (res.y_samples[1 : 1 + D] - res.y_samples[0]) / h
    fs = res.gradient_from_stencil
    assert fs.dtype == bool and fs.shape == (D,) and fs.any()
    np.testing.assert_allclose(res.gradient_mean[fs], d[fs], rtol=1e-12)
    assert np.all(np.abs(d - res.gradient_mean) <= res.gradient_std * (1 + 1e-12))  # the interval reaches it
    assert np.all(np.abs(res.gradient_mean - truth)[fs] < 2 * res.gradient_std[fs])
    assert any("gradient_from_stencil" in w for w in res.warnings)
    frame = res.to_frame()
    assert frame["gradient_from_stencil"].tolist() == fs.tolist()


def test_without_a_stencil_nothing_comes_from_it():
    f, X, x, _ = _tanh_box(3)
    res = LocalGPExplainer(f, X, budget=16, seed=3, stencil=None).explain(x)
    assert res.gradient_from_stencil.dtype == bool and not res.gradient_from_stencil.any()


def test_the_gradient_std_is_at_least_the_slope_the_samples_resolve():
    # a surrogate that calls everything noise can have its prior slope variance collapse to 0 and report 0 ± 0
    # (GradientBoosting on diabetes, LOO R² 0); the std is floored at the least-squares slope's std along each
    # continuous feature, sigma_n (A^T A)^-1_11 with A = [1, u_j], here computed by a dense solve
    rng = np.random.RandomState(0)
    data = rng.randn(50, 3)
    ex = LocalGPExplainer(lambda X: X.sum(1), data, budget=20, categorical_features=[2])
    U = rng.uniform(-1, 1, size=(20, 3))
    noise_var, ys, scale = 0.3, 2.5, np.array([0.5, 4.0, 1.0])
    model = SimpleNamespace(
        train_inputs=(torch.as_tensor(U),),
        likelihood=SimpleNamespace(noise=torch.tensor([noise_var], dtype=torch.float64)),
    )
    floor = ex._resolution_floor(model, ys, scale)
    for p in range(2):
        A = np.c_[np.ones(20), U[:, p]]
        slope_var = noise_var * ys**2 * np.linalg.inv(A.T @ A)[1, 1]
        np.testing.assert_allclose(floor[p], np.sqrt(slope_var) / scale[p], rtol=1e-12)
    assert floor[2] == 0.0  # categorical
