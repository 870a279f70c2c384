"""Input hygiene of :class:`VariationalGPXModel`: Bernoulli labels, empty data, unsupported likelihoods and dtypes,
the weight-noise floor (float32 warm start) and the progress bar (issue 13)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from gpytorch.likelihoods import BernoulliLikelihood, GaussianLikelihood, SoftmaxLikelihood
from torch.distributions import Bernoulli

from gpytorch_explain.models.variational_gpx import (
    WEIGHT_NOISE_FLOOR,
    GPXVariationalELBO,
    VariationalGPXModel,
    bernoulli_label_signs,
    gpx_expected_log_prob,
)

DTYPE = torch.float64


def _data(n=40, seed=0, dtype=DTYPE):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 2, generator=gen, dtype=dtype)
    return x, (x[:, 0] - x[:, 1] > 0).to(dtype)


# ----------------------------------------------------------------------------- Bernoulli labels
def test_label_signs_accept_both_schemes_and_reject_others():
    assert torch.equal(bernoulli_label_signs(torch.tensor([0.0, 1.0])), torch.tensor([-1.0, 1.0]))
    assert torch.equal(bernoulli_label_signs(torch.tensor([-1.0, 1.0])), torch.tensor([-1.0, 1.0]))
    with pytest.raises(ValueError, match=r"\{0, 1\} or all in \{-1, \+1\}.*\[1.0, 2.0\]"):
        bernoulli_label_signs(torch.tensor([1.0, 2.0, 2.0]))
    with pytest.raises(ValueError, match="0 and -1 are mixed"):
        bernoulli_label_signs(torch.tensor([-1.0, 0.0, 1.0]))
    with pytest.raises(ValueError, match="NaN"):
        bernoulli_label_signs(torch.tensor([0.0, float("nan")]))


def test_expected_log_prob_rejects_a_zero_in_pm1_labels():
    lik = BernoulliLikelihood()
    mu = torch.tensor([0.3, -0.2, 0.5], dtype=DTYPE)
    v = torch.full_like(mu, 0.2)
    s = torch.full_like(mu, 0.1)
    with pytest.raises(ValueError, match="mixed"):
        gpx_expected_log_prob(lik, torch.tensor([-1.0, 0.0, 1.0], dtype=DTYPE), mu, v, s)
    with pytest.raises(ValueError, match=r"\[1.0, 2.0\]"):
        gpx_expected_log_prob(lik, torch.tensor([1.0, 2.0, 1.0], dtype=DTYPE), mu, v, s)
    a = gpx_expected_log_prob(lik, torch.tensor([0.0, 1.0, 1.0], dtype=DTYPE), mu, v, s)
    b = gpx_expected_log_prob(lik, torch.tensor([-1.0, 1.0, 1.0], dtype=DTYPE), mu, v, s)
    assert torch.equal(a, b)


class LogitBernoulli(BernoulliLikelihood):
    def forward(self, function_samples, *args, **kwargs):
        return Bernoulli(logits=function_samples)


@pytest.mark.parametrize("labels", [[0.0, 1.0, 0.0], [-1.0, 1.0, -1.0]])
def test_expected_log_prob_of_a_logit_subclass_is_its_own(labels):
    """A Bernoulli subclass with a logistic link must not get the probit closed form (dense quadrature reference)."""
    mu = torch.tensor([0.3, -1.2, 0.5], dtype=DTYPE)
    v = torch.tensor([0.2, 0.5, 0.05], dtype=DTYPE)
    s = torch.tensor([0.1, 0.3, 0.2], dtype=DTYPE)
    y = torch.tensor(labels, dtype=DTYPE)
    got = gpx_expected_log_prob(LogitBernoulli(), y, mu, v, s, num_locs=40)
    # reference: E_{h~N(mu,v)} log E_{e~N(0,s)} sigmoid(sign (h + e)), trapezoid on fine grids
    sign = torch.where(y > 0, 1.0, -1.0).to(DTYPE)
    g = torch.linspace(-9, 9, 3001, dtype=DTYPE)
    dens = torch.exp(-0.5 * g * g) / math.sqrt(2 * math.pi)
    ref = []
    for i in range(3):
        h = mu[i] + v[i].sqrt() * g  # (G,)
        f = h[:, None] + s[i].sqrt() * g[None, :]
        inner = torch.trapezoid(torch.sigmoid(sign[i] * f) * dens, g, dim=-1)
        ref.append(torch.trapezoid(inner.log() * dens, g))
    assert torch.allclose(got, torch.stack(ref), atol=1e-8, rtol=0)


def test_fit_rejects_bad_labels_and_mixed_schemes():
    x, y = _data()
    model = VariationalGPXModel(x[:6], likelihood=BernoulliLikelihood())
    with pytest.raises(ValueError, match=r"\[1.0, 2.0\]"):
        model.fit(x, y + 1, num_epochs=1)
    batches = [(x[:20], y[:20]), (x[20:], 2 * y[20:] - 1)]
    with pytest.raises(ValueError, match="mix two schemes"):
        VariationalGPXModel(x[:6], likelihood=BernoulliLikelihood()).fit(batches, num_data=40, num_epochs=1)


@pytest.mark.parametrize("objective", ["gpx", "elbo"])
def test_fit_with_01_and_pm1_labels_is_identical(objective):
    x, y = _data()
    fits = []
    for labels in (y, 2 * y - 1):
        torch.manual_seed(0)
        model = VariationalGPXModel(x[:6], likelihood=BernoulliLikelihood())
        model.fit(x, labels, num_epochs=3, batch_size=20, shuffle=False, lr=0.05, objective=objective)
        fits.append((model.fit_history, model(x).mean.detach()))
    assert np.allclose(fits[0][0], fits[1][0], rtol=1e-12, atol=0)
    assert torch.allclose(fits[0][1], fits[1][1], rtol=1e-10, atol=1e-12)
    # and the ELBO itself does not depend on the scheme
    elbo = GPXVariationalELBO(model.likelihood, model, num_data=40)
    model.train()
    assert torch.allclose(elbo(model(x), y), elbo(model(x), 2 * y - 1), rtol=1e-13)


# ----------------------------------------------------------------------------- empty data, likelihoods, dtypes
def test_empty_data_and_zero_row_batches_raise():
    x, y = _data()
    empty = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x[:0], y[:0]), batch_size=4)
    with pytest.raises(ValueError, match="no batches"):
        VariationalGPXModel(x[:4]).fit(empty, num_data=10, num_epochs=1)
    with pytest.raises(ValueError, match="no rows"):
        VariationalGPXModel(x[:4]).fit(x[:0], y[:0], num_epochs=1)
    with pytest.raises(ValueError, match="Batch 1 .* zero rows"):
        VariationalGPXModel(x[:4]).fit([(x[:3], y[:3]), (x[:0], y[:0])], num_data=10, num_epochs=1)


def test_softmax_and_half_precision_raise_clearly():
    x, _ = _data()
    with pytest.raises(TypeError, match="SoftmaxLikelihood.*not supported.*BernoulliLikelihood"):
        VariationalGPXModel(x[:4], likelihood=SoftmaxLikelihood(num_classes=3, mixing_weights=False))
    for dtype in (torch.float16, torch.bfloat16):
        with pytest.raises(TypeError, match=rf"{str(dtype).split('.')[-1]}.*(float32 and float64 only|use float64)"):
            VariationalGPXModel(x[:4].to(dtype))


# ----------------------------------------------------------------------------- weight noise
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_weight_noise_never_underflows_and_warm_start_accepts_the_fitted_value(dtype):
    x, _ = _data(dtype=dtype)
    fitted = VariationalGPXModel(x[:4])
    with torch.no_grad():
        fitted.covar_module.raw_weight_noise.fill_(-1179.5)  # the raw value reported in issue 13
    assert fitted.weight_noise.item() > 0
    assert fitted.weight_noise.item() == pytest.approx(WEIGHT_NOISE_FLOOR, rel=1e-5)
    model = VariationalGPXModel(x[:4])
    model.weight_noise = fitted.weight_noise.detach()  # the README's warm-start recipe
    assert torch.isfinite(model.covar_module.raw_weight_noise).all()
    assert model.weight_noise.item() == pytest.approx(WEIGHT_NOISE_FLOOR, rel=1e-5)
    model.weight_noise = 0.0  # an exact zero from an unfloored model is raised to the floor
    assert model.weight_noise.item() > 0
    model.weight_noise = 0.25
    assert model.weight_noise.item() == pytest.approx(0.25, rel=1e-6)
    with pytest.raises(ValueError, match="non-negative"):
        model.weight_noise = -1.0


# ----------------------------------------------------------------------------- progress bar
def test_progress_bar_counts_its_total(capsys):
    x, y = _data()
    VariationalGPXModel(x[:4], likelihood=GaussianLikelihood().double()).fit(
        x, y, num_epochs=3, batch_size=15, progress=True
    )
    err = capsys.readouterr().err
    assert "3/3" in err and "4/3" not in err
