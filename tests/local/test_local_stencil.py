"""``LocalGPExplainer(stencil=δ)``: the central-difference stencil in the first call, its budget, and what it fixes.

The calibration case is an interaction that oscillates inside the box (f = x·a + 0.1 sin(x₀x₁) with x₀x₁ sweeping
about ±9 rad): without the stencil the slope of x₀ is reported tens of stds off; with the stencil and an
interpolating attribution surrogate (``attribution_noise=1e-6``, or the default learned noise, whose prior lets it
fall to 1e-6) every slope is within two stds of the analytic one. ``stencil="auto"`` (the default) uses δ = 0.1
when the stencil takes at most half of the budget.
"""

import functools

import numpy as np
import pytest

from gpytorch_explain.local import LocalGPExplainer as _LocalGPExplainer
from tests.helpers import NO_RELEVANCE

# these tests read the gradient, IG and samples, which the relevance options do not change (tests/helpers.py);
# leaving the SAAS refit and the bootstrap refits out saves their time
LocalGPExplainer = functools.partial(_LocalGPExplainer, **NO_RELEVANCE)

A = np.array([1.0, -2.0, 0.0, 0.5, 0.0, 3.0])


def _f(X):
    return X @ A + 0.1 * np.sin(X[:, 0] * X[:, 1])


def _true_gradient(x):
    return A + 0.1 * np.cos(x[0] * x[1]) * np.array([x[1], x[0], 0, 0, 0, 0])


def _data():
    return np.random.default_rng(3).normal(size=(300, 6)) * np.array([1, 2, 5, 0.5, 0.01, 1])


def test_stencil_rows_follow_x_and_the_budget_is_exact():
    rng = np.random.RandomState(0)
    data = rng.randn(200, 4) * np.array([1.0, 3.0, 1.0, 1.0])
    data[:, 2] = rng.choice([0.0, 1.0, 5.0], size=200)  # categorical: not stenciled
    data[:, 3] = 7.0  # zero variance: never perturbed
    calls = []

    def f(X):
        calls.append(len(X))
        return X[:, 0] - 2 * X[:, 1] + X[:, 2]

    ex = LocalGPExplainer(f, data, budget=16, seed=1, stencil=0.25, interval=2.0, categorical_features=[2])
    x = data[5]
    res = ex.explain(x)
    assert sum(calls) == 16 and res.x_samples.shape == (16, 4)
    sigma = data.std(0)
    expected = []
    for j in (0, 1):  # the continuous perturbed features, in order, + then -
        for sign in (1.0, -1.0):
            row = x.copy()
            row[j] += sign * 0.25 * 2.0 * sigma[j]
            expected.append(row)
    np.testing.assert_allclose(res.x_samples[1:5], np.array(expected), rtol=0, atol=1e-12)
    np.testing.assert_array_equal(res.x_samples[:, 3], 7.0)


def test_stencil_budget_and_width_are_checked():
    data = np.random.RandomState(0).randn(50, 3)
    f = lambda X: X.sum(1)  # noqa: E731
    ex = LocalGPExplainer(f, data, budget=10, n_initial=2, stencil=0.1)  # x + 6 stencil + 2 Sobol + 1 BO step = 10
    assert ex.stencil_kind == "central"
    with pytest.raises(ValueError, match="initial design with a stencil: x \\+ 6 central"):
        LocalGPExplainer(f, data, budget=9, n_initial=2, stencil=0.1, stencil_kind="central")
    assert LocalGPExplainer(f, data, budget=9, n_initial=2, stencil=0.1).stencil_kind == "forward"  # 3 rows fit
    with pytest.raises(ValueError, match="initial design with a stencil: x \\+ 3 forward"):
        LocalGPExplainer(f, data, budget=6, n_initial=2, stencil=0.1)
    for bad in (0.0, -0.1, 1.5, float("nan")):
        with pytest.raises(ValueError, match="stencil must be"):
            LocalGPExplainer(f, data, stencil=bad)


def test_stencil_with_an_interpolating_surrogate_covers_an_oscillating_interaction():
    data = _data()
    x = data[0]
    truth = _true_gradient(x)
    misses = 0
    for seed in (2, 3):  # whether the plain surrogate misses depends on its BO path: 16-20 stds at seeds 2-5
        kw = dict(budget=50, seed=seed, acquisition="variance", attribution_noise=1e-6)
        plain = LocalGPExplainer(_f, data, stencil=None, **kw).explain(x)
        misses += bool((np.abs(plain.gradient_mean - truth) / plain.gradient_std)[0] > 5)  # the miss it is for
        res = LocalGPExplainer(_f, data, stencil=0.1, **kw).explain(x)
        z = np.abs(res.gradient_mean - truth) / res.gradient_std
        assert np.all(z < 2.0), (seed, z)
    assert misses >= 1


def test_the_defaults_cover_the_oscillating_interaction():
    # stencil="auto" (on: 12 stencil rows <= 50 / 2) and the learned noise under its broad prior (the relevance
    # options of NO_RELEVANCE do not change the gradient and samples read here)
    data = _data()
    x = data[0]
    truth = _true_gradient(x)
    res = LocalGPExplainer(_f, data, budget=50, seed=0).explain(x)
    z = np.abs(res.gradient_mean - truth) / res.gradient_std
    assert np.all(z < 2.0), z
    off = LocalGPExplainer(_f, data, budget=50, seed=0, stencil=None).explain(x)
    assert not np.allclose(off.x_samples[1:13], res.x_samples[1:13])


def test_auto_stencil_is_central_within_half_of_the_budget_else_forward_within_two_thirds():
    rng = np.random.RandomState(0)

    def rows(D, budget):
        data = rng.randn(100, D)
        res = LocalGPExplainer(lambda X: X.sum(1), data, budget=budget, seed=0, raw_samples=8).explain(data[0])
        dx = res.x_samples[1 : 1 + 2 * D] - data[0]
        expected = np.zeros((2 * D, D))
        for j in range(D):
            expected[2 * j, j], expected[2 * j + 1, j] = 0.1 * data[:, j].std(), -0.1 * data[:, j].std()
        return np.allclose(dx, expected, rtol=0, atol=1e-12)

    assert rows(3, 12)  # 6 stencil rows <= 12 / 2 (and 1 + 6 + 2 Sobol rows leave 3 calls to BO)
    assert not rows(3, 11)  # 6 > 11 / 2: the forward stencil instead

    def design(D, budget):
        ex = LocalGPExplainer(lambda X: X.sum(1), rng.randn(50, D), budget=budget)
        return ex.stencil, ex.stencil_kind

    assert design(12, 50) == (0.1, "central")  # 24 <= 25
    assert design(13, 50) == (0.1, "forward")  # 26 > 25; 13 <= 50 * 2 / 3
    assert design(13, 52) == (0.1, "central")
    assert design(33, 50) == (0.1, "forward")  # 33 <= 33.3, and 1 + 33 + 10 Sobol rows leave 6 calls to BO
    assert design(34, 50)[0] is None  # 34 > 33.3
    # either must leave at least 1 call to BO: 5 features, budget 12: 1 + 10 + 2 Sobol rows > 12 - 1 (central),
    # 1 + 5 + 2 = 8 <= 11 (forward: on); budget 8: 1 + 5 + 2 > 7, but the default's Sobol points go down to 1 for
    # the stencil (1 + 5 + 1 = 7); budget 7: 5 rows > 7 * 2 / 3 (off)
    assert design(5, 12) == (0.1, "forward")
    assert design(5, 8) == (0.1, "forward")
    assert design(5, 7)[0] is None
    assert LocalGPExplainer(lambda X: X.sum(1), rng.randn(50, 3), budget=50, stencil_kind="forward").stencil_kind == (
        "forward"
    )
    assert design(3, 50) == (0.1, "central")
    with pytest.raises(ValueError, match="stencil_kind must be"):
        LocalGPExplainer(lambda X: X.sum(1), rng.randn(50, 3), stencil_kind="backward")
    with pytest.raises(ValueError, match="stencil must be"):
        LocalGPExplainer(lambda X: X.sum(1), rng.randn(50, 3), stencil="on")


def test_stencil_check_widens_a_confident_slope_to_reach_the_central_difference():
    # a cubic remainder (0.3 % of the output's std in the box) that the trend surrogate calls noise: its slope at x is
    # the box's average, 1.257 against 1.300, with a std of ~0.001 (39 stds off before the check)
    rng = np.random.RandomState(1)
    data = rng.randn(300, 5) * np.array([1, 10, 0.1, 1, 1])
    data[:, 3] = 2.0
    data[:, 4] = rng.choice([0.0, 1.0, 2.0], size=300)
    a = np.array([1.0, 0.1, 10.0, 5.0, 0.7])

    def f(X):
        return X @ a + 0.3 * np.sin(X[:, 0])

    x = data[7]
    res = LocalGPExplainer(f, data, budget=50, seed=5, categorical_features=[4], raw_samples=16).explain(x)
    assert res.x_samples.shape == (50, 5)
    truth = np.array([1 + 0.3 * np.cos(x[0]), 0.1, 10.0])
    z = np.abs(res.gradient_mean[:3] - truth) / res.gradient_std[:3]
    assert np.all(z < 2.0), z
    assert any(w.startswith("stencil check") and "x0" in w for w in res.warnings), res.warnings
    # the interval reaches the central difference of the stencil rows (x ± 0.1 σ₀ e₀ are rows 1 and 2)
    h = 0.1 * data[:, 0].std()
    d = (res.y_samples[1] - res.y_samples[2]) / (2 * h)
    assert abs(d - res.gradient_mean[0]) <= res.gradient_std[0] + 1e-12
    assert abs(d - truth[0]) < 1e-3  # the direct reading is right to O(h²)


def test_stencil_check_leaves_a_linear_black_box_alone():
    data = np.random.RandomState(2).randn(200, 4)
    a = np.array([1.0, -2.0, 0.5, 0.0])
    res = LocalGPExplainer(lambda X: X @ a, data, budget=40, seed=0, raw_samples=16).explain(data[0])
    assert res.x_samples.shape == (40, 4) and not any(w.startswith("stencil check") for w in res.warnings)
    np.testing.assert_allclose(res.gradient_mean, a, atol=5e-3)
    assert np.all(res.gradient_std < 0.05)


def test_forward_stencil_rows_follow_x_and_its_check_uses_the_forward_difference():
    rng = np.random.RandomState(4)
    data = rng.randn(200, 3) * np.array([1.0, 2.0, 0.5])
    a = np.array([1.0, -0.5, 2.0])

    def f(X):
        return X @ a + 0.4 * np.sin(2 * X[:, 0])  # curvature along x0 the trend surrogate may call noise

    x = data[3]
    # the forward differences alone (completed to central ones: test_local_stencil_completion.py)
    kw = dict(stencil=0.2, stencil_kind="forward", raw_samples=8, stencil_completion=0)
    res = LocalGPExplainer(f, data, budget=20, seed=0, **kw).explain(x)
    assert res.x_samples.shape == (20, 3)
    sigma = data.std(0)
    expected = x + np.diag(0.2 * sigma)  # interval 1: x + δ σ_j e_j, in feature order
    np.testing.assert_allclose(res.x_samples[1:4], expected, rtol=0, atol=1e-12)
    d = (res.y_samples[1:4] - res.y_samples[0]) / (0.2 * sigma)
    assert np.all(np.abs(d - res.gradient_mean) <= res.gradient_std + 1e-12)  # the interval reaches the reading


def test_forward_stencil_covers_a_30_feature_smooth_black_box_that_the_surrogate_alone_misses():
    # 30 features at 50 calls: the central stencil (60 rows) does not fit, the forward one (30) does; without it the
    # trend surrogate's slope at x is the box's average slope with an overconfident std
    rng = np.random.default_rng(1)
    D = 30
    a = rng.normal(size=D)
    a[rng.permutation(D)[:10]] = 0.0

    def f(X):
        return X @ a + 0.5 * np.sin(X[:, 0] * X[:, 1]) + 0.3 * np.tanh(X[:, 2] + X[:, 3])

    data = rng.normal(size=(300, D))
    x = data[0]
    truth = a.copy()
    truth[0] += 0.5 * np.cos(x[0] * x[1]) * x[1]
    truth[1] += 0.5 * np.cos(x[0] * x[1]) * x[0]
    truth[2:4] += 0.3 / np.cosh(x[2] + x[3]) ** 2
    res = LocalGPExplainer(f, data, budget=50, seed=0, raw_samples=8).explain(x)
    assert res.x_samples.shape == (50, D)
    z = np.abs(res.gradient_mean - truth) / res.gradient_std
    assert np.mean(z <= 2) >= 0.9 and z.max() < 3, z
    off = LocalGPExplainer(f, data, budget=50, seed=0, raw_samples=8, stencil=None).explain(x)
    z_off = np.abs(off.gradient_mean - truth) / off.gradient_std
    assert z_off.max() > z.max()


def test_auto_says_when_the_budget_leaves_no_room_for_a_stencil():
    rng = np.random.RandomState(0)
    data = rng.randn(100, 8)
    res = LocalGPExplainer(lambda X: X.sum(1), data, budget=10, seed=0, raw_samples=8).explain(data[0])
    assert any(w.startswith("stencil: off") and "8 rows" in w for w in res.warnings), res.warnings
    res = LocalGPExplainer(lambda X: X.sum(1), data, budget=10, seed=0, raw_samples=8, stencil=None).explain(data[0])
    assert not any(w.startswith("stencil") for w in res.warnings)  # asked for: not reported


def test_the_default_sobol_points_give_way_to_the_stencil():
    # 6 features at 9 calls: x + 6 forward rows + the default's 2 Sobol points leave no acquisition call, 1 does
    data = np.random.RandomState(0).randn(50, 6)
    ex = LocalGPExplainer(lambda X: X.sum(1), data, budget=9)
    assert (ex.n_initial, ex.stencil, ex.stencil_kind) == (1, 0.1, "forward")
    ex = LocalGPExplainer(lambda X: X.sum(1), data, budget=9, stencil=0.2)  # a number too (it raised before)
    assert (ex.n_initial, ex.stencil) == (1, 0.2)
    ex = LocalGPExplainer(lambda X: X.sum(1), data, budget=9, n_initial=2)  # asked for: kept, stencil off
    assert (ex.n_initial, ex.stencil) == (2, None)
    ex = LocalGPExplainer(lambda X: X.sum(1), data, budget=9, stencil=None)
    assert ex.n_initial == 2
    ex = LocalGPExplainer(lambda X: X.sum(1), data, budget=8)  # no stencil fits at all: the default stays
    assert (ex.n_initial, ex.stencil) == (2, None)
    res = LocalGPExplainer(lambda X: X.sum(1), data, budget=9, seed=0, raw_samples=8).explain(data[0])
    assert len(res.y_samples) == 9 and not any(w.startswith("stencil: off") for w in res.warnings)
    np.testing.assert_allclose(res.gradient_mean, np.ones(6), atol=0.05)


def test_features_no_sample_moved_are_named():
    # 4 continuous + 2 categorical features at 7 calls: x, 4 forward stencil rows, 1 Sobol point and 1 BO point; the
    # categorical features move only if those two points draw another category (at seed 0 neither did)
    rng = np.random.default_rng(0)
    X = rng.normal(size=(200, 6))
    X[:, 4], X[:, 5] = rng.integers(0, 3, 200), rng.integers(0, 2, 200)

    def f(Z):
        return Z[:, 0] - 2 * Z[:, 1] + 0.5 * Z[:, 4] + Z[:, 5] * Z[:, 2]

    said = []
    for seed in range(3):
        res = LocalGPExplainer(f, X, budget=7, categorical_features=[4, 5], seed=seed).explain(X[3])
        unmoved = [f"x{j}" for j in range(6) if np.all(res.x_samples[1:, j] == res.x_samples[0, j])]
        notes = [w for w in res.warnings if w.startswith("unmoved:")]
        assert bool(notes) == bool(unmoved), (unmoved, res.warnings)
        if unmoved:
            assert all(name in notes[0] for name in unmoved)
        said.append(bool(notes))
    assert said[0]


def test_stencil_rows_and_differences_against_direct_formulas():
    from gpytorch_explain.local.stencil import choose_stencil, stencil_differences, stencil_rows

    rng = np.random.default_rng(0)
    x = rng.normal(size=4)
    H = rng.normal(size=(4, 4))
    H = H + H.T
    g = rng.normal(size=4)

    def f(X):  # a quadratic: central differences are exact, forward ones off by h H_ii / 2
        Z = X - x
        return Z @ g + 0.5 * np.einsum("ni,ij,nj->n", Z, H, Z)

    scale = np.array([0.5, 1.0, 2.0, 3.0])
    positions = [0, 2, 3]  # feature 1 not stenciled (e.g. categorical)
    h = 0.1 * scale[positions]
    for kind in ("central", "forward"):
        U = stencil_rows(0.1, kind, 4, positions).numpy()
        assert U.shape == ((6 if kind == "central" else 3), 4)
        y = f(np.vstack([x, x + U * scale]))
        d = stencil_differences(y, kind, h)
        expected = g[positions] + (0 if kind == "central" else 0.5 * h * np.diag(H)[positions])
        np.testing.assert_allclose(d, expected, rtol=1e-10, atol=1e-12)
    assert choose_stencil(None, "auto", 5, 50, 10) == (None, "auto", None)
    assert choose_stencil("auto", "auto", 0, 50, 10) == (None, "auto", None)  # nothing continuous: no reason
    assert choose_stencil("auto", "central", 13, 50, 10)[0] is None  # central only: 26 > 25
    assert "central stencil's 26 rows" in choose_stencil("auto", "central", 13, 50, 10)[2]
    assert choose_stencil(0.3, "auto", 13, 50, 10) == (0.3, "central", None)  # 26 + 10 + 2 <= 50
    assert choose_stencil(0.3, "auto", 20, 50, 10) == (0.3, "forward", None)
    # "auto" needs one acquisition call after x, the stencil and the Sobol points, as a number does
    assert choose_stencil("auto", "auto", 10, 15, 3) == (0.1, "forward", None)  # 1 + 10 + 3 + 1 = 15
    assert choose_stencil(0.1, "auto", 10, 15, 3) == (0.1, "forward", None)
    off = choose_stencil("auto", "auto", 10, 14, 3)
    assert off[0] is None and "leave no call to the acquisition" in off[2]
    with pytest.raises(ValueError, match="budget >= 15"):
        choose_stencil(0.1, "auto", 10, 14, 3)


def test_the_stopping_rule_reads_the_std_after_the_stencil_check():
    # a step of width 0.05 sigma at x: the trend surrogate reads the box's slope (~4.5 against the true 7 at x) with
    # a std below 0.3 after 15 calls, while the stencil's central difference reads ~5.8; the check widens the std
    # beyond 0.3, so gradient_tol=0.3 must not stop there (it did at 15 calls when the rule read the surrogate alone)
    rng = np.random.RandomState(0)
    data = rng.randn(200, 3)
    a = np.array([1.0, -1.0, 0.5])

    def f(X):
        return X @ a + 0.3 * np.tanh(X[:, 0] / 0.05)

    x = data[0].copy()
    x[0] = 0.0
    res = LocalGPExplainer(f, data, budget=40, seed=0, raw_samples=8, gradient_tol=0.3).explain(x)
    assert not res.stopped_early and len(res.y_samples) == 40
    assert res.gradient_std[0] > 0.3


@pytest.mark.parametrize("dim, budget", [(5, 10), (10, 25)])
def test_forward_stencil_at_a_minimum_is_not_confidently_wrong(dim, budget):
    """At a minimum every true slope is 0, while each forward difference is h·c_j (its O(h f'') truncation error).
    A surrogate that follows it was up to 13 stds off (10 calls, 5 features) and 4 stds (25 calls, 10 features):
    the std now includes the truncation error estimated from the samples' curvature."""
    rs = np.random.RandomState(0)
    X = rs.randn(300, dim)
    c = np.r_[rs.uniform(0.5, 1.5, dim - 2), 0.0, 0.0]
    worst = []
    for i in range(3):
        x = X[i]

        def f(Z, x=x):
            return ((Z - x) ** 2) @ c

        ex = LocalGPExplainer(f, X, budget=budget, seed=i)
        assert ex.stencil_kind == "forward" and ex.stencil is not None
        res = ex.explain(x)
        z = np.abs(res.gradient_mean) / res.gradient_std
        assert (z < 2).mean() >= 0.8, z  # "most features" inside two stds
        worst.append(z.max())
    assert max(worst) < 3.0, worst


def test_forward_truncation_term_hardly_widens_a_smooth_tilted_black_box():
    """Away from an extremum the forward difference's truncation error is small next to the slope: the stds of
    a near-linear black box stay small (the slopes are known to about 1 %)."""
    rs = np.random.RandomState(1)
    X = rs.randn(300, 10)
    a = rs.uniform(-2, 2, 10)

    def f(Z):
        return Z @ a + 0.05 * np.sin(Z[:, 0])

    res = LocalGPExplainer(f, X, budget=25, seed=0).explain(X[0])
    truth = a + 0.05 * np.cos(X[0, 0]) * np.eye(10)[0]
    assert np.all(np.abs(res.gradient_mean - truth) <= 2 * res.gradient_std + 1e-9)
    assert np.all(res.gradient_std < 0.02 * np.abs(a).max()), res.gradient_std


def test_a_kink_next_to_x_widens_the_std_to_the_side_x_is_on():
    # |x0 - c| with x 0.02 sigma right of its kink, and a ReLU with x1 0.07 sigma left of its kink: the central
    # difference (and the surrogate that follows it) reads the average of the two sides, 0.2 and 0.14, against true
    # slopes of 1 and 0, with stds of 0.08 and 0.009 before; half the spread of the one-sided differences bounds it
    rng = np.random.default_rng(0)
    X = rng.normal(size=(400, 4))
    s = X.std(0)

    def f(Z):
        return np.abs(Z[:, 0] - 0.3) + np.maximum(Z[:, 1], 0.0) + 0.5 * Z[:, 2]

    for offset, seed in [(0.02, 0), (0.15, 1)]:
        x = X[0].copy()
        x[0] = 0.3 + offset * s[0]
        x[1] = -0.5 * offset * s[1]
        true = np.array([1.0, 0.0, 0.5, 0.0])
        res = LocalGPExplainer(f, X, budget=50, seed=seed).explain(x)
        assert res.x_samples.shape == (50, 4)
        z = np.abs(res.gradient_mean - true) / res.gradient_std
        assert (z < 2.0).all(), (res.gradient_mean, res.gradient_std)
        # where no kink lies within the step the std stays sharp (x2's slope 0.5 to a few hundredths)
        assert res.gradient_std[2] < 0.05
