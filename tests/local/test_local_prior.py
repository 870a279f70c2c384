"""The surrogate's lengthscale prior: its width is settable, validated, and a narrower one pulls harder."""

import math

import numpy as np
import pytest
import torch

from gpytorch_explain.local import LocalGPExplainer
from gpytorch_explain.local.surrogate import DEFAULT_PRIOR_SCALE, fit_surrogate, make_surrogate


def _log_ell_spread(prior_scale: float) -> float:
    """Fit on 20 points of a function where only feature 0 matters; distance of log ℓ from the prior centre."""
    g = torch.Generator().manual_seed(0)
    U = torch.rand(20, 4, generator=g, dtype=torch.float64) * 2 - 1
    y = torch.sin(3 * U[:, 0])
    y = (y - y.mean()) / y.std()
    model = make_surrogate(U, y, prior_scale=prior_scale)
    fit_surrogate(model, maxiter=200)
    prior = model.covar_module.lengthscale_prior
    assert math.isclose(float(prior.scale), prior_scale, rel_tol=1e-6)
    return float((model.covar_module.lengthscale.detach().log().reshape(-1) - prior.loc).abs().max())


def test_narrower_prior_keeps_lengthscales_closer_to_its_centre():
    assert _log_ell_spread(0.25) < _log_ell_spread(math.sqrt(3.0))


def test_default_and_bad_prior_scale():
    data = np.random.RandomState(0).randn(50, 3)
    ex = LocalGPExplainer(lambda X: X[:, 0], data, budget=12)
    assert ex.lengthscale_prior_scale == DEFAULT_PRIOR_SCALE
    for bad in (0.0, -1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="lengthscale_prior_scale"):
            LocalGPExplainer(lambda X: X[:, 0], data, budget=12, lengthscale_prior_scale=bad)
        with pytest.raises(ValueError, match="prior_scale"):
            make_surrogate(torch.zeros(3, 2, dtype=torch.float64), torch.zeros(3, dtype=torch.float64), prior_scale=bad)


def test_prior_scale_reaches_the_surrogate():
    data = np.random.RandomState(1).randn(80, 3)
    f = lambda X: X[:, 0] - 0.5 * X[:, 1]  # noqa: E731
    kw = dict(budget=12, raw_samples=16, n_initial=4, seed=0, acquisition="variance")
    a = LocalGPExplainer(f, data, lengthscale_prior_scale=0.3, **kw).explain(data[0])
    b = LocalGPExplainer(f, data, lengthscale_prior_scale=2.0, **kw).explain(data[0])
    assert a.x_samples.shape == b.x_samples.shape == (12, 3)
    assert not np.allclose(a.lengthscales, b.lengthscales)
