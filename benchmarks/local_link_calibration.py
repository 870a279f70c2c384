#!/usr/bin/env python3
"""Calibration of ``LocalGPExplainer`` on smooth classifiers' probabilities, with and without ``link="logit"``.

Random smooth binary "classifiers" p(x) = sigmoid(c + a.x + b x0 x1 / 2 + s sin x2) on 4, 8 or 12 standard-normal
features (about 30 % of the a_i zero), explained at one training row each (p(x) from 0.001 to 0.9996), 50 calls.
For each setting: how often the true gradient of p at x (central differences, step 1e-6) and the true integrated
gradients of p from the result's own baseline (64-node Gauss-Legendre of the true gradient along the path) lie
within two reported stds, the largest |z|, and the median relative L1 error of the IG vector.

Usage::

    PYTHONPATH=$PWD python benchmarks/local_link_calibration.py --cases 12
"""

from __future__ import annotations

import argparse
import time
import warnings

import numpy as np
import torch

from gpytorch_explain import LocalGPExplainer

SETTINGS = {
    "defaults": {},
    'link="logit", attribution_noise=1e-6': {"link": "logit", "attribution_noise": 1e-6},
}


def case(c: int):
    rng = np.random.default_rng(100 + c)
    D = (4, 8, 12)[c % 3]
    a = rng.normal(size=D) * (rng.uniform(size=D) < 0.7)
    b, s, off = rng.normal(), rng.normal(), 3 * rng.normal()

    def p(X):
        X = np.atleast_2d(X)
        g = off + X @ a + 0.5 * b * X[:, 0] * X[:, 1] + s * np.sin(X[:, 2])
        return 1 / (1 + np.exp(-g))

    data = rng.normal(size=(300, D))
    return p, data, data[c % 50]


def true_gradient(p, x, h=1e-6):
    E = np.eye(x.size)
    return np.array([(p(x + h * E[j]) - p(x - h * E[j]))[0] / (2 * h) for j in range(x.size)])


def true_ig(p, x, b, nodes=64):
    t, w = np.polynomial.legendre.leggauss(nodes)
    return (x - b) * sum(wk / 2 * true_gradient(p, b + (tk + 1) / 2 * (x - b)) for tk, wk in zip(t, w, strict=True))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cases", type=int, default=12)
    ap.add_argument("--budget", type=int, default=50)
    args = ap.parse_args()
    warnings.simplefilter("ignore")
    torch.set_num_threads(1)
    stats = {k: {"gz": [], "iz": [], "err": [], "cpu": []} for k in SETTINGS}
    for c in range(args.cases):
        p, data, x = case(c)
        tg = true_gradient(p, x)
        row = [f"case {c:2d}: {x.size:2d} features, p(x) = {p(x)[0]:.4f}"]
        for name, kw in SETTINGS.items():
            t0 = time.process_time()
            res = LocalGPExplainer(p, data, budget=args.budget, seed=c, **kw).explain(x)
            st = stats[name]
            st["cpu"].append(time.process_time() - t0)
            gz = (res.gradient_mean - tg) / np.maximum(res.gradient_std, 1e-300)
            tig = true_ig(p, x, res.baseline)
            iz = (res.integrated_gradients - tig) / np.maximum(res.integrated_gradients_std, 1e-300)
            st["gz"] += list(gz)
            st["iz"] += list(iz)
            st["err"].append(np.abs(res.integrated_gradients - tig).sum() / max(np.abs(tig).sum(), 1e-12))
            row.append(f"{name}: max |z| gradient {np.abs(gz).max():.1f}, IG {np.abs(iz).max():.1f}")
        print(" | ".join(row), flush=True)
    print()
    print(f"{args.cases} cases, {args.budget} calls")
    print(
        f"{'setting':40s} {'gradient in 2 std':>18s} {'max |z|':>8s} {'IG in 2 std':>12s} {'max |z|':>8s} "
        f"{'median |z|':>10s} {'IG rel. L1 err':>15s} {'cpu s':>6s}"
    )
    for name, st in stats.items():
        gz, iz = np.abs(st["gz"]), np.abs(st["iz"])
        print(
            f"{name:40s} {f'{(gz < 2).sum()} / {gz.size}':>18s} {gz.max():8.1f} {f'{(iz < 2).sum()} / {iz.size}':>12s} "
            f"{iz.max():8.1f} {np.median(iz):10.2f} {np.median(st['err']):15.3f} {np.mean(st['cpu']):6.1f}"
        )


if __name__ == "__main__":
    main()
