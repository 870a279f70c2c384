#!/usr/bin/env python3
"""gpytorch_explain.metrics against hand-computed values and independent brute-force loops."""

import math
import warnings

import numpy as np
import pytest
import torch

from gpytorch_explain.metrics import (
    completeness_gap,
    faithfulness,
    inconsistency,
    interval_coverage,
    stability,
    sufficiency,
    topk_agreement,
)


# ---------------------------------------------------------------- faithfulness
def test_faithfulness_hand_computed_nonlinear():
    # f(x) = x0 * x1 + x2, x = (1, 2, 3), baseline 0.
    # removing x0 -> f = 3, drop 5-3 = 2; x1 -> drop 2; x2 -> f = 2, drop 3. deltas (2, 2, 3)
    # contributions (1, 0, 2): corr((1,0,2), (2,2,3)); centred (0,-1,1) and (-1/3,-1/3,2/3)
    # cov = 0 + 1/3 + 2/3 = 1; |a| = sqrt 2; |b| = sqrt(6/9) -> r = 1/(sqrt2*sqrt(2/3)) = sqrt(3)/2
    def f(a):
        return a[:, 0] * a[:, 1] + a[:, 2]

    r = faithfulness(f, np.array([[1.0, 2.0, 3.0]]), np.array([[1.0, 0.0, 2.0]]), baseline=np.zeros(3))
    assert r.shape == (1,)
    assert r[0] == pytest.approx(math.sqrt(3) / 2, abs=1e-12)


def test_faithfulness_default_baseline_is_column_mean_and_brute_force():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(5, 4))
    c = rng.normal(size=(5, 4))

    def f(a):
        return np.sin(a).sum(1) + a[:, 0] * a[:, 3]

    got = faithfulness(f, x, c)
    mu = x.mean(0)
    for i in range(5):
        drops = []
        for j in range(4):
            xr = x[i].copy()
            xr[j] = mu[j]
            drops.append(f(x[i : i + 1])[0] - f(xr[None])[0])
        assert got[i] == pytest.approx(np.corrcoef(c[i], drops)[0, 1], abs=1e-12)


def test_faithfulness_per_sample_baseline_and_sign():
    w = np.array([1.0, 2.0, -1.0])
    x = np.array([[1.0, 1.0, 1.0], [2.0, 0.0, 1.0]])
    b = np.array([[0.0, 0.0, 0.0], [1.0, 1.0, 1.0]])
    # sample 1: drops w*(x-b) = (1, -2, 0); contributions -(1,-2,0) -> correlation -1
    r = faithfulness(lambda a: a @ w, x, -(x - b) * w, baseline=b)
    assert r == pytest.approx([-1.0, -1.0])


def test_faithfulness_torch_input_and_predict_receives_tensor():
    seen = []

    def f(a):
        seen.append(type(a))
        return a.sum(-1)

    x = torch.tensor([[1.0, 2.0], [3.0, 5.0]], dtype=torch.float64)
    r = faithfulness(f, x, x, baseline=torch.zeros(2, dtype=torch.float64))
    assert seen == [torch.Tensor] and isinstance(r, np.ndarray)
    np.testing.assert_allclose(r, [1.0, 1.0])


def test_faithfulness_constant_contributions_give_nan_with_warning():
    x = np.array([[1.0, 2.0], [1.0, 3.0]])
    with pytest.warns(RuntimeWarning, match="1 of 2"):
        r = faithfulness(lambda a: a.sum(1), x, np.array([[0.0, 0.0], [1.0, 2.0]]), baseline=np.zeros(2))
    assert np.isnan(r[0]) and r[1] == pytest.approx(1.0)


def test_faithfulness_errors():
    x = np.ones((2, 3))
    with pytest.raises(ValueError, match="shape of x"):
        faithfulness(lambda a: a.sum(1), x, np.ones((2, 2)))
    with pytest.raises(ValueError, match="baseline"):
        faithfulness(lambda a: a.sum(1), x, x, baseline=np.zeros(4))
    with pytest.raises(ValueError, match="n predictions"):
        faithfulness(lambda a: a, x, x)
    with pytest.raises(ValueError, match="NaN"):
        faithfulness(lambda a: a.sum(1), np.array([[1.0, np.nan]]), np.ones((1, 2)))
    with pytest.raises(ValueError, match="at least 2"):
        faithfulness(lambda a: a.sum(1), np.ones((2, 1)), np.ones((2, 1)))


def test_faithfulness_and_sufficiency_scalar_and_row_baselines():
    w = np.array([1.0, -2.0, 0.5])
    x = np.array([[1.0, 2.0, 3.0], [0.5, -1.0, 2.0]])
    c = np.array([[0.3, 2.0, -1.0], [1.0, 0.5, 0.0]])

    def f(a):
        return np.tanh(a) @ w

    full = np.full((2, 3), 0.25)
    want_f = faithfulness(f, x, c, baseline=full)
    want_s = sufficiency(f, x, c, baseline=full, k=[1, 2])
    for b in (
        0.25,
        np.float64(0.25),
        np.array(0.25),
        torch.tensor(0.25),
        np.full((1, 3), 0.25),
        torch.full((1, 3), 0.25),
    ):
        np.testing.assert_array_equal(faithfulness(f, x, c, b), want_f)
        np.testing.assert_array_equal(sufficiency(f, x, c, b, k=[1, 2]), want_s)
    # a (1, D) row is broadcast to every sample, like (D,)
    row = np.array([[0.0, 1.0, -1.0]])
    np.testing.assert_array_equal(faithfulness(f, x, c, row), faithfulness(f, x, c, row[0]))
    with pytest.raises(ValueError, match=r"baseline must be a scalar or have shape"):
        faithfulness(f, x, c, np.zeros((3, 3)))
    with pytest.raises(ValueError, match=r"baseline must be a scalar or have shape"):
        sufficiency(f, x, c, np.zeros((1, 2)))


# ---------------------------------------------------------------- sufficiency
def test_sufficiency_hand_computed():
    # f(x) = x0*x1 + x2 at (1, 2, 3), f = 5, baseline 0.
    # contributions (0.5, -4, 1): order by |.|: 1, 2, 0
    # k=1 keep x1 only: f(0,2,0) = 0 -> 5; k=2 keep x1,x2: f(0,2,3) = 3 -> 2; k=3 -> 0; k=7 -> 0
    def f(a):
        return a[:, 0] * a[:, 1] + a[:, 2]

    x = np.array([[1.0, 2.0, 3.0]])
    c = np.array([[0.5, -4.0, 1.0]])
    got = sufficiency(f, x, c, baseline=np.zeros(3), k=[1, 2, 3, 7])
    assert got.shape == (4, 1)
    np.testing.assert_allclose(got[:, 0], [5.0, 2.0, 0.0, 0.0], atol=1e-14)
    single = sufficiency(f, x, c, baseline=np.zeros(3), k=2)
    assert single.shape == (1,) and single[0] == pytest.approx(2.0)


def test_sufficiency_ties_go_to_lower_index():
    w = np.array([1.0, 10.0, 100.0])
    x = np.ones((1, 3))
    # |contributions| tie between features 1 and 2; feature 1 is kept at k=1: f = 10, |111 - 10| = 101
    got = sufficiency(lambda a: a @ w, x, np.array([[0.0, 2.0, -2.0]]), baseline=np.zeros(3), k=1)
    assert got[0] == pytest.approx(101.0)


def test_sufficiency_brute_force_default_baseline():
    rng = np.random.default_rng(1)
    x = rng.normal(size=(4, 5))
    c = rng.normal(size=(4, 5))

    def f(a):
        return np.tanh(a) @ np.arange(1.0, 6.0)

    got = sufficiency(f, x, c, k=range(1, 6))
    mu = x.mean(0)
    for i in range(4):
        order = sorted(range(5), key=lambda j: -abs(c[i, j]))
        for k in range(1, 6):
            xi = mu.copy()
            xi[order[:k]] = x[i, order[:k]]
            assert got[k - 1, i] == pytest.approx(abs(f(x[i : i + 1])[0] - f(xi[None])[0]), abs=1e-12)


def test_sufficiency_bad_k():
    for k in (0, -1, 1.5, True, []):
        with pytest.raises(ValueError, match="k"):
            sufficiency(lambda a: a.sum(1), np.ones((1, 2)), np.ones((1, 2)), k=k)


def test_sufficiency_zero_d_integer_k():
    def f(a):
        return a @ np.array([3.0, -1.0, 0.5])

    x, c = np.ones((2, 3)), np.array([[3.0, -1.0, 0.5], [0.1, 2.0, 1.0]])
    want = sufficiency(f, x, c, baseline=0.0, k=2)
    for k in (np.int64(2), np.array(2), torch.tensor(2), np.array(2, dtype=np.uint8)):
        got = sufficiency(f, x, c, baseline=0.0, k=k)
        assert got.shape == (2,)
        np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(
        sufficiency(f, x, c, baseline=0.0, k=torch.tensor([1, 2])), sufficiency(f, x, c, baseline=0.0, k=[1, 2])
    )
    for k in (np.array(2.0), torch.tensor(2.0), torch.tensor(0), np.array(True), "2"):
        with pytest.raises(ValueError, match="k"):
            sufficiency(f, x, c, k=k)


# ---------------------------------------------------------------- stability
def test_stability_hand_computed():
    # D = 2; sample 0 and 1 at distance 0.05 (/D = 0.025 < 0.05); sample 2 far away.
    # weights columns (1,0,1), (0,1,1): population std sqrt(2)/3 each, so
    # ||w~1 - w~0|| = sqrt(2) / (sqrt(2)/3) = 3, divided by ||z1 - z0|| = 0.05 -> 60
    x = np.array([[0.0, 0.0], [0.04, 0.03], [5.0, 5.0]])
    w = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    per = stability(x, w, reduction="none")
    assert per[0] == pytest.approx(60.0) and per[1] == pytest.approx(60.0) and np.isnan(per[2])
    with pytest.warns(RuntimeWarning, match="1 of the 3 samples have no neighbour") as rec:
        assert stability(x, w) == pytest.approx(60.0)  # sample 2 (no neighbour) is left out of the mean
    assert "over the other 2" in str(rec[0].message)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # every sample has a neighbour: no warning
        assert stability(x[:2], w[:2]) == pytest.approx(stability(x[:2], w[:2], reduction="none").mean())


def test_stability_max_over_neighbours_with_separate_z():
    # three points in a cluster; z differs from x; max over neighbours taken.
    x = np.array([[0.0], [0.01], [0.02]])  # D = 1: all pairwise distances < 0.05
    z = np.array([[0.0, 0.0], [1.0, 0.0], [0.0, 2.0]])
    w = np.array([[0.0, 0.0], [3.0, 0.0], [0.0, 3.0]])
    s = w.std(0)  # both sqrt(2)
    wt = (w - w.mean(0)) / s
    expected = []
    for i in range(3):
        expected.append(max(np.linalg.norm(wt[j] - wt[i]) / np.linalg.norm(z[j] - z[i]) for j in range(3) if j != i))
    # by hand: pairs (0,1): 3/sqrt2 / 1; (0,2): 3/sqrt2 / 2; (1,2): 3 / sqrt5
    assert expected[0] == pytest.approx(3 / math.sqrt(2))
    np.testing.assert_allclose(stability(x, w, z=z, reduction="none"), expected)


def test_stability_global_weights_score_zero_and_duplicates_excluded():
    x = np.array([[0.0, 0.0], [0.01, 0.0], [0.01, 0.0]])
    assert stability(x, np.ones((3, 2)) * [2.0, -1.0]) == 0.0
    # rows 1 and 2 are duplicates: that pair is excluded even though their weights differ
    w = np.array([[0.0, 0.0], [0.0, 0.0], [1.0, 0.0]])
    per = stability(x, w, reduction="none")
    # column 0 std = sqrt(2)/3; ||w~2 - w~0|| = 3/sqrt2, / 0.01
    assert per[1] == 0.0
    assert per[2] == pytest.approx(3 / math.sqrt(2) / 0.01)


def test_stability_global_standardisation_hand_computed():
    # same points as test_stability_hand_computed; weights (1,0), (0,1), (1,1): all six entries have
    # mean 2/3 and population std sqrt(2)/3, so ||w~1 - w~0|| = sqrt(2) / (sqrt(2)/3) = 3 -> 3 / 0.05 = 60
    x = np.array([[0.0, 0.0], [0.04, 0.03], [5.0, 5.0]])
    w = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    assert stability(x, w, standardise="global") == pytest.approx(60.0)
    # columns with different scales: per-column and global now differ. w = [[0, 0], [1, 10], [2, 20]]
    w2 = np.array([[0.0, 0.0], [1.0, 10.0], [2.0, 20.0]])
    x2 = np.array([[0.0], [0.01], [1.0]])  # only the pair (0, 1) are neighbours
    g = w2.std()  # one std over all six entries
    expected_global = math.hypot(1.0, 10.0) / g / 0.01
    expected_column = math.hypot(1.0 / w2[:, 0].std(), 10.0 / w2[:, 1].std()) / 0.01
    # z = x has D = 1 but d = 2 weights: pass a z with ||z1 - z0|| = 0.01
    z2 = np.array([[0.0, 0.0], [0.01, 0.0], [1.0, 0.0]])
    assert stability(x2, w2, z=z2, standardise="global") == pytest.approx(expected_global)
    assert stability(x2, w2, z=z2) == pytest.approx(expected_column)
    assert expected_global != pytest.approx(expected_column)
    assert stability(x2, np.ones((3, 2)), z=z2, standardise="global") == 0.0  # a global model still scores 0
    with pytest.raises(ValueError, match="standardise"):
        stability(x2, w2, z=z2, standardise="rows")


def test_stability_no_neighbours_warns_nan():
    with pytest.warns(RuntimeWarning, match="none of the 2"):
        assert math.isnan(stability(np.array([[0.0], [1.0]]), np.array([[1.0], [2.0]])))


def test_stability_errors():
    with pytest.raises(ValueError, match="eps"):
        stability(np.ones((2, 2)), np.ones((2, 2)), eps=0)
    with pytest.raises(ValueError, match="z must"):
        stability(np.ones((2, 2)), np.ones((2, 3)))


def test_stability_eps_as_0d_array_or_tensor():
    x = np.array([[0.0, 0.0], [0.04, 0.03], [5.0, 5.0]])
    w = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    for eps in (torch.tensor(0.05), np.array(0.05), np.float32(0.05), torch.tensor(0.05, dtype=torch.float64)):
        assert stability(x, w, eps=eps) == pytest.approx(60.0)
    for eps in (torch.tensor(0.0), torch.tensor([0.05, 0.1]), "0.05", True):
        with pytest.raises(ValueError, match="eps"):
            stability(x, w, eps=eps)


# ---------------------------------------------------------------- inconsistency / top-k
def test_inconsistency_2d_hand_computed():
    # |.| and /max per repeat: (1, 0.5) and (1, 1); std over repeats (ddof 0): (0, 0.25); mean 0.125
    assert inconsistency(np.array([[2.0, -1.0], [-4.0, 4.0]])) == pytest.approx(0.125)


def test_inconsistency_3d_per_sample_max_and_zero_rows():
    s = np.array(
        [
            [[1.0, 0.0, 0.0], [0.0, 0.0, 0.0]],
            [[0.0, 2.0, 0.0], [0.0, 0.0, 5.0]],
            [[0.0, 0.0, -3.0], [0.0, 0.0, 0.0]],
        ]
    )
    # sample 0: normalised one-hot rows e0, e1, e2 -> per-feature std over 3 repeats = sqrt(2)/3 each
    # sample 1: rows 0, e2, 0 -> feature 2 std = sqrt(2)/3, others 0
    expected = (3 * math.sqrt(2) / 3 + math.sqrt(2) / 3) / 6
    assert inconsistency(s) == pytest.approx(expected)
    assert inconsistency(torch.ones(4, 3, 2)) == 0.0
    with pytest.raises(ValueError, match="2 repeats"):
        inconsistency(np.ones((1, 3)))


def test_topk_agreement_hand_computed():
    a = np.array([[3.0, -2.0, 1.0, 0.0], [1.0, 1.0, 1.0, 1.0]])
    b = np.array([[0.1, 5.0, -4.0, 0.0], [0.0, 0.0, 2.0, 2.0]])
    # row 0: {0,1} vs {1,2} -> 1/3. row 1: ties -> {0,1} vs {2,3} -> 0
    np.testing.assert_allclose(topk_agreement(a, b, 2), [1 / 3, 0.0])
    assert topk_agreement(a[0], b[0], 3) == 1.0  # {0,1,2} vs {1,2,0}
    assert topk_agreement(a[0], -b[0] * [1, 1, 1, 9], 1) == 0.0  # {0} vs {1}
    assert topk_agreement(a[0], b[0], 10) == 1.0
    with pytest.raises(ValueError, match="same shape"):
        topk_agreement(a, b[0], 1)


def test_topk_agreement_zero_d_integer_k():
    a = np.array([[3.0, -2.0, 1.0, 0.0], [1.0, 1.0, 1.0, 1.0]])
    b = np.array([[0.1, 5.0, -4.0, 0.0], [0.0, 0.0, 2.0, 2.0]])
    for k in (torch.tensor(2), np.array(2), np.int32(2)):
        np.testing.assert_allclose(topk_agreement(a, b, k), [1 / 3, 0.0])
    for k in (torch.tensor(2.0), torch.tensor([2]), 0, True):
        with pytest.raises(ValueError, match="k must be a positive integer"):
            topk_agreement(a, b, k)


# ---------------------------------------------------------------- coverage / completeness
def test_interval_coverage_hand_computed():
    mean = np.array([0.0, 0.0, 1.0, 1.0, 0.0])
    std = np.array([1.0, 1.0, 0.5, 0.0, 2.0])
    truth = np.array([1.95, 1.97, 0.0, 1.0, -3.0])
    # q = 1.959964: covered, not covered, |−1| <= 0.98 no, equal with std 0 yes, 3 <= 3.92 yes -> 3/5
    assert interval_coverage(mean, std, truth) == pytest.approx(0.6)
    # level 0.6827 -> q ~ 1.0: only the std-0 entry is covered (1.95 > 1, 1.97 > 1, 1 > 0.5, 3 > 2) -> 1/5
    assert interval_coverage(mean, std, truth, level=0.6827) == pytest.approx(0.2)
    with pytest.raises(ValueError, match="negative"):
        interval_coverage(mean, -std, truth)
    with pytest.raises(ValueError, match="level"):
        interval_coverage(mean, std, truth, level=1.0)


def test_interval_coverage_broadcasts_std_and_truth_to_mean():
    mean = np.array([0.0, 0.0, 1.0, 1.0, 0.0])
    truth = np.array([1.95, 1.97, 0.0, 1.0, -3.0])
    # scalar std 1: |d| = 1.95, 1.97, 1, 0, 3 against 1.96 -> 3/5 covered
    assert interval_coverage(mean, 1.0, truth) == pytest.approx(0.6)
    assert interval_coverage(mean, torch.tensor(1.0), truth) == pytest.approx(0.6)
    assert interval_coverage(mean, np.ones(5), truth) == pytest.approx(0.6)
    # scalar truth 0: |d| = 0, 0, 1, 1, 0 with std 0.6 (q*std = 1.176) -> all covered
    assert interval_coverage(mean, 0.6, 0.0) == 1.0
    # (m, D) mean with a per-feature (D,) std
    m2 = np.zeros((2, 3))
    t2 = np.array([[1.0, 1.0, 1.0], [0.1, 3.0, 0.1]])
    assert interval_coverage(m2, np.array([1.0, 0.1, 1.0]), t2) == pytest.approx(4 / 6)
    with pytest.raises(ValueError, match="std must have mean's shape"):
        interval_coverage(mean, np.ones(3), truth)
    with pytest.raises(ValueError, match="truth must have mean's shape"):
        interval_coverage(mean, 1.0, np.zeros((5, 1)))  # would broadcast to (5, 5), not to mean's (5,)


def test_completeness_gap_hand_computed():
    a = np.array([[1.0, 2.0], [0.5, 0.5]])
    np.testing.assert_allclose(completeness_gap(a, [3.5, 1.0], 0.5), [0.0, 0.5])
    np.testing.assert_allclose(completeness_gap(a, [3.0, 1.0], [0.0, 0.0]), [0.0, 0.0])
    np.testing.assert_allclose(completeness_gap(np.array([1.0, 1.0]), 2.5, 0.0), [-0.5])
    with pytest.raises(ValueError, match="one value per sample"):
        completeness_gap(a, [1.0], 0.0)


def test_complex_predictions_are_an_error():
    with pytest.raises(ValueError, match="complex"):
        faithfulness(lambda a: a.sum(1) + 1j, np.eye(2), np.eye(2))
    with pytest.raises(ValueError, match="complex"):
        faithfulness(lambda a: a.sum(1).to(torch.complex128), torch.eye(2, dtype=torch.float64), np.eye(2))


def test_no_warning_for_regular_input():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        faithfulness(lambda a: a @ np.array([1.0, 2.0]), np.eye(2), np.eye(2) * [1.0, 2.0])


def test_one_sample_needs_a_baseline():
    """With m = 1 the default baseline (the column mean of x) is the sample itself: nothing would be removed, and
    sufficiency scored 0 (the best) for any ranking while faithfulness was nan."""
    x = np.array([[1.0, 2.0, 3.0]])
    w = np.array([1.0, -2.0, 0.5])
    for metric in (faithfulness, sufficiency):
        with pytest.raises(ValueError, match="one sample"):
            metric(lambda a: a @ w, x, x * w)
    np.testing.assert_allclose(faithfulness(lambda a: a @ w, x, x * w, baseline=0.0), [1.0])


def test_round_off_is_not_variation():
    """A model constant up to round-off (outputs ~1e3 varying by 1e-13) has no removal effects: nan, not random
    correlations; a global weight that differs by one ulp between rows is still global: stability 0, not ~84."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(5, 4))
    with pytest.warns(RuntimeWarning, match="5 of 5"):
        r = faithfulness(lambda a: (a[:, 0] + 1e3) - a[:, 0], x, rng.normal(size=(5, 4)), baseline=0.0)
    assert np.isnan(r).all()
    w = np.tile([0.1, -0.3, 0.7], (30, 1))
    w[::2, 0] = np.nextafter(0.1, 1.0)
    X = rng.normal(size=(30, 3))
    assert stability(X, w, eps=1.0) == 0.0


def test_level_and_empty_scores_are_clear_errors():
    with pytest.raises(ValueError, match="level must be a real number"):
        interval_coverage(np.zeros(3), np.ones(3), np.zeros(3), level="0.9")
    with pytest.raises(ValueError, match="at least one feature"):
        inconsistency(np.zeros((3, 0)))
