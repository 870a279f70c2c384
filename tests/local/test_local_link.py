"""``LocalGPExplainer(link="logit")``: the surrogates model logit p, the results stay on the probability scale.

Checked against independent computations in float64: the gradient against the same explainer run on the logit black
box (identical samples, so the chain rule must hold to round-off); the probability-scale integrated gradients
against a brute-force Monte Carlo that draws the surrogate's values only (no gradient covariances) on a fine path
and its finite-difference offsets; ``predict`` against Monte Carlo of sigmoid(N(m, s^2)).
"""

import warnings

import numpy as np
import pytest
import torch

from gpytorch_explain.local import LocalGPExplainer
from gpytorch_explain.local.link import (
    LOGIT_CLIP,
    link_hint,
    probability_integrated_gradients,
    probability_moments,
    slope_factor,
    to_link_scale,
)
from gpytorch_explain.local.surrogate import make_surrogate, make_trend_surrogate
from tests.helpers import NO_RELEVANCE

W = np.array([1.5, -2.0, 0.0, 0.8])


def _logit_fn(X):
    X = np.asarray(X, dtype=np.float64)
    return X @ W + 0.3 * np.sin(X[:, 0] * X[:, 1]) + 3.0  # saturates: p(x) ~ 0.95-0.9999 near the instances


def _prob_fn(X):
    return 1.0 / (1.0 + np.exp(-_logit_fn(X)))


def _logit_of_prob(X):
    """logit p computed as the link computes it, so that the surrogates see the same numbers to the bit."""
    p = _prob_fn(X)
    return np.log(p) - np.log1p(-p)


def _data():
    return np.random.default_rng(3).normal(size=(300, 4))


def test_to_link_scale_values_clipping_and_range_errors():
    g, notes = to_link_scale("logit", np.array([0.25, 0.5, 0.9]))
    np.testing.assert_allclose(g, np.log([1 / 3, 1.0, 9.0]), rtol=1e-14)
    assert notes == []
    g, notes = to_link_scale("logit", np.array([0.0, 0.5, 1.0]))
    np.testing.assert_allclose(g[[0, 2]], [np.log(LOGIT_CLIP), -np.log(LOGIT_CLIP)], rtol=1e-12)
    assert len(notes) == 1 and "2 of 3 outputs are 0 or 1" in notes[0]
    with pytest.raises(ValueError, match=r"link='logit' needs black-box outputs in \[0, 1\].*row 1: 1.5"):
        to_link_scale("logit", np.array([0.2, 1.5]))
    y = np.array([3.0, -7.0])
    assert to_link_scale("identity", y)[0] is y
    assert slope_factor("identity", 5.0) == 1.0
    assert slope_factor("logit", 0.2) == pytest.approx(0.16, rel=1e-14)


def test_unknown_link_and_outputs_outside_unit_interval_are_clear_errors():
    data = _data()
    with pytest.raises(ValueError, match="Unknown link 'probit'"):
        LocalGPExplainer(_prob_fn, data, link="probit")
    with pytest.raises(ValueError, match="link='logit' needs black-box outputs in"):
        LocalGPExplainer(lambda X: 2.0 + X[:, 0], data, budget=12, link="logit", seed=0).explain(data[0])


def test_logit_link_is_the_chain_rule_of_the_logit_explanation():
    """Same seed, same samples: the surrogates see the same standardised logits (to the bit), so the probability
    gradient must be p(x)(1 - p(x)) times the gradient of the explainer run on the logit black box, to round-off."""
    data = _data()
    kw = dict(budget=24, seed=5, raw_samples=16, attribution_noise=1e-6)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        a = LocalGPExplainer(_prob_fn, data, link="logit", **kw).explain(data[0])
        b = LocalGPExplainer(_logit_of_prob, data, **kw).explain(data[0])
    np.testing.assert_allclose(a.x_samples, b.x_samples, rtol=0, atol=1e-12)
    p = _prob_fn(data[:1])[0]
    np.testing.assert_allclose(a.y_samples, _prob_fn(a.x_samples), rtol=1e-14)
    np.testing.assert_allclose(a.gradient_mean, p * (1 - p) * b.gradient_mean, rtol=1e-6, atol=1e-12)
    np.testing.assert_allclose(a.gradient_std, p * (1 - p) * b.gradient_std, rtol=1e-6, atol=1e-12)
    np.testing.assert_allclose(a.relevance, b.relevance, rtol=1e-6, atol=1e-9)
    assert a.fidelity == pytest.approx(b.fidelity, rel=1e-8)
    # predict on the probability scale: the moments of sigmoid of the logit surrogate's Gaussian
    m, s = b.predict(data[:3])
    pm, ps = a.predict(data[:3])
    rng = np.random.default_rng(0)
    draws = 1 / (1 + np.exp(-(m + s * rng.normal(size=(200000, 3)))))
    np.testing.assert_allclose(pm, draws.mean(0), atol=4 * draws.std(0).max() / np.sqrt(2e5) + 1e-12)
    np.testing.assert_allclose(ps, draws.std(0), rtol=0.02, atol=1e-10)


def test_logit_link_gradient_covers_the_true_probability_gradient_and_ig_is_complete():
    data = _data()
    x = data[1]
    eps = 1e-6
    E = np.eye(4)
    true = np.array(
        [(_prob_fn((x + eps * E[j])[None]) - _prob_fn((x - eps * E[j])[None]))[0] / (2 * eps) for j in range(4)]
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = LocalGPExplainer(
            _prob_fn, data, budget=40, seed=1, link="logit", attribution_noise=1e-6, **NO_RELEVANCE
        ).explain(x)
    z = (res.gradient_mean - true) / res.gradient_std
    assert np.all(np.abs(z) < 2), z
    assert abs(res.gradient_mean[2]) < 2 * res.gradient_std[2] + 1e-9  # no effect
    # the probability-scale IG sums to the surrogate's E p(x) - E p(b) (Gauss-Legendre + Gauss-Hermite)
    m, _ = res.predict(np.stack([x, res.baseline]))
    assert res.integrated_gradients.sum() == pytest.approx(m[0] - m[1], abs=1e-4)
    assert not any("completeness" in w for w in res.warnings)
    again = LocalGPExplainer(_prob_fn, data, budget=40, seed=1, link="logit", attribution_noise=1e-6, **NO_RELEVANCE)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res2 = again.explain(x)
    np.testing.assert_array_equal(res.integrated_gradients_std, res2.integrated_gradients_std)  # deterministic


def test_probability_moments_match_monte_carlo():
    m = np.array([-3.0, 0.2, 4.0])
    s = np.array([0.5, 2.0, 1e-9])
    pm, ps = probability_moments(m, s)
    draws = 1 / (1 + np.exp(-(m + s * np.random.default_rng(1).normal(size=(400000, 3)))))
    np.testing.assert_allclose(pm, draws.mean(0), atol=5e-4)
    np.testing.assert_allclose(ps, draws.std(0), rtol=0.01, atol=1e-9)


def test_probability_integrated_gradients_against_finite_difference_monte_carlo():
    """Brute force: joint draws of the surrogate's VALUES at 201 path points and their ±h offsets along each
    feature (one dense posterior, no derivative covariances), gradients by central differences, IG of sigmoid by
    the trapezoid rule; mean and std compared with the closed-form mean and Monte Carlo std."""
    torch.manual_seed(0)
    gen = np.random.default_rng(4)
    U = torch.as_tensor(gen.uniform(-1, 1, size=(14, 2)))
    zt = torch.as_tensor(np.sin(2 * U[:, 0].numpy()) + U[:, 1].numpy() ** 2 - 0.5)
    zt = (zt - zt.mean()) / zt.std()
    model = make_trend_surrogate(make_surrogate(U, zt), noise=1e-4)
    model.eval()
    ux = torch.tensor([0.3, -0.4], dtype=torch.float64)
    ub = torch.tensor([-0.6, 0.5], dtype=torch.float64)
    ym, ys = 0.7, 1.8
    mean, std, gap = probability_integrated_gradients(model, ux, ub, ym, ys, num_samples=20000, seed=3)
    assert gap < 1e-6
    h = 1e-3
    t = np.linspace(0, 1, 201)
    P = ub.numpy() + t[:, None] * (ux - ub).numpy()
    pts = [P] + [P + s * h * np.eye(2)[j] for j in range(2) for s in (1, -1)]
    Z = torch.as_tensor(np.concatenate(pts))
    with torch.no_grad():
        post = model.posterior(Z)
        mu = post.mean[:, 0].numpy()
        cov = post.mvn.covariance_matrix.numpy()
    evals, evecs = np.linalg.eigh(0.5 * (cov + cov.T))
    S = 20000
    draws = mu + (gen.normal(size=(S, mu.size)) * np.sqrt(np.clip(evals, 0, None))) @ evecs.T
    n = len(t)
    g = ym + ys * draws
    sig = 1 / (1 + np.exp(-g[:, :n]))
    dsig = sig * (1 - sig)
    delta = (ux - ub).numpy()
    ig = np.zeros((S, 2))
    for j in range(2):
        dg = (g[:, n * (1 + 2 * j) : n * (2 + 2 * j)] - g[:, n * (2 + 2 * j) : n * (3 + 2 * j)]) / (2 * h)
        ig[:, j] = delta[j] * np.trapezoid(dsig * dg, t, axis=1)
    se = ig.std(0) / np.sqrt(S)
    np.testing.assert_allclose(mean, ig.mean(0), atol=5 * se.max() + 2e-4)
    np.testing.assert_allclose(std, ig.std(0), rtol=0.05)


def test_a_saturated_sklearn_probability_without_the_link_gets_a_hint():
    assert "link='logit'" in link_hint("identity", np.array([0.999, 0.5, 0.2]), True)[0]
    assert link_hint("identity", np.array([0.01]), True)
    assert link_hint("identity", np.array([0.01]), False) == []  # not known to be a probability (e.g. tiny units)
    assert link_hint("identity", np.array([0.5, 0.99, 0.0]), True) == []  # x's output is not saturated
    assert link_hint("logit", np.array([0.999, 0.5]), True) == []
    from sklearn.linear_model import LogisticRegression

    from gpytorch_explain.local import from_sklearn_classifier

    data = _data()
    clf = LogisticRegression().fit(data, _logit_fn(data) + np.random.default_rng(0).logistic(size=300) > 0)
    proba = from_sklearn_classifier(clf, 1)
    p = proba(data[:40])
    sat, mid = int(np.argmax(np.minimum(p, 1 - p) < 0.01)), int(np.argmax(np.abs(p - 0.5) < 0.3))
    assert min(p[sat], 1 - p[sat]) < 0.01 and abs(p[mid] - 0.5) < 0.3
    kw = dict(budget=14, seed=0, raw_samples=16, **NO_RELEVANCE)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = LocalGPExplainer(proba, data, **kw).explain(data[sat])
        with_link = LocalGPExplainer(proba, data, link="logit", **kw).explain(data[sat])
        unsaturated = LocalGPExplainer(proba, data, **kw).explain(data[mid])
    assert any(w.startswith("link: the probability at x is") for w in res.warnings), res.warnings
    for r in (with_link, unsaturated):
        assert not any(w.startswith("link: the probability") for w in r.warnings)
