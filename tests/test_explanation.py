"""GPXExplanation, fit() and the demo, end to end on small data."""

import matplotlib

matplotlib.use("Agg")

import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from gpytorch_explain import GPXExplanation, GPXModel  # noqa: E402


@pytest.fixture(scope="module")
def fitted():
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(40, 3, generator=gen, dtype=torch.float64)
    z = torch.randn(40, 2, generator=gen, dtype=torch.float64)
    y = torch.sin(x[:, 0]) * z[:, 0] + x[:, 1] * z[:, 1] + 0.05 * torch.randn(40, generator=gen, dtype=torch.float64)
    model = GPXModel(x, y, z, feature_names=["a", "b"]).fit(max_iter=30)
    xs = torch.randn(4, 3, generator=gen, dtype=torch.float64)
    zs = torch.randn(4, 2, generator=gen, dtype=torch.float64)
    return model, xs, zs


def test_explanation_fields_consistent(fitted):
    model, xs, zs = fitted
    expl = model.explain(xs, zs)
    assert isinstance(expl, GPXExplanation) and len(expl) == 4
    weights = model.predict_weights(xs)
    torch.testing.assert_close(expl.weights_mean, weights.mean.detach(), rtol=0, atol=0)
    torch.testing.assert_close(expl.weights_std, weights.variance.detach().sqrt(), rtol=1e-12, atol=0)
    torch.testing.assert_close(expl.contributions_mean, weights.mean.detach() * zs)
    torch.testing.assert_close(expl.contributions_std, weights.variance.detach().sqrt() * zs.abs())
    # contributions add up to the latent mean; their covariance to the latent variance
    latent = model(xs, zs)
    torch.testing.assert_close(expl.contributions_mean.sum(-1), latent.mean.detach(), rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(
        expl.contributions_covariance.sum((-1, -2)), latent.variance.detach(), rtol=1e-8, atol=1e-12
    )
    # predictive std includes the observation noise, latent std does not
    torch.testing.assert_close(expl.prediction_std**2, expl.latent_std**2 + model.likelihood.noise.detach())


def test_explanation_numpy_summary_and_indexing(fitted):
    model, xs, zs = fitted
    expl = model.explain(xs, zs)
    arrays = expl.to_numpy()
    assert arrays["weights_covariance"].shape == (4, 2, 2) and isinstance(arrays["weights_mean"], np.ndarray)
    assert arrays["feature_names"] == ["a", "b"]
    text = expl.summary(1)
    assert "a" in text and "b" in text and "±" not in text.splitlines()[2]
    sub = expl[1]
    assert len(sub) == 1
    torch.testing.assert_close(sub.weights_mean[0], expl.weights_mean[1])
    sub = expl[1:3]
    assert len(sub) == 2
    # the intercept, outcome and latent mean complete the dict: latent_mean = intercept + sum of contributions
    assert arrays["outcome"] == expl.outcome and arrays["latent_scale"] == expl.latent_scale
    np.testing.assert_allclose(
        arrays["latent_mean"], arrays["intercept"] + arrays["contributions_mean"].sum(-1), rtol=0, atol=1e-12
    )
    # a tuple is not (point, feature) indexing, and top_k counts features from 1
    with pytest.raises(TypeError, match="by points only"):
        expl[0, 1]
    for bad in (0, -1, 1.5):
        with pytest.raises(ValueError, match="top_k must be a positive integer"):
            expl.summary(0, top_k=bad)
    assert len(expl.summary(0, top_k=1).splitlines()) == 4


def test_explanation_plot(fitted, tmp_path):
    model, xs, zs = fitted
    expl = model.explain(xs, zs)
    ax = expl.plot(0)
    labels = [t.get_text() for t in ax.get_yticklabels()]
    assert sorted(labels) == ["a", "b"]
    bars = ax.patches
    heights = sorted(abs(b.get_width()) for b in bars)
    np.testing.assert_allclose(heights, sorted(expl.contributions_mean[0].abs().numpy()))
    ax.figure.savefig(tmp_path / "bars.png")
    assert (tmp_path / "bars.png").stat().st_size > 0
    ax = expl.plot(0, kind="weights", top_k=1)
    assert len(ax.patches) == 1
    with pytest.raises(ValueError, match="kind"):
        expl.plot(0, kind="nope")


def test_fit_adam_and_progress(capsys):
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(30, 2, generator=gen, dtype=torch.float64)
    y = x[:, 0] - 0.5 * x[:, 1]
    model = GPXModel(x, y)
    start = model.fit(optimizer="adam", max_iter=1).fit_history[0]
    model.fit(optimizer="adam", max_iter=40, lr=0.05, progress=True)
    assert len(model.fit_history) == 40 and model.fit_history[-1] < start
    assert not model.training
    with pytest.raises(ValueError, match="optimizer"):
        model.fit(optimizer="sgd")


def test_lbfgs_fit_improves_marginal_likelihood():
    gen = torch.Generator().manual_seed(2)
    x = torch.randn(50, 2, generator=gen, dtype=torch.float64)
    y = torch.sin(2 * x[:, 0]) * x[:, 0] + 0.05 * torch.randn(50, generator=gen, dtype=torch.float64)
    model = GPXModel(x, y).fit(max_iter=50)
    assert model.fit_history[-1] < model.fit_history[0] - 0.1
