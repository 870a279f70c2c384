"""GPXModel as a BoTorch model: posterior() against the model's own predictive, and a short BO loop."""

import gpytorch
import linear_operator
import pytest
import torch

from gpytorch_explain import GPXModel

DTYPE = torch.float64


@pytest.fixture(scope="module", autouse=True)
def _keep_gpytorch_defaults():
    """Importing BoTorch changes GPyTorch's global defaults; restore them for the other test modules."""
    lo, gp = linear_operator.settings, gpytorch.settings
    saved = [
        (lo.max_cholesky_size, "_global_value"),
        (lo.cholesky_max_tries, "_global_value"),
        (gp.max_eager_kernel_size, "_global_value"),
        (lo._fast_covar_root_decomposition, "_default"),
        (lo._fast_log_prob, "_default"),
        (lo._fast_solves, "_default"),
    ]
    values = [getattr(obj, attr) for obj, attr in saved]
    import botorch  # noqa: F401

    yield
    for (obj, attr), value in zip(saved, values, strict=True):
        setattr(obj, attr, value)


def _branin01(x: torch.Tensor) -> torch.Tensor:
    """A smooth toy objective on [0, 1]^2 (negated Branin, to be maximised)."""
    x1, x2 = 15 * x[..., 0] - 5, 15 * x[..., 1]
    quad = (x2 - 5.1 / (4 * torch.pi**2) * x1**2 + 5 / torch.pi * x1 - 6) ** 2
    return -(quad + 10 * (1 - 1 / (8 * torch.pi)) * torch.cos(x1) + 10)


def test_posterior_matches_the_models_predictive():
    from botorch.posteriors import GPyTorchPosterior

    g = torch.Generator().manual_seed(0)
    x = torch.rand(25, 2, generator=g, dtype=DTYPE)
    y = _branin01(x)
    model = GPXModel(x, y, standardize_x=True, standardize_y=True).fit(max_iter=20)
    assert model.num_outputs == 1 and model.batch_shape == torch.Size([])
    X = torch.rand(4, 3, 2, generator=g, dtype=DTYPE)
    post = model.posterior(X)
    assert isinstance(post, GPyTorchPosterior)
    assert post.mean.shape == (4, 3, 1) and post.variance.shape == (4, 3, 1)
    for b in range(4):
        ref = model(X[b])
        assert torch.allclose(post.mean[b, :, 0], ref.mean, atol=1e-8)
        assert torch.allclose(post.distribution.covariance_matrix[b], ref.covariance_matrix, atol=1e-8)
        # raw units: the same numbers as the explanation's predictions (standardisation undone)
        expl = model.explain(X[b])
        assert torch.allclose(post.mean[b, :, 0], expl.prediction_mean, atol=1e-8)
    # outcome standardisation is undone: at the training points the posterior mean is y in its own units
    at_train = model.posterior(x.unsqueeze(-2)).mean.squeeze(-1).squeeze(-1)
    assert y.std() > 20 and (at_train - y).abs().max() < 0.05 * y.std()
    noisy = model.posterior(X, observation_noise=True)
    assert torch.allclose(noisy.variance - post.variance, model.likelihood.noise.expand(4, 3, 1), atol=1e-10)
    q1 = model.posterior(X[:, :1])
    assert torch.allclose(q1.variance[:, 0, 0], post.variance[:, 0, 0], atol=1e-8)
    with pytest.raises(ValueError, match="one output"):
        model.posterior(X, output_indices=[1])


def test_posterior_with_separate_features_and_z_from_x():
    g = torch.Generator().manual_seed(1)
    x = torch.rand(20, 2, generator=g, dtype=DTYPE)
    z = torch.cat([x, torch.ones(20, 1, dtype=DTYPE)], dim=-1)
    model = GPXModel(x, x.sum(-1), z).fit(max_iter=10)
    X = torch.rand(3, 2, 2, generator=g, dtype=DTYPE)
    joined = torch.cat([X, X, torch.ones(3, 2, 1, dtype=DTYPE)], dim=-1)  # rows [x | z]
    ref = model.posterior(joined).mean
    model.z_from_x = lambda t: torch.cat([t, torch.ones(t.size(0), 1, dtype=t.dtype)], dim=-1)
    assert torch.allclose(model.posterior(X).mean, ref)


def test_short_bayesian_optimisation_loop_with_qlogei():
    from botorch.acquisition.logei import qLogExpectedImprovement
    from botorch.optim import optimize_acqf

    torch.manual_seed(0)
    bounds = torch.tensor([[0.0, 0.0], [1.0, 1.0]], dtype=DTYPE)
    x = torch.rand(8, 2, dtype=DTYPE)
    y = _branin01(x)
    first_best = y.max().item()
    for _ in range(3):
        model = GPXModel(x, y, standardize_x=True, standardize_y=True).fit(max_iter=20)
        acq = qLogExpectedImprovement(model, best_f=y.max())
        candidate, value = optimize_acqf(acq, bounds=bounds, q=2, num_restarts=2, raw_samples=32)
        assert candidate.shape == (2, 2) and torch.isfinite(value)
        assert ((candidate >= 0) & (candidate <= 1)).all()
        x = torch.cat([x, candidate])
        y = torch.cat([y, _branin01(candidate)])
    assert len(y) == 14
    assert y.max().item() >= first_best  # the loop keeps the best point (and usually improves it)
    # the acquisition is differentiable in X through GPX's posterior
    X = torch.rand(3, 2, 2, dtype=DTYPE, requires_grad=True)
    acq(X).sum().backward()
    assert X.grad is not None and torch.isfinite(X.grad).all() and X.grad.abs().sum() > 0
