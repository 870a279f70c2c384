#!/usr/bin/env python3
"""Preconditioning CG for the GPX covariance: GPyTorch's pivoted Cholesky through ``_get_indices``.

For :math:`\\mathbf C = \\sigma_y^2\\mathbf I + (\\mathbf K + \\sigma_w^2\\mathbf I) \\odot \\mathbf Z\\mathbf Z^\\top`
(``GPXKernel`` + Gaussian likelihood, i.e. exactly the operator GPyTorch's CG sees in ``GPXModel``)
the script solves :math:`\\mathbf C\\mathbf x = \\mathbf y` with a fixed budget of CG iterations for several
pivoted-Cholesky preconditioner ranks (``gpytorch.settings.max_preconditioner_size``; 0 = none) and
prints the relative residual reached and the time, with a dense or a KISS-GP base kernel. The
inducing-point (SGPR) base needs no preconditioner: it is solved exactly (Woodbury).

Usage::

    python benchmarks/preconditioner.py              # n = 5000 dense RBF, n = 20000 KISS-GP (additive, 3-D grid)
    python benchmarks/preconditioner.py --n-dense 3000 --n-kiss 10000 --iters 50
"""

from __future__ import annotations

import argparse
import time

import gpytorch
import torch
from gpytorch.kernels import AdditiveStructureKernel, GridInterpolationKernel, RBFKernel, ScaleKernel

from gpytorch_explain import GPXModel


def _problem(n: int, dims: int, kernel, seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(n, dims, generator=gen, dtype=torch.float64)
    y = (torch.sin(x) * x).sum(-1) + 0.1 * torch.randn(n, generator=gen, dtype=torch.float64)
    model = GPXModel(x, y, base_kernel=kernel)
    model.likelihood.noise = 0.01
    model.weight_noise = 0.01
    model.train()
    covar = model.likelihood(model(x)).lazy_covariance_matrix.evaluate_kernel()
    return covar, y.unsqueeze(-1)


def _run(name: str, covar, rhs, ranks, iters: int) -> None:
    print(f"\n{name}: n = {rhs.size(0)}, {iters} CG iterations")
    print("| preconditioner rank | relative residual | solve s |")
    print("| ---: | ---: | ---: |")
    for rank in ranks:
        covar._memoize_cache = {}  # a fresh preconditioner for each rank
        with (
            torch.no_grad(),
            gpytorch.settings.max_cholesky_size(0),
            gpytorch.settings.max_preconditioner_size(rank),
            gpytorch.settings.min_preconditioning_size(1),
            gpytorch.settings.max_cg_iterations(iters),
            gpytorch.settings.cg_tolerance(1e-12),
            gpytorch.settings.skip_logdet_forward(True),
        ):
            import warnings

            t0 = time.perf_counter()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                sol = covar.solve(rhs)
            elapsed = time.perf_counter() - t0
            resid = ((covar @ sol - rhs).norm() / rhs.norm()).item()
        print(f"| {rank} | {resid:.2e} | {elapsed:.2f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n-dense", type=int, default=5000)
    parser.add_argument("--n-kiss", type=int, default=20000)
    parser.add_argument("--iters", type=int, default=100)
    parser.add_argument("--n-grid3", type=int, default=20000)
    parser.add_argument("--ranks", type=int, nargs="+", default=[0, 5, 15, 50, 100])
    parser.add_argument("--cases", nargs="+", choices=["dense", "kiss", "grid3"], default=["dense", "kiss", "grid3"])
    args = parser.parse_args()
    torch.manual_seed(0)

    if "dense" in args.cases:
        dense = ScaleKernel(RBFKernel()).double()
        dense.base_kernel.lengthscale = 1.0
        covar, rhs = _problem(args.n_dense, 3, dense)
        _run("dense RBF base (3 dims)", covar, rhs, args.ranks, args.iters)

    if "kiss" in args.cases:
        inner = GridInterpolationKernel(RBFKernel(), grid_size=200, num_dims=1)
        inner.base_kernel.lengthscale = 0.5
        kiss = ScaleKernel(AdditiveStructureKernel(inner, num_dims=4)).double()
        covar, rhs = _problem(args.n_kiss, 4, kiss)
        _run("KISS-GP additive base (4 dims, 200-point grids)", covar, rhs, args.ranks, args.iters)

    if "grid3" in args.cases:
        # a 3-D grid whose root is too wide for grid features: GPX's own interpolated grid operator, whose
        # preconditioner reads a row with one product by a unit vector
        grid3 = ScaleKernel(GridInterpolationKernel(RBFKernel(ard_num_dims=3), grid_size=20, num_dims=3)).double()
        grid3.base_kernel.base_kernel.lengthscale = 1.0
        covar, rhs = _problem(args.n_grid3, 3, grid3)
        name = "KISS-GP 3-D grid 20^3 (GPX grid operator; root too wide for features)"
        _run(name, covar, rhs, args.ranks, args.iters)


if __name__ == "__main__":
    main()
