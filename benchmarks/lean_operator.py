#!/usr/bin/env python3
r"""Peak memory of one exact GPX marginal-likelihood evaluation + backward on the CG path, with the
memory-lean base kernel (:class:`gpytorch_explain.kernels.PartitionedKernel`) against the dense one.

Each configuration runs in its own subprocess, so that ``resource.getrusage(RUSAGE_SELF).ru_maxrss``
(the process's peak resident memory) belongs to that configuration alone. One evaluation is
``-ExactMarginalLogLikelihood(GPX(x), y)`` and its ``backward()`` with GPyTorch's CG / stochastic Lanczos
path (both dense limits set to 0), ``max_cg_iterations`` bounded (reported), ``num_trace_samples`` probes.
The number of products with the base kernel operator (one per CG/Lanczos iteration, each over all d·t
right-hand sides) and of blocked bilinear derivatives is counted.

Usage (CPU, as recorded in ``benchmarks/results/lean_operator.txt``)::

    PYTHONPATH=$PWD python benchmarks/lean_operator.py --runs lean:20000 dense:5000 lean:5000

The GPU measurement of issue 18 (exact GPX at 5·10⁴–2·10⁵ rows, side by side with GPyTorch's GPR) is
``benchmarks/scale.py --method exact --device cuda --dtype float32 ...``; see the results file.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time

GIB = 2.0**30


def _one(kind: str, n: int, args) -> dict:
    import gpytorch
    import torch

    import gpytorch_explain as ge
    from gpytorch_explain import GPXModel
    from gpytorch_explain.kernels import PartitionedKernel
    from gpytorch_explain.operators import PartitionedKernelLinearOperator
    from gpytorch_explain.operators.partitioned_kernel_linear_operator import max_block_elements

    torch.set_num_threads(args.threads)
    dtype = torch.float64
    g = torch.Generator().manual_seed(0)
    x = torch.rand(n, args.dims, generator=g, dtype=dtype) * 4 - 2
    w = torch.stack([torch.sin(x[:, 0]), torch.cos(x[:, 1]), 0.5 * x[:, 2], torch.ones(n, dtype=dtype)], -1)
    y = (w[:, : args.dims] * x).sum(-1) + 0.1 * torch.randn(n, generator=g, dtype=dtype)
    base = gpytorch.kernels.ScaleKernel(gpytorch.kernels.RBFKernel(ard_num_dims=args.dims)).to(dtype)
    base.base_kernel.lengthscale = 1.0
    counts = {"products": 0, "bilinear": 0}
    if kind == "lean":
        matmul, bilinear = PartitionedKernelLinearOperator._matmul, PartitionedKernelLinearOperator._bilinear_derivative

        def counted_matmul(self, rhs):
            if not torch.is_grad_enabled():
                counts["products"] += 1
            return matmul(self, rhs)

        def counted_bilinear(self, left, right):
            counts["bilinear"] += 1
            return bilinear(self, left, right)

        PartitionedKernelLinearOperator._matmul = counted_matmul
        PartitionedKernelLinearOperator._bilinear_derivative = counted_bilinear
        base = PartitionedKernel(base)
    model = GPXModel(x, y, base_kernel=base)
    model.likelihood.noise = args.noise
    model.weight_noise = args.noise
    model.train()
    mll = gpytorch.mlls.ExactMarginalLogLikelihood(model.likelihood, model)
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / GIB
    torch.manual_seed(1)  # the same Lanczos probes for every configuration
    start = time.perf_counter()
    with (
        ge.settings.max_cholesky_size(0),
        gpytorch.settings.max_cholesky_size(0),
        gpytorch.settings.max_cg_iterations(args.cg_iterations),
        gpytorch.settings.num_trace_samples(args.probes),
        max_block_elements(args.block),
    ):
        loss = -mll(model(x), y)
        t_forward = time.perf_counter() - start
        loss.backward()
    elapsed = time.perf_counter() - start
    grads = {name: float(p.grad.abs().sum()) for name, p in model.named_parameters() if p.grad is not None}
    return {
        "kind": kind,
        "n": n,
        "loss": float(loss),
        "forward_s": round(t_forward, 1),
        "total_s": round(elapsed, 1),
        "peak_rss_gib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / GIB, 2),
        "rss_before_gib": round(rss_before, 2),
        "dense_kernel_gib": round(n * n * 8 / GIB, 2),
        "products": counts["products"] if kind == "lean" else None,
        "bilinear": counts["bilinear"] if kind == "lean" else None,
        "grad_abs_sums": grads,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", nargs="+", default=["lean:20000", "dense:5000", "lean:5000"])
    parser.add_argument("--dims", type=int, default=4)
    parser.add_argument("--noise", type=float, default=0.05, help="sigma_y^2 and sigma_w^2")
    parser.add_argument("--cg-iterations", type=int, default=100)
    parser.add_argument("--probes", type=int, default=10)
    parser.add_argument("--block", type=int, default=2**24, help="max_block_elements")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--single", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.single:
        kind, n = args.single.split(":")
        print(json.dumps(_one(kind, int(n), args)))
        return
    print(f"# {' '.join(sys.argv)}")
    print(
        f"# GPX ML + backward, CG path, float64, D = d = {args.dims}, sigma^2 = {args.noise}, "
        f"max_cg_iterations = {args.cg_iterations}, probes = {args.probes}, max_block_elements = {args.block}"
    )
    for run in args.runs:
        cmd = [sys.executable, __file__, "--single", run, *sys.argv[1:]]
        out = subprocess.run(cmd, capture_output=True, text=True)
        if out.returncode != 0:
            print(f"{run}: failed (exit {out.returncode}): {out.stderr[-2000:]}")
            continue
        res = json.loads(out.stdout.strip().splitlines()[-1])
        print(
            f"{res['kind']:>5} n={res['n']:>6}: peak RSS {res['peak_rss_gib']:.2f} GiB (before the evaluation "
            f"{res['rss_before_gib']:.2f}; one dense n x n float64 = {res['dense_kernel_gib']:.2f} GiB), "
            f"forward {res['forward_s']} s, forward+backward {res['total_s']} s, loss {res['loss']:.6f}, "
            f"base-kernel products {res['products']}, blocked bilinear derivatives {res['bilinear']}"
        )
        print(f"       gradient |.|-sums: {res['grad_abs_sums']}")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
