"""GPXExplanation: indexing, feature names and labelled uncertainty (issue 13)."""

import matplotlib

matplotlib.use("Agg")

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
from gpytorch.likelihoods import BernoulliLikelihood  # noqa: E402

from gpytorch_explain import GPXExplanation, GPXModel  # noqa: E402
from gpytorch_explain.models.variational_gpx import VariationalGPXModel  # noqa: E402

DTYPE = torch.float64


def _explanation(m=4, d=2, outcome="regression", names=None):
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(m, 3, generator=gen, dtype=DTYPE)
    z = torch.randn(m, d, generator=gen, dtype=DTYPE)
    a = torch.randn(m, d, d, generator=gen, dtype=DTYPE)
    return GPXExplanation(
        x=x,
        z=z,
        prediction_mean=torch.rand(m, generator=gen, dtype=DTYPE),
        prediction_std=torch.rand(m, generator=gen, dtype=DTYPE) + 0.5,
        latent_std=torch.rand(m, generator=gen, dtype=DTYPE) + 0.1,
        weights_mean=torch.randn(m, d, generator=gen, dtype=DTYPE),
        weights_covariance=a @ a.mT,
        feature_names=names,
        outcome=outcome,
    )


def _same(a, b):
    assert len(a) == len(b)
    for name in ("x", "z", "prediction_mean", "prediction_std", "latent_std", "weights_mean", "weights_covariance"):
        assert torch.equal(getattr(a, name), getattr(b, name)), name


def test_integer_indices_of_every_kind_and_out_of_range():
    expl = _explanation()
    for index, expected in [
        (np.int64(1), 1),
        (np.int32(-1), 3),
        (torch.tensor(2), 2),
        (torch.tensor(-4), 0),
        (-2, 2),
    ]:
        sub = expl[index]
        assert len(sub) == 1 and sub.weights_mean.shape == (1, 2)
        _same(sub, expl[expected : expected + 1])
    for bad in (4, 7, -5, np.int64(9), torch.tensor(4)):
        with pytest.raises(IndexError, match="out of range"):
            expl[bad]
    with pytest.raises(IndexError):
        expl.summary(7)
    with pytest.raises(TypeError):
        expl[1.0]
    _same(expl[np.array([0, 2])], expl[torch.tensor([0, 2])])
    _same(expl[[True, False, True, False]], expl[[0, 2]])
    with pytest.raises(IndexError, match="out of range"):
        expl[[0, 9]]
    assert expl.summary(np.int64(-1)) == expl.summary(3)


def test_feature_names_must_match_the_features():
    with pytest.raises(ValueError, match="1 names but the explanation has d = 2"):
        _explanation(names=["only one"])
    with pytest.raises(ValueError, match="3 names"):
        _explanation(names=["a", "b", "c"])
    with pytest.raises(TypeError, match="single string"):
        _explanation(names="ab")
    assert _explanation().feature_names == ["z0", "z1"]


def test_default_names_are_x_when_z_is_x():
    x = torch.randn(20, 2, dtype=DTYPE)
    expl = GPXModel(x, x[:, 0] - x[:, 1]).eval().explain(x[:2])
    assert expl.feature_names == ["x0", "x1"]


def test_regression_summary_and_plot_label_latent_and_predictive_std():
    expl = _explanation()
    text = expl.summary(1).splitlines()
    latent = expl.contributions_mean[1].sum().item()
    assert text[0].startswith("latent f = sum of contributions") and f"{latent:+.4f}" in text[0]
    assert f"± {expl.latent_std[1].item():.4f} (± 1 std, latent" in text[0]
    assert f"± {expl.prediction_std[1].item():.4f} (± 1 std, predictive" in text[1]
    ax = expl.plot(1)
    title = ax.get_title()
    # the title's ± next to the bars is the latent std (what the bars sum to), labelled; the predictive one too
    assert f"± {expl.latent_std[1].item():.3f} (±1 std, latent)" in title
    assert f"± {expl.prediction_std[1].item():.3f} (±1 std, predictive)" in title
    assert "±1 posterior std" in ax.get_xlabel()
    # the error bars are the contributions' 1 std
    segments = ax.collections[0].get_segments()
    half_widths = sorted(float(abs(s[1, 0] - s[0, 0]) / 2) for s in segments)
    np.testing.assert_allclose(half_widths, sorted(expl.contributions_std[1].numpy()), rtol=1e-12)


def test_classification_summary_does_not_put_a_probability_next_to_the_latent_sum():
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(60, 2, generator=gen, dtype=DTYPE)
    y = (x[:, 0] > 0).to(DTYPE)
    model = VariationalGPXModel(x[:8], likelihood=BernoulliLikelihood()).fit(x, y, num_epochs=3, lr=0.05)
    expl = model.explain(x[:3])
    assert expl.outcome == "probability" and expl.feature_names == ["x0", "x1"]
    lines = expl.summary(0).splitlines()
    assert lines[0].startswith("latent f (probit scale) = sum of contributions")
    assert f"{expl.contributions_mean[0].sum().item():+.4f}" in lines[0]
    assert lines[1].startswith(f"P(y=1) = {expl.prediction_mean[0].item():.4f}") and "±" not in lines[1]
    # the probability is the predictive one: Φ(μ / sqrt(1 + σ²)) of the latent
    latent = model(x[:3])
    p = torch.special.ndtr(latent.mean / (1 + latent.variance).sqrt())
    torch.testing.assert_close(expl.prediction_mean, p.detach(), rtol=1e-10, atol=1e-12)
    assert "P(y=1)" in expl.plot(0).get_title()
