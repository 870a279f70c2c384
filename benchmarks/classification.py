#!/usr/bin/env python3
r"""Expected class-probability attributions of SVGP classifiers on scikit-learn's bundled data sets.

* **Breast cancer** (569 x 30, binary): an SVGP with a probit ``BernoulliLikelihood``.
* **Digits** (1797 x 64, ten classes): ten independent latent SVGPs (``IndependentMultitaskVariationalStrategy``)
  with ``SoftmaxLikelihood(mixing_weights=False)``.

Both are trained briefly with Adam on the variational ELBO (float64, standardised inputs, 80/20 split,
inducing points a random subset of the training inputs). On a subset of test points the script reports:

1. **Taylor vs exact.** The relative gap :math:`\lVert \text{taylor} - \text{exact}\rVert / \lVert
   \text{exact}\rVert` per point of the expected class-probability gradient
   (:func:`~gpytorch_explain.attribution.classification.expected_probability_gradient`): against the closed-form
   probit value (binary), against Monte Carlo with its standard error (digits, the predicted class), binned by
   the latent variance of that class.
2. **Deletion curves** (faithfulness): features are set to the baseline (the training mean, i.e. 0) in decreasing
   order of :math:`|\mathbb E[\mathrm{IG}_i]|` of the predicted class probability, and the expected predicted
   probability is tracked; the area under the curve (mean over the deletion steps, lower = the attribution found
   the features the prediction relies on) is compared with orderings by the latent's IG
   (:class:`~gpytorch_explain.PosteriorIntegratedGradients`), by the Taylor IG, and a random ordering.

Usage::

    python benchmarks/classification.py [--iters 200] [--points 40] [--seed 0] [--threads N]
"""

from __future__ import annotations

import argparse
import time

import gpytorch
import numpy as np
import torch
from sklearn.datasets import load_breast_cancer, load_digits
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import StandardScaler

from gpytorch_explain import PosteriorIntegratedGradients
from gpytorch_explain.attribution.classification import (
    expected_probability_gradient,
    expected_probability_ig,
    latent_gradient_moments,
)

DTYPE = torch.float64


class SVGP(gpytorch.models.ApproximateGP):
    """An SVGP with an ARD RBF kernel; ``num_latents`` independent GPs (one per class) when given."""

    def __init__(self, Z: torch.Tensor, num_latents: int | None = None):
        batch = torch.Size([num_latents]) if num_latents else torch.Size()
        Z = Z.expand(*batch, *Z.shape).clone()
        dist = gpytorch.variational.CholeskyVariationalDistribution(Z.size(-2), batch_shape=batch)
        strategy = gpytorch.variational.VariationalStrategy(self, Z, dist, learn_inducing_locations=True)
        if num_latents:
            strategy = gpytorch.variational.IndependentMultitaskVariationalStrategy(strategy, num_tasks=num_latents)
        super().__init__(strategy)
        D = Z.size(-1)
        self.mean_module = gpytorch.means.ConstantMean(batch_shape=batch)
        self.covar_module = gpytorch.kernels.ScaleKernel(
            gpytorch.kernels.RBFKernel(ard_num_dims=D, batch_shape=batch), batch_shape=batch
        )
        self.covar_module.base_kernel.lengthscale = float(np.sqrt(D))

    def forward(self, x):
        return gpytorch.distributions.MultivariateNormal(self.mean_module(x), self.covar_module(x))


def load(name: str, seed: int):
    x, y = (load_breast_cancer if name == "breast_cancer" else load_digits)(return_X_y=True)
    x_tr, x_te, y_tr, y_te = train_test_split(x, y, test_size=0.2, random_state=seed, stratify=y)
    scaler = StandardScaler().fit(x_tr)
    to = lambda a: torch.as_tensor(a, dtype=DTYPE)  # noqa: E731
    return to(scaler.transform(x_tr)), to(scaler.transform(x_te)), torch.as_tensor(y_tr), torch.as_tensor(y_te)


def train(model, likelihood, x, y, iters: int, lr: float = 0.05):
    model.train()
    likelihood.train()
    mll = gpytorch.mlls.VariationalELBO(likelihood, model, num_data=x.size(0))
    opt = torch.optim.Adam([*model.parameters(), *likelihood.parameters()], lr=lr)
    for _ in range(iters):
        opt.zero_grad()
        loss = -mll(model(x), y)
        loss.backward()
        opt.step()
    model.eval()
    likelihood.eval()
    return float(loss.detach())


def probabilities(model, likelihood, x: torch.Tensor, num_samples: int = 2048) -> torch.Tensor:
    """E_q[p(y | x)]: closed form (probit) or Monte Carlo with fixed draws (softmax); ``(m,)`` or ``(m, C)``."""
    with torch.no_grad():
        out = model(x)
        if isinstance(likelihood, gpytorch.likelihoods.BernoulliLikelihood):
            return likelihood(out).probs
        gen = torch.Generator().manual_seed(123)
        xi = torch.randn(num_samples, *out.mean.shape, generator=gen, dtype=DTYPE)
        return torch.softmax(out.mean + out.variance.sqrt() * xi, dim=-1).mean(0)


def deletion_auc(model, likelihood, x, target, scores, baseline, step: int) -> torch.Tensor:
    """Mean over deletion steps of the expected target-class probability, per point (``scores``: ``(m, D)``)."""
    m, D = x.shape
    order = scores.argsort(dim=-1, descending=True)
    counts = list(range(0, D + 1, step)) + ([D] if D % step else [])
    points = []
    for k in counts:
        xd = x.clone()
        rows = torch.arange(m).unsqueeze(-1).expand(m, k)
        xd[rows, order[:, :k]] = baseline[order[:, :k]]
        points.append(xd)
    p = probabilities(model, likelihood, torch.cat(points))
    if p.dim() == 1:
        p = p.reshape(len(counts), m)
        p = torch.where(target.bool(), p, 1 - p)
    else:
        p = p.reshape(len(counts), m, -1).gather(-1, target.view(1, m, 1).expand(len(counts), m, 1)).squeeze(-1)
    return p.mean(0)


def report_deletion(model, likelihood, x, target, orderings: dict[str, torch.Tensor], baseline, step, seed):
    gen = torch.Generator().manual_seed(seed)
    rand = torch.stack([torch.randperm(x.size(1), generator=gen) for _ in range(x.size(0))]).to(DTYPE)
    orderings = {**orderings, "random": rand}
    print(f"  deletion AUC (mean expected target-class probability over {x.size(1)} features, step {step}):")
    for name, scores in orderings.items():
        auc = deletion_auc(model, likelihood, x, target, scores, baseline, step)
        print(f"    {name:<24s} {auc.mean():.4f} ± {auc.std() / np.sqrt(len(auc)):.4f}")


def relative_gap(a: torch.Tensor, ref: torch.Tensor) -> torch.Tensor:
    dims = tuple(range(1, a.dim()))
    return (a - ref).norm(dim=dims) / ref.norm(dim=dims).clamp_min(1e-300)


def binary(args):
    x_tr, x_te, y_tr, y_te = load("breast_cancer", args.seed)
    gen = torch.Generator().manual_seed(args.seed)
    Z = x_tr[torch.randperm(x_tr.size(0), generator=gen)[: args.inducing]]
    model = SVGP(Z).to(DTYPE)
    lik = gpytorch.likelihoods.BernoulliLikelihood()
    t0 = time.perf_counter()
    loss = train(model, lik, x_tr, y_tr.to(DTYPE), args.iters)
    probs = probabilities(model, lik, x_te)
    acc = ((probs > 0.5).long() == y_te).double().mean()
    print(f"breast cancer (binary, probit): train {time.perf_counter() - t0:.1f} s, -ELBO {loss:.3f}, "
          f"test accuracy {acc:.3f}")  # fmt: skip

    x = x_te[: args.points]
    t0 = time.perf_counter()
    res = expected_probability_gradient(model, lik, x)
    t_grad = time.perf_counter() - t0
    var = latent_gradient_moments(model, x).variance
    gap = relative_gap(res.taylor, res.mean)
    print(f"  expected gradient of p(y=1|x) for {len(x)} points: {t_grad * 1e3:.1f} ms (closed form)")
    print(f"  latent variance: median {var.median():.3f}, max {var.max():.3f}")
    print(f"  Taylor vs exact relative gap: median {gap.median():.2e}, max {gap.max():.2e}")
    gh = expected_probability_gradient(model, lik, x, method="gauss-hermite")
    print(f"  Gauss-Hermite (64) vs closed form: max abs diff {(gh.mean - res.mean).abs().max():.2e}")

    baseline = torch.zeros(x.size(1), dtype=DTYPE)
    t0 = time.perf_counter()
    ig = expected_probability_ig(model, lik, x, baseline)
    t_ig = time.perf_counter() - t0
    ig_gap = relative_gap(ig.taylor, ig.mean)
    print(f"  expected IG: {t_ig:.2f} s, completeness gap max {ig.completeness_gap.abs().max():.1e}, "
          f"Taylor gap median {ig_gap.median():.2e}, max {ig_gap.max():.2e}")  # fmt: skip
    # the explained class: the predicted one (IG of p(y=1) flips sign for class 0)
    target = (probabilities(model, lik, x) > 0.5).long()
    sign = torch.where(target.bool(), 1.0, -1.0).to(DTYPE).unsqueeze(-1)
    with torch.no_grad():
        latent_ig = PosteriorIntegratedGradients(model, baseline)(x).mean
    orderings = {
        "E[IG] of probability": sign * ig.mean,
        "Taylor E[IG]": sign * ig.taylor,
        "latent IG": sign * latent_ig,
        "|E[IG]| (unsigned)": ig.mean.abs(),
    }
    report_deletion(model, lik, x, target, orderings, baseline, step=1, seed=args.seed)


def multiclass(args):
    x_tr, x_te, y_tr, y_te = load("digits", args.seed)
    C = 10
    gen = torch.Generator().manual_seed(args.seed)
    Z = x_tr[torch.randperm(x_tr.size(0), generator=gen)[: args.inducing]]
    model = SVGP(Z, num_latents=C).to(DTYPE)
    lik = gpytorch.likelihoods.SoftmaxLikelihood(num_classes=C, mixing_weights=False)
    t0 = time.perf_counter()
    loss = train(model, lik, x_tr, y_tr, args.iters)
    probs = probabilities(model, lik, x_te)
    acc = (probs.argmax(-1) == y_te).double().mean()
    print(f"digits (10 classes, softmax): train {time.perf_counter() - t0:.1f} s, -ELBO {loss:.3f}, "
          f"test accuracy {acc:.3f}")  # fmt: skip

    x = x_te[: args.points]
    target = probabilities(model, lik, x).argmax(-1)
    t0 = time.perf_counter()
    res = expected_probability_gradient(model, lik, x, num_samples=args.samples, generator=gen)
    t_grad = time.perf_counter() - t0
    rows = torch.arange(len(x))
    mc, se, taylor = res.mean[rows, target], res.standard_error[rows, target], res.taylor[rows, target]
    var = latent_gradient_moments(model, x).variance.mT[rows, target]  # the predicted class's latent
    gap = relative_gap(taylor, mc)
    noise = relative_gap(mc + se, mc)  # the relative size of one standard error
    z = torch.where(se > 0, (taylor - mc).abs() / se.clamp_min(1e-300), 0.0).amax(-1)  # constant pixels: SE 0
    print(f"  expected gradients of all class probabilities for {len(x)} points: {t_grad:.2f} s "
          f"(Monte Carlo, {args.samples} draws)")  # fmt: skip
    print(f"  predicted class: latent variance median {var.median():.3f}, max {var.max():.3f}")
    print(f"  Taylor vs Monte Carlo relative gap: median {gap.median():.2e}, max {gap.max():.2e} "
          f"(one MC standard error is {noise.median():.1e} relative); max |gap|/SE per point: "
          f"median {z.median():.1f}")  # fmt: skip
    for lo, hi in ((0.0, 0.5), (0.5, 2.0), (2.0, float("inf"))):
        sel = (var >= lo) & (var < hi)
        if sel.any():
            print(f"    latent variance in [{lo}, {hi}): {int(sel.sum())} points, median gap {gap[sel].median():.2e}")

    baseline = torch.zeros(x.size(1), dtype=DTYPE)
    t0 = time.perf_counter()
    ig = expected_probability_ig(model, lik, x, baseline, path_order=16, num_samples=args.samples // 4, generator=gen)
    t_ig = time.perf_counter() - t0
    ig_mc, ig_taylor = ig.mean[rows, target], ig.taylor[rows, target]
    ig_gap = relative_gap(ig_taylor, ig_mc)
    print(f"  expected IG (16 path nodes, {args.samples // 4} draws): {t_ig:.2f} s, completeness gap max "
          f"{ig.completeness_gap.abs().max():.1e}, Taylor gap median {ig_gap.median():.2e}")  # fmt: skip
    with torch.no_grad():
        latent_ig = PosteriorIntegratedGradients(model, baseline)(x).mean  # (C, m, D)
    orderings = {
        "E[IG] of probability": ig_mc,
        "Taylor E[IG]": ig_taylor,
        "latent IG": latent_ig.movedim(0, 1)[rows, target],
        "|E[IG]| (unsigned)": ig_mc.abs(),
    }
    report_deletion(model, lik, x, target, orderings, baseline, step=4, seed=args.seed)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--iters", type=int, default=200)
    parser.add_argument("--points", type=int, default=40)
    parser.add_argument("--inducing", type=int, default=48)
    parser.add_argument("--samples", type=int, default=4096)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--only", choices=["binary", "multiclass"], default=None)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    if args.only in (None, "binary"):
        binary(args)
    if args.only in (None, "multiclass"):
        multiclass(args)


if __name__ == "__main__":
    main()
