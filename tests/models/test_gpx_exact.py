"""Exactness of GPX (Yoshikawa & Iwata) in :class:`gpytorch_explain.GPXModel` against dense brute force.

Model: ``y_i = w_iᵀ z_i + ε_y``, ``w_i = g(x_i) + ε_w``, ``g_l ~ GP(0, k)`` independent (l = 1..d),
``ε_y ~ N(0, σy²)``, ``ε_w ~ N(0, σw² I_d)``.

Every reference quantity below is computed by an *independent* dense implementation: the kernel is
re-implemented from its formula, the weights of all training and test points are stacked into one
explicit ``(n+m)d``-dimensional Gaussian (column-major ``vec``: index ``l * N + i``), and everything
(marginal likelihood, latent and predictive distributions, joint weight posterior) follows from
linear maps of that vector and plain Gaussian conditioning with ``torch.linalg.solve``. The paper's
closed forms (eqs. 13, 14, 18, with the main-text prior ``L = K̄ + σw² I``; appendix B's version
drops σw² and is wrong when σw² > 0) are implemented literally as a second reference.

The package's weight covariance is interleaved: index ``point * d + feature``.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass

import gpytorch
import pytest
import torch
from gpytorch.kernels import MaternKernel, RBFKernel, ScaleKernel
from gpytorch.mlls import ExactMarginalLogLikelihood

import gpytorch_explain
from gpytorch_explain import GPXModel, WeightPosteriorLinearOperator

DTYPE = torch.float64
RTOL = 1e-8  # relative error allowed between the package and the dense brute force


# ============================================================================ brute force
def assert_close(actual, expected, rtol=RTOL, what=""):
    """max |actual - expected| <= rtol * max |expected| (relative error, normalised by the array's scale)."""
    actual = torch.as_tensor(actual).detach()
    expected = torch.as_tensor(expected).detach()
    assert actual.shape == expected.shape, f"{what}: shape {tuple(actual.shape)} != {tuple(expected.shape)}"
    scale = expected.abs().max().clamp_min(1e-300)
    err = (actual - expected).abs().max() / scale
    assert err <= rtol, f"{what}: relative error {err.item():.3e} > {rtol:.1e}"


def hyper(model):
    """The model's hyperparameters as (differentiable) tensors: k's outputscale and lengthscale(s), σw², σy²."""
    scale_kernel = model.base_kernel
    return {
        "kind": scale_kernel.base_kernel.__class__.__name__,
        "nu": getattr(scale_kernel.base_kernel, "nu", None),
        "outputscale": scale_kernel.outputscale.reshape(()),
        "lengthscale": scale_kernel.base_kernel.lengthscale.reshape(-1),  # (1,) or (D,) with ARD
        "sw2": model.weight_noise.reshape(()),
        "sy2": model.likelihood.noise.reshape(()),
    }


def brute_kernel(x1, x2, hp):
    """k(x1, x2) from its formula: outputscale * {RBF, Matern-ν} of the lengthscale-scaled distance."""
    diff = (x1.unsqueeze(-2) - x2.unsqueeze(-3)) / hp["lengthscale"]
    r2 = diff.pow(2).sum(-1)
    if hp["kind"] == "RBFKernel":
        base = torch.exp(-0.5 * r2)
    else:
        r = r2.clamp_min(1e-30).sqrt()  # clamp keeps the gradient at r = 0 finite (it is 0 there)
        if hp["nu"] == 2.5:
            base = (1 + math.sqrt(5) * r + 5.0 / 3.0 * r2) * torch.exp(-math.sqrt(5) * r)
        elif hp["nu"] == 1.5:
            base = (1 + math.sqrt(3) * r) * torch.exp(-math.sqrt(3) * r)
        else:
            raise NotImplementedError(hp["nu"])
    return hp["outputscale"] * base


def zbar(Z):
    """Z̄ = [diag(Z[:,0]), ..., diag(Z[:,d-1])], shape (n, nd): Z̄[i, l*n + i] = Z[i, l]."""
    n, d = Z.shape
    return torch.cat([torch.diag(Z[:, l]) for l in range(d)], dim=1)


def paper_L(K, sw2, d):
    """Prior covariance of vec(W) (column-major): L = blockdiag(K, ..., K) + σw² I_nd."""
    n = K.shape[0]
    return torch.block_diag(*([K] * d)) + sw2 * torch.eye(n * d, dtype=K.dtype)


def paper_C(hp, X, Z):
    """Eq. (13): C = σy² I_n + Z̄ L Z̄ᵀ."""
    Zb = zbar(Z)
    L = paper_L(brute_kernel(X, X, hp), hp["sw2"], Z.shape[1])
    return hp["sy2"] * torch.eye(X.shape[0], dtype=X.dtype) + Zb @ L @ Zb.T


def gaussian_logpdf(y, C):
    """log N(y | 0, C) with a plain solve and slogdet."""
    sign, logdet = torch.linalg.slogdet(C)
    assert sign > 0
    return -0.5 * (y @ torch.linalg.solve(C, y)) - 0.5 * logdet - 0.5 * y.numel() * math.log(2 * math.pi)


def paper_eq14(hp, X, Z, y, Xs, Zs):
    """Eq. (14) for several test points jointly: (mean, covariance) of y* (c** as the joint matrix)."""
    C = paper_C(hp, X, Z)
    cstar = brute_kernel(Xs, X, hp) * (Zs @ Z.T)  # (m, n): c*_{p,i} = k(x*_p, x_i) z*_pᵀ z_i
    m = Xs.shape[0]
    eye = torch.eye(m, dtype=X.dtype)
    css = hp["sy2"] * eye + (brute_kernel(Xs, Xs, hp) + hp["sw2"] * eye) * (Zs @ Zs.T)
    return cstar @ torch.linalg.solve(C, y), css - cstar @ torch.linalg.solve(C, cstar.T)


def paper_eq18(hp, X, Z, y, xs):
    """Eq. (18) for one test input x* (shape (D,)): mean (d,) and covariance (d, d) of w*, literally.

    A = k̄*ᵀ L⁻¹, S = L − L Z̄ᵀ C⁻¹ Z̄ L, mean = σy⁻² A S Z̄ᵀ y, cov = c̄** − A k̄* + A S Aᵀ.
    """
    n, d = Z.shape
    K = brute_kernel(X, X, hp)
    L = paper_L(K, hp["sw2"], d)
    Zb = zbar(Z)
    C = hp["sy2"] * torch.eye(n, dtype=X.dtype) + Zb @ L @ Zb.T
    S = L - L @ Zb.T @ torch.linalg.solve(C, Zb @ L)
    kx = brute_kernel(X, xs.unsqueeze(0), hp).reshape(n)  # (k(x_i, x*))_i
    kbar = torch.block_diag(*([kx.unsqueeze(1)] * d))  # (nd, d), block (l, l) = k(X, x*)
    A = torch.linalg.solve(L, kbar).T  # k̄*ᵀ L⁻¹ (L symmetric)
    cbar = (brute_kernel(xs.unsqueeze(0), xs.unsqueeze(0), hp).reshape(()) + hp["sw2"]) * torch.eye(d, dtype=X.dtype)
    mean = A @ S @ Zb.T @ y / hp["sy2"]
    cov = cbar - A @ kbar + A @ S @ A.T
    return mean, cov


def brute_joint(hp, X, Z, y, Xs, Zs):
    """Dense joint Gaussian over the weights of all n + m points, conditioned on y.

    vec(W_all) (index l * N + i, N = n + m) ~ N(0, blockdiag(K_all) + σw² I_Nd); then
    y = A_y vec(W) + ε_y, f* = A_f vec(W), w* = S_w vec(W) (interleaved: row p*d + l).
    Returns a dict with the training covariance C, the log marginal likelihood, the latent f* and
    predictive y* (mean, joint covariance) and the joint posterior of w* (mean (m, d), covariance (md, md)).
    """
    n, d = Z.shape
    m = Xs.shape[0]
    N = n + m
    Xa = torch.cat([X, Xs])
    P = paper_L(brute_kernel(Xa, Xa, hp), hp["sw2"], d)  # (Nd, Nd)

    feats = torch.arange(d)
    A_y = torch.zeros(n, N * d, dtype=X.dtype)
    rows = torch.arange(n).unsqueeze(1)
    A_y[rows, feats * N + rows] = Z
    A_f = torch.zeros(m, N * d, dtype=X.dtype)
    pts = torch.arange(m).unsqueeze(1)
    A_f[pts, feats * N + n + pts] = Zs
    S_w = torch.zeros(m * d, N * d, dtype=X.dtype)
    S_w[(pts * d + feats).reshape(-1), (feats * N + n + pts).reshape(-1)] = 1.0

    C = A_y @ P @ A_y.T + hp["sy2"] * torch.eye(n, dtype=X.dtype)
    Q = torch.cat([A_f, S_w])  # the quantities to predict, (m + md, Nd)
    cross = Q @ P @ A_y.T  # Cov(q, y)
    mean = cross @ torch.linalg.solve(C, y)
    cov = Q @ P @ Q.T - cross @ torch.linalg.solve(C, cross.T)
    f_cov = cov[:m, :m]
    return {
        "C": C,
        "lml": gaussian_logpdf(y, C),
        "f_mean": mean[:m],
        "f_cov": f_cov,
        "y_mean": mean[:m],
        "y_cov": f_cov + hp["sy2"] * torch.eye(m, dtype=X.dtype),
        "w_mean": mean[m:].reshape(m, d),
        "w_cov": cov[m:, m:],
    }


def z_block(Zs):
    """(m, md) matrix mapping interleaved w* to f*: row p has z*_p in columns p*d .. p*d + d - 1."""
    m, d = Zs.shape
    return torch.block_diag(*[Zs[p].unsqueeze(0) for p in range(m)])


# ============================================================================ problems
@dataclass(frozen=True)
class Case:
    name: str
    n: int
    D: int
    d: int | None  # None: z = x
    m: int
    kernel: str  # "rbf", "matern15", "matern25"
    ard: bool
    seed: int


CASES = [
    Case("rbf_sep_z", n=12, D=3, d=2, m=4, kernel="rbf", ard=False, seed=0),
    Case("rbf_ard_z_is_x", n=10, D=3, d=None, m=3, kernel="rbf", ard=True, seed=1),
    Case("matern25_ard_sep_z", n=15, D=2, d=4, m=3, kernel="matern25", ard=True, seed=2),
    Case("matern15_sep_z", n=6, D=4, d=5, m=2, kernel="matern15", ard=False, seed=3),
    Case("rbf_z_is_x_n30", n=30, D=2, d=None, m=5, kernel="rbf", ard=False, seed=4),
]


@dataclass
class Problem:
    case: Case
    model: GPXModel
    X: torch.Tensor
    Z: torch.Tensor
    y: torch.Tensor
    Xs: torch.Tensor
    Zs: torch.Tensor

    @property
    def z_is_x(self) -> bool:
        return self.case.d is None

    def latent(self, x, z):
        """model(x, z), or model(x) for a z = x model."""
        return self.model(x) if self.z_is_x else self.model(x, z)

    def brute(self):
        return brute_joint(hyper(self.model), self.X, self.Z, self.y, self.Xs, self.Zs)


def make_problem(case: Case) -> Problem:
    gen = torch.Generator().manual_seed(1234 + case.seed)

    def rand(*shape, lo=0.0, hi=1.0):
        return lo + (hi - lo) * torch.rand(*shape, generator=gen, dtype=DTYPE)

    X = torch.randn(case.n, case.D, generator=gen, dtype=DTYPE)
    Z = X.clone() if case.d is None else torch.randn(case.n, case.d, generator=gen, dtype=DTYPE)
    d = Z.shape[1]
    proj = torch.randn(case.D, d, generator=gen, dtype=DTYPE)
    y = (Z * torch.tanh(X @ proj)).sum(-1) + 0.1 * torch.randn(case.n, generator=gen, dtype=DTYPE)

    # test points; the first shares its x with training point 0 (a new sample: its ε_w is independent)
    Xs = torch.randn(case.m, case.D, generator=gen, dtype=DTYPE)
    Xs[0] = X[0]
    Zs = Xs.clone() if case.d is None else torch.randn(case.m, d, generator=gen, dtype=DTYPE)

    ard = case.D if case.ard else None
    if case.kernel == "rbf":
        inner = RBFKernel(ard_num_dims=ard)
    else:
        inner = MaternKernel(nu={"matern15": 1.5, "matern25": 2.5}[case.kernel], ard_num_dims=ard)
    base = ScaleKernel(inner)
    model = GPXModel(X, y, train_z=None if case.d is None else Z, base_kernel=base).to(DTYPE)
    inner.lengthscale = rand(1, case.D if case.ard else 1, lo=0.7, hi=1.5)
    base.outputscale = rand(1, lo=1.1, hi=1.5).squeeze()
    model.weight_noise = rand(1, lo=0.05, hi=0.3)
    model.likelihood.noise = rand(1, lo=0.01, hi=0.2)
    model.eval()
    return Problem(case, model, X, Z, y, Xs, Zs)


@pytest.fixture(params=CASES, ids=[c.name for c in CASES])
def problem(request) -> Problem:
    return make_problem(request.param)


def package_lml(prob: Problem) -> torch.Tensor:
    """n × ExactMarginalLogLikelihood in train mode (GPyTorch divides by n)."""
    model = prob.model
    model.train()
    try:
        mll = ExactMarginalLogLikelihood(model.likelihood, model)
        return mll(prob.latent(prob.X, prob.Z), model.train_targets) * prob.X.shape[0]
    finally:
        model.eval()


# ============================================================================ tests
def test_brute_force_references_agree(problem):
    """The references agree with each other: eq. (13) via Z̄ L Z̄ᵀ vs the Hadamard form, eq. (14) and
    eq. (18) (point by point) vs the joint (n+m)d conditioning. Guards the brute force itself."""
    prob = problem
    hp = {k: (v.detach() if torch.is_tensor(v) else v) for k, v in hyper(prob.model).items()}
    ref = brute_joint(hp, prob.X, prob.Z, prob.y, prob.Xs, prob.Zs)
    n = prob.X.shape[0]
    eye = torch.eye(n, dtype=DTYPE)
    hadamard = hp["sy2"] * eye + (brute_kernel(prob.X, prob.X, hp) + hp["sw2"] * eye) * (prob.Z @ prob.Z.T)
    assert_close(paper_C(hp, prob.X, prob.Z), hadamard, what="eq13 vs Hadamard form")
    assert_close(ref["C"], hadamard, what="joint C vs Hadamard form")
    mean14, cov14 = paper_eq14(hp, prob.X, prob.Z, prob.y, prob.Xs, prob.Zs)
    assert_close(ref["y_mean"], mean14, what="joint vs eq14 mean")
    assert_close(ref["y_cov"], cov14, what="joint vs eq14 cov")
    d = prob.Z.shape[1]
    for p in range(prob.Xs.shape[0]):
        mean18, cov18 = paper_eq18(hp, prob.X, prob.Z, prob.y, prob.Xs[p])
        assert_close(ref["w_mean"][p], mean18, what=f"joint vs eq18 mean, point {p}")
        assert_close(ref["w_cov"][p * d : (p + 1) * d, p * d : (p + 1) * d], cov18, what=f"joint vs eq18 cov {p}")


def test_kernel_matrices(problem):
    """GPXKernel: kernel(X) = (K + σw² I) ⊙ ZZᵀ, kernel(X, X*) = K_X* ⊙ ZZ*ᵀ (σw² only on the sample
    diagonal, never in a cross-covariance even for coinciding x), diag=True, and joint train+test blocks."""
    prob = problem
    kernel = prob.model.covar_module
    hp = {k: (v.detach() if torch.is_tensor(v) else v) for k, v in hyper(prob.model).items()}

    def inputs(x, z):
        return x if prob.z_is_x else torch.cat([x, z], dim=-1)

    Xa, Za = torch.cat([prob.X, prob.Xs]), torch.cat([prob.Z, prob.Zs])
    eye = torch.eye(Xa.shape[0], dtype=DTYPE)
    ref_joint = (brute_kernel(Xa, Xa, hp) + hp["sw2"] * eye) * (Za @ Za.T)
    ref_cross = brute_kernel(prob.X, prob.Xs, hp) * (prob.Z @ prob.Zs.T)
    n = prob.X.shape[0]
    with torch.no_grad():
        joint = kernel(inputs(Xa, Za))
        assert_close(joint.to_dense(), ref_joint, what="kernel(X_all)")
        assert_close(joint.diagonal(), ref_joint.diagonal(), what="kernel(X_all).diagonal()")
        assert_close(kernel(inputs(Xa, Za), diag=True), ref_joint.diagonal(), what="kernel(X_all, diag=True)")
        assert_close(joint[:n, n:].to_dense(), ref_cross, what="joint[:n, n:] block")
        assert_close(joint[n:, n:].to_dense(), ref_joint[n:, n:], what="joint[n:, n:] block")
        assert_close(kernel(inputs(prob.X, prob.Z), inputs(prob.Xs, prob.Zs)).to_dense(), ref_cross, what="cross")


def test_log_marginal_likelihood_and_gradients(problem):
    """(1) n × ExactMarginalLogLikelihood == log N(y | 0, C) with C from eq. (13), and so are the
    gradients w.r.t. every raw hyperparameter (autograd through the dense brute force)."""
    prob = problem
    model = prob.model
    params = dict(model.named_parameters())
    assert {"raw_weight_noise", "raw_outputscale", "raw_lengthscale", "raw_noise"} <= {
        name.rsplit(".", 1)[-1] for name in params
    }
    names, tensors = zip(*params.items(), strict=True)

    lml = package_lml(prob)
    hp = hyper(model)
    ref = gaussian_logpdf(prob.y, paper_C(hp, prob.X, prob.Z))
    assert_close(lml, ref, what="log marginal likelihood")
    assert_close(lml, brute_joint(hp, prob.X, prob.Z, prob.y, prob.Xs, prob.Zs)["lml"], what="lml vs joint")

    grads = torch.autograd.grad(lml, tensors, allow_unused=True)
    ref_grads = torch.autograd.grad(ref, tensors, allow_unused=True)
    for name, g, rg in zip(names, grads, ref_grads, strict=True):
        assert rg is not None, f"brute force does not depend on {name}"
        assert g is not None, f"package LML does not depend on {name}"
        assert_close(g, rg, what=f"d lml / d {name}")
    flat = torch.cat([g.reshape(-1) for g in grads])
    assert_close(flat, torch.cat([g.reshape(-1) for g in ref_grads]), what="LML gradient vector")


def test_latent_and_predictive(problem):
    """(2) f* (latent, incl. σw²‖z*‖², excl. σy²) and y* (eq. 14) jointly over several test points."""
    prob = problem
    ref = prob.brute()
    with torch.no_grad():
        latent = prob.latent(prob.Xs, prob.Zs)
        pred = prob.model.likelihood(latent)
    assert_close(latent.mean, ref["f_mean"], what="latent mean")
    assert_close(latent.covariance_matrix, ref["f_cov"], what="latent covariance")
    assert_close(latent.variance, ref["f_cov"].diagonal(), what="latent variance")
    assert_close(pred.mean, ref["y_mean"], what="predictive mean")
    assert_close(pred.covariance_matrix, ref["y_cov"], what="predictive covariance")
    hp = {k: (v.detach() if torch.is_tensor(v) else v) for k, v in hyper(prob.model).items()}
    mean14, cov14 = paper_eq14(hp, prob.X, prob.Z, prob.y, prob.Xs, prob.Zs)
    assert_close(pred.mean, mean14, what="predictive mean vs eq14")
    assert_close(pred.covariance_matrix, cov14, what="predictive covariance vs eq14")
    # one point at a time gives the same marginals
    for p in range(prob.Xs.shape[0]):
        with torch.no_grad():
            single = prob.latent(prob.Xs[p : p + 1], prob.Zs[p : p + 1])
        assert_close(single.mean, ref["f_mean"][p : p + 1], what=f"latent mean, point {p} alone")
        assert_close(single.variance, ref["f_cov"][p, p].reshape(1), what=f"latent variance, point {p} alone")


def test_weight_posterior_joint(problem):
    """(3) predict_weights: mean, full interleaved covariance, .variance, point_blocks, lazy products —
    vs the joint (n+m)d conditioning, and each point's block vs eq. (18)."""
    prob = problem
    ref = prob.brute()
    m, d = ref["w_mean"].shape
    with torch.no_grad():
        weights = prob.model.predict_weights(prob.Xs)
        cov = weights.covariance_matrix
        lazy = weights.lazy_covariance_matrix
        blocks = lazy.point_blocks()
        rhs = torch.randn(m * d, 3, generator=torch.Generator().manual_seed(7), dtype=DTYPE)
        product = lazy @ rhs
    assert weights.mean.shape == (m, d)
    assert cov.shape == (m * d, m * d)
    assert_close(weights.mean, ref["w_mean"], what="weights mean")
    assert_close(cov, ref["w_cov"], what="weights covariance (md x md)")
    assert_close(weights.variance, ref["w_cov"].diagonal().reshape(m, d), what="weights variance")
    assert_close(lazy.diagonal(), ref["w_cov"].diagonal(), what="lazy diagonal")
    ref_blocks = torch.stack([ref["w_cov"][p * d : (p + 1) * d, p * d : (p + 1) * d] for p in range(m)])
    assert_close(blocks, ref_blocks, what="point_blocks")
    assert_close(product, ref["w_cov"] @ rhs, what="lazy covariance @ rhs")
    assert_close(lazy.to_dense(), ref["w_cov"], what="lazy to_dense")

    hp = {k: (v.detach() if torch.is_tensor(v) else v) for k, v in hyper(prob.model).items()}
    for p in range(m):
        mean18, cov18 = paper_eq18(hp, prob.X, prob.Z, prob.y, prob.Xs[p])
        assert_close(weights.mean[p], mean18, what=f"weights mean vs eq18, point {p}")
        assert_close(blocks[p], cov18, what=f"point block vs eq18, point {p}")
        # a single test point on its own
        with torch.no_grad():
            single = prob.model.predict_weights(prob.Xs[p : p + 1])
            single_cov = single.covariance_matrix
        assert_close(single.mean[0], mean18, what=f"single-point weights mean, point {p}")
        assert_close(single_cov, cov18, what=f"single-point weights covariance, point {p}")


def test_latent_equals_weights_times_z(problem):
    """(4) f* = w*ᵀ z*: E[f*] = z*ᵀ E[w*], Cov[f*] = Z_blk Cov[w*] Z_blkᵀ (full, jointly), Var likewise."""
    prob = problem
    with torch.no_grad():
        latent = prob.latent(prob.Xs, prob.Zs)
        weights = prob.model.predict_weights(prob.Xs)
        blocks = weights.lazy_covariance_matrix.point_blocks()
        Zb = z_block(prob.Zs)
        assert_close((weights.mean * prob.Zs).sum(-1), latent.mean, what="E[f*] = z*ᵀ E[w*]")
        assert_close(Zb @ weights.covariance_matrix @ Zb.T, latent.covariance_matrix, what="Cov[f*]")
        assert_close(torch.einsum("pi,pij,pj->p", prob.Zs, blocks, prob.Zs), latent.variance, what="Var[f*]")


def test_explain_matches_brute_force(problem):
    """explain(): predictions, weights and contributions φ = w ⊙ z against the brute force."""
    prob = problem
    ref = prob.brute()
    m, d = ref["w_mean"].shape
    expl = prob.model.explain(prob.Xs) if prob.z_is_x else prob.model.explain(prob.Xs, prob.Zs)
    ref_blocks = torch.stack([ref["w_cov"][p * d : (p + 1) * d, p * d : (p + 1) * d] for p in range(m)])
    assert_close(expl.prediction_mean, ref["y_mean"], what="prediction_mean")
    assert_close(expl.prediction_std, ref["y_cov"].diagonal().sqrt(), what="prediction_std")
    assert_close(expl.latent_std, ref["f_cov"].diagonal().sqrt(), what="latent_std")
    assert_close(expl.weights_mean, ref["w_mean"], what="weights_mean")
    assert_close(expl.weights_covariance, ref_blocks, what="weights_covariance")
    assert_close(expl.weights_std, ref_blocks.diagonal(dim1=-2, dim2=-1).sqrt(), what="weights_std")
    assert_close(expl.contributions_mean, ref["w_mean"] * prob.Zs, what="contributions_mean")
    ref_phi_cov = prob.Zs.unsqueeze(-1) * ref_blocks * prob.Zs.unsqueeze(-2)
    assert_close(expl.contributions_covariance, ref_phi_cov, what="contributions_covariance")
    assert_close(expl.contributions_std, ref_phi_cov.diagonal(dim1=-2, dim2=-1).sqrt(), what="contributions_std")
    # contributions add up to the latent prediction, in mean and in variance
    assert_close(expl.contributions_mean.sum(-1), ref["f_mean"], what="Σ contributions = E[f*]")
    assert_close(expl.contributions_covariance.sum((-1, -2)), ref["f_cov"].diagonal(), what="Var Σ contributions")


@pytest.mark.parametrize("warm_first", [False, True], ids=["cold", "after_latent_call"])
@pytest.mark.parametrize("case", CASES[:3], ids=[c.name for c in CASES[:3]])
def test_fast_pred_var_weights_exact_for_small_n(case, warm_first):
    """(5) Under fast_pred_var with n <= max_cholesky_size LOVE's root of C⁻¹ is a Cholesky inverse, so
    the package uses the Cholesky factor directly and the weight posterior must still be exact (both
    before and after any latent prediction was made)."""
    prob = make_problem(case)
    ref = prob.brute()
    m, d = ref["w_mean"].shape
    assert prob.X.shape[0] <= gpytorch.settings.max_cholesky_size.value()
    with torch.no_grad(), gpytorch.settings.fast_pred_var():
        if warm_first:
            prob.latent(prob.Xs, prob.Zs)
        weights = prob.model.predict_weights(prob.Xs)
        cov = weights.covariance_matrix
        blocks = weights.lazy_covariance_matrix.point_blocks()
        rhs = torch.randn(m * d, 2, generator=torch.Generator().manual_seed(3), dtype=DTYPE)
        product = weights.lazy_covariance_matrix @ rhs
        latent = prob.latent(prob.Xs, prob.Zs)
        latent_var = latent.variance
    assert weights.lazy_covariance_matrix.factor_type == "cholesky"
    assert_close(weights.mean, ref["w_mean"], what="fast_pred_var weights mean")
    assert_close(cov, ref["w_cov"], what="fast_pred_var weights covariance")
    assert_close(weights.variance, ref["w_cov"].diagonal().reshape(m, d), what="fast_pred_var weights variance")
    ref_blocks = torch.stack([ref["w_cov"][p * d : (p + 1) * d, p * d : (p + 1) * d] for p in range(m)])
    assert_close(blocks, ref_blocks, what="fast_pred_var point_blocks")
    assert_close(product, ref["w_cov"] @ rhs, what="fast_pred_var lazy covariance @ rhs")
    assert_close(latent_var, ref["f_cov"].diagonal(), what="fast_pred_var latent variance")


@pytest.mark.parametrize("case", CASES[:3], ids=[c.name for c in CASES[:3]])
def test_weight_posterior_root_factor_exact(case):
    """(5b) The LOVE ("root") form of the weight covariance, given an exact root R = L⁻ᵀ of C⁻¹,
    equals the brute force: covariance, blocks, variance and products."""
    prob = make_problem(case)
    ref = prob.brute()
    m, d = ref["w_mean"].shape
    with torch.no_grad():
        weights = prob.model.predict_weights(prob.Xs)
        lazy = weights.lazy_covariance_matrix
        L = lazy.factor
        root = torch.linalg.solve_triangular(L, torch.eye(L.shape[-1], dtype=DTYPE), upper=False).mT
        root_op = WeightPosteriorLinearOperator(
            lazy.prior_covar, lazy.cross_covar, lazy.train_z, root, factor_type="root"
        )
        rhs = torch.randn(m * d, 3, generator=torch.Generator().manual_seed(5), dtype=DTYPE)
        ref_blocks = torch.stack([ref["w_cov"][p * d : (p + 1) * d, p * d : (p + 1) * d] for p in range(m)])
        assert_close(root_op.to_dense(), ref["w_cov"], what="root-form covariance")
        assert_close(root_op.point_blocks(), ref_blocks, what="root-form point_blocks")
        assert_close(root_op.diagonal(), ref["w_cov"].diagonal(), what="root-form diagonal")
        assert_close(root_op @ rhs, ref["w_cov"] @ rhs, what="root-form product")
        assert root_op._root_times_z() is not None  # [R ⊙ z_l] formed once and shared by the chunks


@pytest.mark.parametrize("held", [True, False], ids=["root-times-z", "rows-times-root"])
def test_weight_posterior_root_factor_chunked(monkeypatch, held):
    """The LOVE form's per-point blocks in many small chunks, with [R ⊙ z_l] held once for all chunks or
    (above its size limit) rows of B times R chunk by chunk, equal the brute force."""
    prob = make_problem(CASES[0])
    ref = prob.brute()
    m, d = ref["w_mean"].shape
    ref_blocks = torch.stack([ref["w_cov"][p * d : (p + 1) * d, p * d : (p + 1) * d] for p in range(m)])
    with torch.no_grad():
        lazy = prob.model.predict_weights(prob.Xs).lazy_covariance_matrix
        L = lazy.factor
        root = torch.linalg.solve_triangular(L, torch.eye(L.shape[-1], dtype=DTYPE), upper=False).mT
        root_op = WeightPosteriorLinearOperator(
            lazy.prior_covar, lazy.cross_covar, lazy.train_z, root, factor_type="root"
        )
        n, r = root_op.num_train, root_op.factor.size(-1)
        # [R ⊙ z_l] is held up to 2 * budget scalars; the point chunks hold budget // 4 scalars
        budget = -(-n * r * d // 2) if held else (n * r * d - 1) // 2
        with gpytorch_explain.settings.max_block_elements(budget):
            step = max(1, (budget // 4) // root_op._elements_per_point())
            assert len(list(root_op._chunks())) == -(-m // step) > 1
            assert (root_op._root_times_z() is not None) == held
            assert_close(root_op.point_blocks(), ref_blocks, what="chunked root-form point_blocks")


def test_weight_posterior_differentiable(problem):
    """(7) Gradients of a scalar of predict_weights (variances + weighted mean + weighted covariance
    entries) and of the latent prediction w.r.t. the raw hyperparameters match the brute force."""
    prob = problem
    model = prob.model
    names, tensors = zip(*model.named_parameters(), strict=True)
    gen = torch.Generator().manual_seed(11)
    m = prob.Xs.shape[0]
    d = prob.Z.shape[1]
    c_mean = torch.randn(m, d, generator=gen, dtype=DTYPE)
    c_cov = torch.randn(m * d, m * d, generator=gen, dtype=DTYPE)
    c_f = torch.randn(m, generator=gen, dtype=DTYPE)

    def scalar(w_mean, w_cov, w_var, f_mean, f_var):
        return w_var.sum() + (c_mean * w_mean).sum() + (c_cov * w_cov).sum() + (c_f * f_mean).sum() + f_var.sum()

    with gpytorch.settings.detach_test_caches(False):
        model.prediction_strategy = None
        weights = model.predict_weights(prob.Xs)
        latent = prob.latent(prob.Xs, prob.Zs)
        value = scalar(weights.mean, weights.covariance_matrix, weights.variance, latent.mean, latent.variance)
    ref = prob.brute()
    ref_value = scalar(
        ref["w_mean"], ref["w_cov"], ref["w_cov"].diagonal().reshape(m, d), ref["f_mean"], ref["f_cov"].diagonal()
    )
    assert_close(value, ref_value, what="scalar of the weight posterior")
    grads = torch.autograd.grad(value, tensors, allow_unused=True)
    ref_grads = torch.autograd.grad(ref_value, tensors, allow_unused=True)
    for name, g, rg in zip(names, grads, ref_grads, strict=True):
        assert g is not None and rg is not None, f"no gradient for {name}"
        assert_close(g, rg, rtol=1e-7, what=f"d scalar / d {name}")
    model.prediction_strategy = None


def test_monte_carlo_generative_model():
    """(6) Sampling the generative model: y ~ N(0, C), and the residual w* − E[w* | y] (E from the
    package, which is linear in y) has covariance Cov[w*] from the package and is uncorrelated with y.

    N joint draws of (y, w*) come from G at train+test inputs (d independent GPs), ε_w and ε_y. Each
    sample-covariance entry must lie within 4 standard errors, SE_ab = sqrt((Σ_aa Σ_bb + Σ_ab²) / N)
    (exact for a zero-mean Gaussian sample covariance). With N = 20000 one SE on a variance is ~1%
    of it, so e.g. dropping σw² (0.05–0.3) from the test prior or from C is detected.
    """
    num_samples = 20000
    prob = make_problem(Case("mc", n=8, D=2, d=3, m=3, kernel="rbf", ard=True, seed=5))
    model = prob.model
    hp = {k: (v.detach() if torch.is_tensor(v) else v) for k, v in hyper(model).items()}
    X, Z, Xs = prob.X, prob.Z, prob.Xs
    n, d = Z.shape
    m = Xs.shape[0]
    gen = torch.Generator().manual_seed(2024)

    # ---- draws from the generative model
    Xa = torch.cat([X, Xs])
    evals, evecs = torch.linalg.eigh(brute_kernel(Xa, Xa, hp))
    root = evecs * evals.clamp_min(0).sqrt()  # root @ rootᵀ = K_all
    G = (root @ torch.randn(n + m, d * num_samples, generator=gen, dtype=DTYPE)).reshape(n + m, d, num_samples)
    W = G + hp["sw2"].sqrt() * torch.randn(n + m, d, num_samples, generator=gen, dtype=DTYPE)
    Y = (Z.unsqueeze(-1) * W[:n]).sum(1) + hp["sy2"].sqrt() * torch.randn(n, num_samples, generator=gen, dtype=DTYPE)
    Wstar = W[n:].reshape(m * d, num_samples)  # interleaved: row p*d + l

    with torch.no_grad():
        # the package's training covariance C (train mode: prior of y)
        model.train()
        C = model.likelihood(model(X, Z)).covariance_matrix
        model.eval()
        weights = model.predict_weights(Xs)
        Sigma = weights.covariance_matrix
        mean_y = weights.mean.reshape(-1)
        # E[w* | y] = M y; column j of M is the package's mean for y = e_j
        cols = []
        for j in range(n):
            model.set_train_data(targets=torch.eye(n, dtype=DTYPE)[j], strict=False)
            cols.append(model.predict_weights(Xs).mean.reshape(-1))
        M = torch.stack(cols, dim=1)
        model.set_train_data(targets=prob.y, strict=False)
        # the posterior covariance does not depend on the targets
        assert_close(model.predict_weights(Xs).covariance_matrix, Sigma, what="Cov[w*] after set_train_data")
    assert_close(M @ prob.y, mean_y, what="posterior mean is linear in y")

    def check_cov(sample, true, what, true_left_var=None, true_right_var=None):
        left = true.diagonal() if true_left_var is None else true_left_var
        right = true.diagonal() if true_right_var is None else true_right_var
        se = ((left.unsqueeze(1) * right.unsqueeze(0) + true.pow(2)) / num_samples).sqrt()
        z = ((sample - true) / se).abs()
        assert z.max() < 4.0, (
            f"{what}: max |sample − true| / SE = {z.max().item():.2f} (entry {divmod(z.argmax().item(), z.size(1))})"
        )

    # y ~ N(0, C)
    check_cov(Y @ Y.T / num_samples, C, "Cov[y]")
    # residual covariance = posterior covariance of w*
    R = Wstar - M @ Y
    check_cov(R @ R.T / num_samples, Sigma, "Cov[w* − E[w*|y]]")
    # residual uncorrelated with y (tests the mean map M): true cross-covariance 0
    check_cov(
        R @ Y.T / num_samples,
        torch.zeros(m * d, n, dtype=DTYPE),
        "Cov[residual, y]",
        true_left_var=Sigma.diagonal(),
        true_right_var=C.diagonal(),
    )
    # sanity: the test is sensitive — the prior covariance of w* is far from the posterior one
    prior_var = (brute_kernel(Xs, Xs, hp).diagonal() + hp["sw2"]).repeat_interleave(d)
    assert ((prior_var - Sigma.diagonal()) / (Sigma.diagonal() * math.sqrt(2 / num_samples))).max() > 8


@pytest.mark.parametrize("batch", [(), (2,)])
def test_dense_gaussian_nll_matches_torch(batch):
    """The closed-form-gradient Gaussian NLL used by fit() equals torch's MultivariateNormal, with gradients."""
    from gpytorch_explain.utils import dense_gaussian_nll

    gen = torch.Generator().manual_seed(7)
    n = 6
    A = torch.randn(*batch, n, n, generator=gen, dtype=DTYPE)
    covar = (A @ A.mT + n * torch.eye(n, dtype=DTYPE)).requires_grad_(True)
    diff = torch.randn(*batch, n, generator=gen, dtype=DTYPE).requires_grad_(True)
    weights = torch.rand(batch, generator=gen, dtype=DTYPE) + 0.5
    ours = (dense_gaussian_nll(covar, diff) * weights).sum()
    g_ours = torch.autograd.grad(ours, (covar, diff))
    mvn = torch.distributions.MultivariateNormal(torch.zeros(n, dtype=DTYPE), covariance_matrix=covar)
    ref = (-mvn.log_prob(diff) * weights).sum()
    g_ref = torch.autograd.grad(ref, (covar, diff))
    assert_close(ours, ref, what="nll")
    # torch's gradient w.r.t. a symmetric matrix argument may be asymmetric; compare symmetrised
    assert_close(g_ours[0], 0.5 * (g_ref[0] + g_ref[0].mT), what="d nll / d C")
    assert_close(g_ours[1], g_ref[1], what="d nll / d diff")


def test_dense_gaussian_nll_jitter_and_errors():
    """A covariance that is not numerically positive definite gets GPyTorch's Cholesky jitter (with a
    NumericalWarning; value and gradient are the jittered matrix's); an indefinite one raises a clear error."""
    from linear_operator.utils.warnings import NumericalWarning

    from gpytorch_explain.utils import dense_gaussian_nll

    gen = torch.Generator().manual_seed(8)
    n = 6
    v = torch.randn(n, 2, generator=gen, dtype=DTYPE)
    singular = v @ v.mT  # rank 2: Cholesky fails without jitter
    diff = torch.randn(n, generator=gen, dtype=DTYPE)
    with pytest.raises(torch.linalg.LinAlgError):
        torch.linalg.cholesky(singular)
    jitter = 1e-6
    covar = singular.clone().requires_grad_(True)
    with gpytorch.settings.cholesky_jitter(double_value=jitter), pytest.warns(NumericalWarning, match="jitter"):
        ours = dense_gaussian_nll(covar, diff)
    (g_ours,) = torch.autograd.grad(ours, covar)
    jittered = (singular + jitter * torch.eye(n, dtype=DTYPE)).requires_grad_(True)
    mvn = torch.distributions.MultivariateNormal(torch.zeros(n, dtype=DTYPE), covariance_matrix=jittered)
    ref = -mvn.log_prob(diff)
    (g_ref,) = torch.autograd.grad(ref, jittered)
    assert_close(ours, ref, what="jittered nll")
    assert_close(g_ours, 0.5 * (g_ref + g_ref.mT), what="jittered d nll / d C")

    indefinite = torch.diag(torch.tensor([1.0, 1.0, -1.0, 1.0, 1.0, 1.0], dtype=DTYPE))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NumericalWarning)
        with pytest.raises(torch.linalg.LinAlgError, match="not positive definite.*cholesky_jitter"):
            dense_gaussian_nll(indefinite, diff)


def test_fit_objective_equals_exact_mll():
    """fit()'s dense objective (value and gradients) equals -ExactMarginalLogLikelihood."""
    prob = make_problem(CASES[0])
    model = prob.model
    model.train()
    inputs = model.train_inputs[0]
    mll = gpytorch.mlls.ExactMarginalLogLikelihood(model.likelihood, model)
    params = [p for p in model.parameters() if p.requires_grad]
    ref = -mll(gpytorch.models.ExactGP.__call__(model, inputs), model.train_targets)
    g_ref = torch.autograd.grad(ref, params)
    captured = {}
    original = torch.optim.LBFGS.step

    def one_step(self, closure):
        captured["loss"] = closure()
        captured["grads"] = [p.grad.clone() for p in params]

    torch.optim.LBFGS.step = one_step
    try:
        model.fit(max_iter=1)
    finally:
        torch.optim.LBFGS.step = original
    assert_close(captured["loss"], ref, what="fit objective")
    for g, gr in zip(captured["grads"], g_ref, strict=True):
        assert_close(g, gr, what="fit gradient")


@pytest.mark.parametrize("n", [50, 4000])
def test_fit_default_tolerance_scales_with_n(monkeypatch, n):
    """The loss is per sample: the default L-BFGS tolerance is min(1e-5, 1e-2 / n), so that a large fit does not stop
    while the total log likelihood still gains ~0.1 nats or more; an explicit tolerance is passed through."""
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(n, 2, dtype=DTYPE, generator=gen)
    model = GPXModel(x, x.sum(-1), likelihood=None)
    seen = []

    class Recorder(torch.optim.LBFGS):
        def __init__(self, params, **kwargs):
            seen.append(kwargs)
            super().__init__(params, **kwargs)

        def step(self, closure):  # no optimisation: only the settings are checked
            return None

    monkeypatch.setattr(torch.optim, "LBFGS", Recorder)
    model.fit()
    model.fit(tolerance=1e-3)
    expected = min(1e-5, 1e-2 / n)
    assert seen[0]["tolerance_change"] == pytest.approx(expected) and seen[0]["tolerance_grad"] == pytest.approx(
        expected
    )
    assert seen[1]["tolerance_change"] == 1e-3
