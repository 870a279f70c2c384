"""Exact GPX predictions at test inputs equal to (or containing) the training inputs (issue 13, issue 16 item 3).

GPyTorch's ``ExactGP`` slices the lazy joint train+test covariance before evaluating it, so its test/train block is
the kernel at ``(X_test, X_train)``; with ``X_test == X_train`` a GPX kernel sees equal inputs (its joint
covariance, with :math:`\\sigma_w^2\\|\\mathbf z_i\\|^2` on the diagonal), and ``GPXPredictionStrategy`` must remove
that diagonal. References are the dense GP formulas in float64:
:math:`\\mathbb E[f_*] = \\mathbf k_*^\\top\\mathbf C^{-1}\\mathbf y` with :math:`\\mathbf k_*` *without*
:math:`\\sigma_w^2`, and :math:`\\operatorname{Cov}[f_*] = (\\mathbf K_{**} + \\sigma_w^2\\mathbf I)\\odot
\\mathbf Z_*\\mathbf Z_*^\\top - \\mathbf k_*^\\top\\mathbf C^{-1}\\mathbf k_*`.
"""

import warnings

import gpytorch
import pytest
import torch
from gpytorch.kernels import AdditiveKernel, ProductKernel, RBFKernel, ScaleKernel

from gpytorch_explain import GPXKernel, GPXModel, GPXPredictionStrategy
from gpytorch_explain import settings as explain_settings
from gpytorch_explain.kernels import gpx_kernel as gpx_kernel_module
from tests.helpers import generator

DT = torch.float64
TOL = {"rtol": 1e-8, "atol": 1e-10}
N, D, d = 25, 2, 3
OUTPUTSCALE, LENGTHSCALE, WN, NOISE = 1.3, 0.8, 0.2, 0.05


def _rbf(x1, x2):
    return OUTPUTSCALE * torch.exp(-0.5 * torch.cdist(x1, x2).pow(2) / LENGTHSCALE**2)


def _base():
    base = ScaleKernel(RBFKernel()).to(DT)
    base.outputscale = torch.tensor(OUTPUTSCALE, dtype=DT)
    base.base_kernel.lengthscale = torch.tensor(LENGTHSCALE, dtype=DT)
    return base


def _data(separate_z):
    x = torch.randn(N, D, dtype=DT, generator=generator(0))
    z = torch.randn(N, d, dtype=DT, generator=generator(1)) if separate_z else x
    y = (torch.sin(x).sum(-1, keepdim=True) * z).sum(-1) + 0.1 * torch.randn(N, dtype=DT, generator=generator(2))
    return x, z, y


def _likelihood():
    lik = gpytorch.likelihoods.GaussianLikelihood().to(DT)
    lik.noise = torch.tensor(NOISE, dtype=DT)
    return lik


def _gpx_model(separate_z):
    x, z, y = _data(separate_z)
    model = GPXModel(x, y, z if separate_z else None, likelihood=_likelihood(), base_kernel=_base())
    model.weight_noise = torch.tensor(WN, dtype=DT)
    return model.eval(), x, z, y


class _HandBuilt(gpytorch.models.ExactGP):
    """The GPyTorch tutorial model with a GPX covariance."""

    def __init__(self, inputs, y, covar_module):
        super().__init__(inputs, y, _likelihood())
        self.mean_module = gpytorch.means.ZeroMean()
        self.covar_module = covar_module

    def forward(self, inputs):
        return gpytorch.distributions.MultivariateNormal(self.mean_module(inputs), self.covar_module(inputs))


def _gpx_kernel(separate_z):
    kernel = GPXKernel(_base(), x_dims=D, z_dims=d if separate_z else None).to(DT)
    kernel.weight_noise = torch.tensor(WN, dtype=DT)
    return kernel


def _brute(x, z, y, xs, zs, scale=1.0):
    """Dense GPX posterior of f* (scale: an outer ScaleKernel's output scale on the whole GPX covariance)."""
    eye = torch.eye(N, dtype=DT)
    c = scale * (_rbf(x, x) + WN * eye) * (z @ z.T) + NOISE * eye
    k_star = scale * _rbf(xs, x) * (zs @ z.T)  # no σw²: test and training points are different samples
    prior = scale * (_rbf(xs, xs) + WN * torch.eye(len(xs), dtype=DT)) * (zs @ zs.T)
    mean = k_star @ torch.linalg.solve(c, y)
    return mean, prior - k_star @ torch.linalg.solve(c, k_star.T)


def _test_sets(x, z):
    fresh = torch.randn(4, D, dtype=DT, generator=generator(3))
    fresh_z = torch.randn(4, d, dtype=DT, generator=generator(4)) if z is not x else fresh
    return {
        "train": (x, z),
        "train_copy": (x.clone(), z.clone()),
        "duplicates": (torch.cat([x[:3], fresh, x[:3]]), torch.cat([z[:3], fresh_z, z[:3]])),
        "fresh": (fresh, fresh_z),
        "permuted": (x.flip(0), z.flip(0)),
    }


@pytest.mark.filterwarnings("ignore:The input matches the stored training data")
@pytest.mark.parametrize("separate_z", [True, False])
@pytest.mark.parametrize("cholesky", [True, False])
def test_gpx_model_predictions_match_brute_force(separate_z, cholesky):
    model, x, z, y = _gpx_model(separate_z)
    limit = 10_000 if cholesky else 0  # the dense Cholesky path, or GPyTorch's CG path (tight tolerance)
    tol = TOL if cholesky else {"rtol": 1e-5, "atol": 1e-6}
    for name, (xs, zs) in _test_sets(x, z).items():
        model.prediction_strategy = None
        with gpytorch.settings.max_cholesky_size(limit), gpytorch.settings.cg_tolerance(1e-10), torch.no_grad():
            out = model(xs, zs) if separate_z else model(xs)
        mean, cov = _brute(x, z, y, xs, zs)
        torch.testing.assert_close(out.mean, mean, **tol, msg=lambda m, name=name: f"{name}: {m}")
        torch.testing.assert_close(out.covariance_matrix, cov, **tol, msg=lambda m, name=name: f"{name}: {m}")
    assert isinstance(model.prediction_strategy, GPXPredictionStrategy)


@pytest.mark.parametrize("separate_z", [True, False])
def test_gpx_model_weights_at_the_training_inputs(separate_z):
    r""":math:`\mathbb E[\mathbf w_*] = \mathbf B^\top\mathbf C^{-1}\mathbf y`, :math:`\operatorname{Cov}[\mathbf w_*]
    = (\mathbf K_{**} + \sigma_w^2\mathbf I)\otimes\mathbf I_d - \mathbf B^\top\mathbf C^{-1}\mathbf B` at
    :math:`\mathbf x_* = \mathbf X`."""
    model, x, z, y = _gpx_model(separate_z)
    dz = z.size(-1)
    eye = torch.eye(N, dtype=DT)
    c = (_rbf(x, x) + WN * eye) * (z @ z.T) + NOISE * eye
    b = (_rbf(x, x).T.unsqueeze(-1) * z.unsqueeze(1)).reshape(N, N * dz)  # B[i, (p, l)] = k(x*_p, x_i) z_il
    mean = (b.T @ torch.linalg.solve(c, y)).reshape(N, dz)
    cov = torch.kron(_rbf(x, x) + WN * eye, torch.eye(dz, dtype=DT)) - b.T @ torch.linalg.solve(c, b)
    with torch.no_grad():
        post = model.predict_weights(x)
    torch.testing.assert_close(post.mean, mean, **TOL)
    torch.testing.assert_close(post.covariance_matrix, cov, **TOL)


@pytest.mark.filterwarnings("ignore:The input matches the stored training data")
@pytest.mark.parametrize("wrap", ["none", "scale"])
@pytest.mark.parametrize("separate_z", [True, False])
def test_hand_built_exact_gp_predictions_match_brute_force(wrap, separate_z):
    """A user's ``ExactGP`` with ``covar_module = GPXKernel(...)`` (or ``ScaleKernel(GPXKernel(...))``): GPyTorch
    picks ``GPXPredictionStrategy`` through ``Kernel.prediction_strategy``."""
    x, z, y = _data(separate_z)
    kernel = _gpx_kernel(separate_z)
    scale = 1.0
    if wrap == "scale":
        kernel = ScaleKernel(kernel).to(DT)
        scale = 1.7
        kernel.outputscale = torch.tensor(scale, dtype=DT)
    inputs = torch.cat([x, z], -1) if separate_z else x
    model = _HandBuilt(inputs, y, kernel).eval()
    for name, test_inputs, xs, zs in _hand_built_inputs(model, x, z, separate_z):
        with torch.no_grad():
            out = model(test_inputs)
        mean, cov = _brute(x, z, y, xs, zs, scale)
        torch.testing.assert_close(out.mean, mean, **TOL, msg=lambda m, name=name: f"{name}: {m}")
        torch.testing.assert_close(out.covariance_matrix, cov, **TOL, msg=lambda m, name=name: f"{name}: {m}")
    assert isinstance(model.prediction_strategy, GPXPredictionStrategy)


GPX_SCALE, OTHER_SCALE, OTHER_LENGTHSCALE = 1.7, 0.4, 1.1


def _k_other(a, b):
    """The other summand / factor, ScaleKernel(RBF) on the x columns, written out."""
    return OTHER_SCALE * torch.exp(-0.5 * torch.cdist(a, b).pow(2) / OTHER_LENGTHSCALE**2)


def _composite(kind, separate_z):
    """``ScaleKernel(GPXKernel) + ScaleKernel(RBF)`` or ``GPXKernel * ScaleKernel(RBF)``; the RBF reads the x
    columns through its own active_dims (the GPX kernel has none)."""
    other = ScaleKernel(RBFKernel(active_dims=list(range(D)))).to(DT)
    other.outputscale = torch.tensor(OTHER_SCALE, dtype=DT)
    other.base_kernel.lengthscale = torch.tensor(OTHER_LENGTHSCALE, dtype=DT)
    if kind == "additive":
        gpx = ScaleKernel(_gpx_kernel(separate_z)).to(DT)
        gpx.outputscale = torch.tensor(GPX_SCALE, dtype=DT)
        return AdditiveKernel(gpx, other)
    return ProductKernel(_gpx_kernel(separate_z), other)


def _brute_composite(kind, x, z, y, xs, zs):
    """Dense posterior of f* for :func:`_composite`: the GPX sample diagonal σw²‖z_i‖² (times the GPX output scale,
    or times the other factor's k(x_i, x_i)) only on the train/train and test/test blocks, never on test/train."""

    def cov(a, za, b, zb, same):
        gpx = _rbf(a, b) * (za @ zb.T)
        if same:
            gpx = gpx + torch.diag(WN * za.pow(2).sum(-1))
        if kind == "additive":
            return GPX_SCALE * gpx + _k_other(a, b)
        return gpx * _k_other(a, b)

    c = cov(x, z, x, z, True) + NOISE * torch.eye(N, dtype=DT)
    k_star = cov(xs, zs, x, z, False)
    mean = k_star @ torch.linalg.solve(c, y)
    return mean, cov(xs, zs, xs, zs, True) - k_star @ torch.linalg.solve(c, k_star.T)


def _hand_built_inputs(model, x, z, separate_z):
    """(name, test inputs, x*, z*): the test sets of :func:`_test_sets`, plus the model's training tensor itself."""
    cases = [("train_tensor", model.train_inputs[0], x, z)]
    for name, (xs, zs) in _test_sets(x, z).items():
        cases.append((name, torch.cat([xs, zs], -1) if separate_z else xs, xs, zs))
    return cases


@pytest.mark.filterwarnings("ignore:The input matches the stored training data")
@pytest.mark.parametrize("lazy", [True, False])
@pytest.mark.parametrize("separate_z", [True, False])
@pytest.mark.parametrize("kind", ["additive", "product"])
def test_composite_kernel_predictions_match_brute_force(kind, separate_z, lazy):
    """A GPX kernel inside ``AdditiveKernel``/``ProductKernel``: GPyTorch's default prediction strategy, whose
    test/train block is the kernel at two row ranges of the joint inputs, a cross-covariance even at test inputs
    equal to the training inputs (the training tensor itself, a copy, duplicated rows). Lazily evaluated kernels (the
    default) and eager ones (the joint operator sliced by sample index) alike."""
    x, z, y = _data(separate_z)
    model = _HandBuilt(torch.cat([x, z], -1) if separate_z else x, y, _composite(kind, separate_z)).eval()
    for name, inputs, xs, zs in _hand_built_inputs(model, x, z, separate_z):
        with gpytorch.settings.lazily_evaluate_kernels(lazy), torch.no_grad():
            out = model(inputs)
        mean, cov = _brute_composite(kind, x, z, y, xs, zs)
        torch.testing.assert_close(out.mean, mean, **TOL, msg=lambda m, name=name: f"{name}: {m}")
        torch.testing.assert_close(out.covariance_matrix, cov, **TOL, msg=lambda m, name=name: f"{name}: {m}")
    assert not isinstance(model.prediction_strategy, GPXPredictionStrategy)  # GPyTorch's default strategy


@pytest.mark.filterwarnings("ignore:The input matches the stored training data")
@pytest.mark.parametrize("kind", ["additive", "product"])
def test_composite_kernel_test_needs_the_rule(kind, monkeypatch):
    """The test above is not vacuous: with "rows of one tensor at different positions are different samples"
    switched off (value equality only), the prediction at the training inputs carries σw² in its test/train block
    and misses the brute force by far more than the tolerance."""
    monkeypatch.setattr(gpx_kernel_module, "_different_rows_of_one_buffer", lambda x1, x2: False)
    x, z, y = _data(True)
    model = _HandBuilt(torch.cat([x, z], -1), y, _composite(kind, True)).eval()
    with torch.no_grad():
        out = model(model.train_inputs[0])
    mean, _ = _brute_composite(kind, x, z, y, x, z)
    assert (out.mean - mean).abs().max() > 1e-2


@pytest.mark.filterwarnings("ignore:The input matches the stored training data")
@pytest.mark.parametrize("kind", ["additive", "product"])
def test_composite_kernel_with_gpx_active_dims_needs_eager_kernels(kind):
    """The case the rule cannot cover (GPXKernel docstring): inside a composite, a GPX kernel with its own
    ``active_dims`` (product), or under a ScaleKernel with ``active_dims`` (additive; ``ScaleKernel.forward`` calls
    its base kernel's ``forward``, so the selection is the wrapper's), gets ``index_select`` copies of the test and
    training rows. ``lazily_evaluate_kernels(False)``, the documented workaround, is right; the lazy default is not
    (if this starts to pass lazily, update the docstring)."""
    x, z, y = _data(True)
    kernel = _composite(kind, True)
    # a leading column nobody reads, so that every kernel selects its columns
    pad = torch.randn(N, 1, dtype=DT, generator=generator(9))
    kernel.kernels[0].active_dims = torch.arange(1, 1 + D + d)  # the ScaleKernel(GPXKernel), or the GPXKernel
    kernel.kernels[1].active_dims = torch.arange(1, 1 + D)  # (ScaleKernel copies its base's active_dims at creation)
    model = _HandBuilt(torch.cat([pad, x, z], -1), y, kernel).eval()
    mean, cov = _brute_composite(kind, x, z, y, x, z)
    # the GPX kernel's own active_dims (product case) make it warn, once, that it cannot tell the two apart
    own = kernel.kernels[0].active_dims is not None and isinstance(kernel.kernels[0], GPXKernel)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with gpytorch.settings.lazily_evaluate_kernels(False), torch.no_grad():
            out = model(model.train_inputs[0])
        torch.testing.assert_close(out.mean, mean, **TOL)
        torch.testing.assert_close(out.covariance_matrix, cov, **TOL)
        with torch.no_grad():
            lazy = model(model.train_inputs[0])
        assert (lazy.mean - mean).abs().max() > 1e-2
    hits = [w for w in caught if "got two equal inputs as separate copies" in str(w.message)]
    assert len(hits) == (1 if own else 0)


@pytest.mark.filterwarnings("ignore:The input matches the stored training data")
@pytest.mark.parametrize("correction", [True, False])
@pytest.mark.parametrize("limit", [10_000, 0])
def test_gpx_model_with_inducing_points_at_the_training_inputs(correction, limit):
    """SGPR base: the test/train block at equal inputs is a ``GPXInducingLinearOperator`` (Woodbury form) whose
    diagonal (σw²‖z‖², plus GPyTorch's SGPR correction (k_ii - q_ii)‖z_i‖² in eval mode) must go; the test/test
    block keeps both. limit 0 takes the inducing-space path (``model(x, z)`` from the weight posterior)."""
    x, z, y = _data(True)
    inducing = torch.randn(6, D, dtype=DT, generator=generator(8))
    base = gpytorch.kernels.InducingPointKernel(_base(), inducing.clone(), _likelihood())
    model = GPXModel(x, y, z, likelihood=_likelihood(), base_kernel=base)
    model.weight_noise = torch.tensor(WN, dtype=DT)
    model.eval()

    def q(a, b):
        return _rbf(a, inducing) @ torch.linalg.solve(_rbf(inducing, inducing), _rbf(inducing, b))

    eye = torch.eye(N, dtype=DT)
    c = (q(x, x) + WN * eye) * (z @ z.T) + NOISE * eye  # the training covariance never has the correction
    for xs, zs in _test_sets(x, z).values():
        k_star = q(xs, x) * (zs @ z.T)
        prior = (q(xs, xs) + WN * torch.eye(len(xs), dtype=DT)) * (zs @ zs.T)
        if correction:
            prior = prior + torch.diag((_rbf(xs, xs).diagonal() - q(xs, xs).diagonal()) * zs.pow(2).sum(-1))
        mean = k_star @ torch.linalg.solve(c, y)
        cov = prior - k_star @ torch.linalg.solve(c, k_star.T)
        model.prediction_strategy = None
        with (
            gpytorch.settings.sgpr_diagonal_correction(correction),
            gpytorch.settings.max_cholesky_size(limit),
            explain_settings.max_cholesky_size(limit),
            torch.no_grad(),
        ):
            out = model(xs, zs)
            torch.testing.assert_close(out.mean, mean, **TOL)
            torch.testing.assert_close(out.covariance_matrix, cov, **TOL)
