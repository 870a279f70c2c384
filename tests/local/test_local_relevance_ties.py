"""Ties in the relevance: features that take the same values on the few samples carrying the output's variation.

The check (``gpytorch_explain.local.identifiability``) is compared with brute force: every subset of samples for the
informative set, every pair of features for the ties; end to end, the warning must appear exactly when an
independent recomputation from ``result.x_samples`` and ``result.y_samples`` finds a tie.
"""

import itertools

import numpy as np
import pytest

from gpytorch_explain.local import LocalGPExplainer
from gpytorch_explain.local.identifiability import confounded_features, informative_samples

TIE = "cannot tell these features apart"


def _brute_informative(z: np.ndarray, share: float = 0.9, limit: int | None = None) -> set[int] | None:
    """The smallest subset holding ``share`` of the squared deviations from the median (all subsets, by size);
    ``None`` when it has more than ``limit`` samples."""
    dev = (z - np.median(z)) ** 2
    for k in range(1, min(len(z), limit or len(z)) + 1):
        best = max(itertools.combinations(range(len(z)), k), key=lambda s: dev[list(s)].sum())
        if dev[list(best)].sum() >= share * dev.sum() - 1e-12:
            return set(best)
    assert limit is not None
    return None


@pytest.mark.parametrize("seed", range(6))
def test_informative_samples_are_the_smallest_subset_holding_ninety_percent(seed):
    rng = np.random.RandomState(seed)
    z = np.where(rng.rand(11) < 0.3, rng.randn(11) * 5, rng.randn(11) * 0.1)
    got = informative_samples(z)
    want = _brute_informative(z)
    assert len(got) == len(want)
    dev = (z - np.median(z)) ** 2
    assert np.isclose(dev[got].sum(), dev[list(want)].sum())  # the same set up to equal deviations
    assert informative_samples(np.full(7, 2.5)).size == 0  # a constant output has no informative sample


def _brute_ties(U, z, rel, top=3, tol=0.25, max_informative=8, min_relevance=0.05) -> dict[int, list[int]]:
    if not np.ptp(z) > 0:
        return {}
    S = _brute_informative(z, limit=max_informative)
    if S is None:
        return {}
    S = sorted(S)
    out = {}
    for j in sorted(range(len(rel)), key=lambda k: (-rel[k], k))[:top]:
        if rel[j] < min_relevance:
            continue
        tied = []
        for k in range(len(rel)):
            if k != j and (
                all(abs(U[s, k] - U[s, j]) <= tol for s in S) or all(abs(U[s, k] + U[s, j]) <= tol for s in S)
            ):
                tied.append(k)
        if tied:
            out[j] = tied
    return out


@pytest.mark.parametrize("seed", range(8))
def test_ties_match_a_pairwise_brute_force(seed):
    rng = np.random.RandomState(seed)
    n, d = 14, 6
    U = rng.uniform(-1, 1, (n, d))
    hits = rng.choice(n, size=rng.randint(1, 5), replace=False)
    U[np.ix_(hits, [1, 4])] = rng.choice([-1.0, 1.0], size=(len(hits), 2))  # corners, as the acquisitions sample
    U[hits, 2] = -U[hits, 4] + rng.uniform(-0.2, 0.2, len(hits))  # mirrored within the tolerance
    z = np.where(np.isin(np.arange(n), hits), 3.0 + rng.rand(n), 0.01 * rng.randn(n))
    rel = rng.dirichlet(np.ones(d))
    _, ties = confounded_features(U, z, rel)
    assert ties == _brute_ties(U, z, rel)


def test_many_informative_samples_are_not_checked():
    rng = np.random.RandomState(0)
    U = rng.choice([-1.0, 1.0], size=(40, 3))
    U[:, 2] = U[:, 0]  # tied everywhere, but 40 samples carry the variation
    informative, ties = confounded_features(U, rng.randn(40), np.array([0.5, 0.2, 0.3]))
    assert informative.size > 8 and ties == {}


def _recomputed_ties(explainer: LocalGPExplainer, result, x: np.ndarray) -> dict[int, list[int]]:
    act = explainer.active
    U = (result.x_samples[:, act] - x[act]) / (explainer.interval * explainer.sigma[act])
    return _brute_ties(U, result.y_samples, result.relevance[act])


def test_an_and_of_binary_features_warns_of_its_tie_exactly_when_a_recomputation_finds_one():
    """f = 1 when three balanced binary features are all 1: on the few samples where f = 1 they agree, so the
    samples cannot say which of them carries the effect."""
    rng = np.random.RandomState(0)
    data = np.tile(np.array([[0.0] * 6, [1.0] * 6]), (50, 1))
    data = np.array([rng.permutation(col) for col in data.T]).T  # balanced, independent columns

    def f(X):
        return (X[:, 0] * X[:, 1] * X[:, 2]).astype(float)

    f.returns_probability = True  # as from_sklearn_classifier marks a probability: the message suggests the logit
    x = np.zeros(6)
    fired = 0
    for seed in range(2):
        explainer = LocalGPExplainer(f, data, categorical_features=range(6), budget=20, seed=seed)
        result = explainer.explain(x)
        warned = [w for w in result.warnings if TIE in w]
        want = _recomputed_ties(explainer, result, x)
        assert bool(warned) == bool(want), (result.warnings, want)
        fired += bool(warned)
        if warned:
            j, tied = next(iter(want.items()))
            assert f"x{j} (relevance" in warned[0]
            assert all(f"x{k}" in warned[0] for k in tied[:5])
            assert "link='logit'" in warned[0]
    assert fired >= 1  # the design hits f = 1 on a few rows only (2 of 20 for both seeds)


def test_a_smooth_black_box_does_not_warn():
    rng = np.random.RandomState(1)
    X = rng.randn(200, 5)
    a = np.array([1.0, -2.0, 0.5, 0.0, 0.0])

    def f(Z):
        return Z @ a + 0.1 * np.sin(Z[:, 0] * Z[:, 1])

    result = LocalGPExplainer(f, X, budget=25, seed=0).explain(X[0])
    assert not any(TIE in w for w in result.warnings)
