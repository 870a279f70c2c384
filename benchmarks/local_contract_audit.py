#!/usr/bin/env python3
"""Random audit of ``LocalGPExplainer``'s contract: random black boxes, data and arguments, every check the issue names.

Two parts, each case drawn from its own seed (``numpy.random.default_rng(case)``), so any line of the output can be
rerun alone with ``--contract-cases N N+1`` or ``--coverage-cases N N+1``:

* **contract** (``--contract-cases``): 1–13 features, 8–200 training rows at scales 1e-3 to 50 around 0 or 100,
  sometimes a categorical column (2 or 4 codes) and a zero-variance column; black boxes linear, tanh of a linear
  score, a step, a quadratic or constant in the standardised features; outputs as a numpy array, a list, a tensor
  or an ``(m, 1)`` column; a random acquisition or preset, budgets 4–45, ``q`` 1 or 3, sometimes ``gradient_tol``
  or ``stencil=None``; ``x`` as an array or a tensor. Checked: the black box is called on exactly the returned
  samples, as many as the budget (fewer only under ``gradient_tol``); ``x`` is the first sample; the scores have
  shape ``(D,)`` and are finite; the relevance sums to 1 (or is all 0); ``fidelity`` is finite unless every sample
  has the same value (documented NaN); a zero-variance column is never perturbed and has relevance 0; categorical
  columns take only values seen in the training data; ``summary()`` and ``plot()`` run; a second explainer with the
  same seed returns the same samples, relevance and gradient; on linear black boxes the true gradient is within 4
  stds. A ``ValueError`` (e.g. a budget below the initial design, a logit link on outputs outside [0, 1]) is
  listed as a refusal, not a failure.
* **coverage** (``--coverage-cases``): the library's defaults on random smooth black boxes with known gradients
  (a linear score plus 0.3 sin of another, a logistic, a Gaussian bump plus a slope, a quadratic; 2–10 features of
  stds 0.5–3; budgets 20–60). Reported: the features whose true gradient lies within two posterior stds, and the
  largest |z|.

Usage::

    PYTHONPATH=$PWD python benchmarks/local_contract_audit.py [--contract-cases 0 60] [--coverage-cases 0 40]
"""

from __future__ import annotations

import argparse
import sys
import time
import traceback
import warnings
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from gpytorch_explain import LocalGPExplainer  # noqa: E402
from gpytorch_explain.local import ACQUISITIONS, PRESETS  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"


def _contract_case(case: int) -> tuple[str, str, list[str]]:
    """One random contract case: (status, description, problems)."""
    rng = np.random.default_rng(case)
    D = int(rng.choice([1, 2, 3, 5, 8, 13]))
    n = int(rng.choice([8, 40, 200]))
    data = rng.normal(size=(n, D)) * rng.choice([1e-3, 1.0, 50.0]) + rng.choice([0, 100])
    cats: list[int] = []
    if D >= 3 and rng.random() < 0.4:
        cats = [D - 1]
        data[:, -1] = rng.integers(0, int(rng.choice([2, 4])), n)
    zero = None
    if D >= 3 and rng.random() < 0.3:
        zero = 0
        data[:, 0] = 3.0
    a = rng.normal(size=D) * (rng.random(D) < 0.7)
    kind = str(rng.choice(["lin", "tanh", "step", "quad", "const"], p=[0.3, 0.25, 0.2, 0.2, 0.05]))
    mu, sd = data.mean(0), data.std(0) + 1e-12

    def f(X: np.ndarray) -> np.ndarray:
        Z = (X - mu) / sd
        if kind == "lin":
            return Z @ a
        if kind == "tanh":
            return np.tanh(Z @ a)
        if kind == "step":
            return (Z @ a > 0).astype(float)
        if kind == "quad":
            return (Z @ a) ** 2 + Z[:, 0]
        return np.zeros(len(X))

    out_kind = str(rng.choice(["np", "list", "tensor", "col"]))

    def predict(X):
        y = f(np.asarray(X, dtype=float))
        return {"list": y.tolist(), "tensor": torch.as_tensor(y), "col": y[:, None]}.get(out_kind, y)

    kw: dict = {}
    if rng.random() < 0.2:
        kw.update(PRESETS[str(rng.choice(list(PRESETS)))])
    else:
        kw["acquisition"] = str(rng.choice(ACQUISITIONS))
    budget = int(rng.choice([4, 6, 10, 17, 30, 45]))
    kw.update(budget=budget, seed=case, q=int(rng.choice([1, 1, 3])))
    if cats:
        kw["categorical_features"] = cats
    if rng.random() < 0.2:
        kw["gradient_tol"] = float(rng.choice([1e-3, 0.5]))
    if rng.random() < 0.2:
        kw["stencil"] = None
    x = data[int(rng.integers(n))].copy()
    x_in = torch.as_tensor(x) if rng.random() < 0.3 else x
    desc = f"case {case}: D={D} n={n} {kind} out={out_kind} cats={cats} zero-var={zero} {kw}"
    calls = [0]

    def counting(X):
        calls[0] += len(X)
        return predict(X)

    try:
        r = LocalGPExplainer(counting, data, **kw).explain(x_in)
    except ValueError as e:
        return "refused", desc, [str(e).split("\n")[0][:160]]
    except Exception:
        return "CRASH", desc, [traceback.format_exc(limit=3)]
    problems = []
    m = len(r.y_samples)
    if calls[0] != m:
        problems.append(f"{calls[0]} rows called, {m} returned")
    if m > budget or (m != budget and "gradient_tol" not in kw):
        problems.append(f"{m} samples for a budget of {budget}")
    if not np.allclose(r.x_samples[0], x):
        problems.append("x is not the first sample")
    for name in ("relevance", "gradient_mean", "gradient_std"):
        v = getattr(r, name)
        if v.shape != (D,) or not np.all(np.isfinite(v)):
            problems.append(f"{name}: {v}")
    if np.any(r.gradient_std < 0):
        problems.append("negative gradient_std")
    if not np.isfinite(r.fidelity) and np.ptp(r.y_samples) > 0:
        problems.append(f"fidelity {r.fidelity} with varying outputs")
    total = r.relevance.sum()
    if total != 0 and abs(total - 1) > 1e-6:
        problems.append(f"relevance sums to {total}")
    if zero is not None and (r.relevance[0] != 0 or np.any(r.x_samples[:, 0] != x[0])):
        problems.append("the zero-variance column was perturbed or got relevance")
    for c in cats:
        if not set(np.unique(r.x_samples[:, c])) <= set(np.unique(data[:, c])):
            problems.append(f"unseen values of categorical column {c}")
    try:
        r.summary()
        r.plot()
        import matplotlib.pyplot as plt

        plt.close("all")
    except Exception as e:  # noqa: BLE001 (reported as a problem)
        problems.append(f"summary/plot: {e!r}")
    r2 = LocalGPExplainer(predict, data, **kw).explain(x_in)
    same = all(np.array_equal(getattr(r, k), getattr(r2, k)) for k in ("x_samples", "relevance", "gradient_mean"))
    if not same:
        problems.append("not deterministic under the seed")
    act = [j for j in range(D) if j not in cats and j != zero]
    if kind == "lin" and act:
        z = (r.gradient_mean[act] - (a / sd)[act]) / np.maximum(r.gradient_std[act], 1e-300)
        if np.abs(z).max() > 4:
            problems.append(f"true gradient outside 4 stds: z = {np.round(z, 1)}")
    return ("PROBLEM" if problems else "ok"), desc, problems


def _coverage_case(case: int) -> tuple[str, int, int, float]:
    """One random smooth black box explained with the defaults: (description, inside two stds, D, max |z|)."""
    rng = np.random.default_rng(case)
    D = int(rng.choice([2, 4, 6, 10]))
    data = rng.normal(size=(200, D)) * rng.uniform(0.5, 3, D)
    sd, mu = data.std(0), data.mean(0)
    a = rng.normal(size=D) * (rng.random(D) < 0.7) / sd
    b = rng.normal(size=D) / sd
    kind = str(rng.choice(["sinlin", "logistic", "bump", "quad"]))
    if kind == "sinlin":
        f = lambda X: (X - mu) @ a + 0.3 * np.sin((X - mu) @ b)  # noqa: E731
        g = lambda x: a + 0.3 * np.cos((x - mu) @ b) * b  # noqa: E731
    elif kind == "logistic":
        f = lambda X: 1 / (1 + np.exp(-(X - mu) @ a))  # noqa: E731
        g = lambda x: (lambda p: p * (1 - p) * a)(1 / (1 + np.exp(-(x - mu) @ a)))  # noqa: E731
    elif kind == "bump":
        f = lambda X: np.exp(-0.5 * (((X - mu) * b) ** 2).sum(1)) + (X - mu) @ a  # noqa: E731
        g = lambda x: np.exp(-0.5 * (((x - mu) * b) ** 2).sum()) * (-(x - mu) * b**2) + a  # noqa: E731
    else:
        f = lambda X: ((X - mu) @ a) ** 2 / 4 + (X - mu) @ b  # noqa: E731
        g = lambda x: ((x - mu) @ a) / 2 * a + b  # noqa: E731
    budget = int(rng.choice([20, 30, 50, 60]))
    x = data[int(rng.integers(200))]
    r = LocalGPExplainer(f, data, budget=budget, seed=case).explain(x)
    z = np.abs((r.gradient_mean - g(x)) / r.gradient_std)
    return f"case {case}: {kind}, D={D}, budget {budget}", int((z < 2).sum()), D, float(z.max())


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--contract-cases", type=int, nargs=2, default=[0, 60], metavar=("START", "STOP"))
    p.add_argument("--coverage-cases", type=int, nargs=2, default=[0, 40], metavar=("START", "STOP"))
    p.add_argument("--out", default=str(RESULTS / "local_contract_audit.txt"))
    args = p.parse_args()
    warnings.simplefilter("ignore")
    torch.set_num_threads(1)
    import matplotlib

    matplotlib.use("Agg")
    out = [f"LocalGPExplainer contract audit (benchmarks/local_contract_audit.py {' '.join(sys.argv[1:])})", ""]

    def emit(line: str) -> None:
        out.append(line)
        print(line, flush=True)

    emit("== contract ==")
    counts: dict[str, int] = {}
    t0 = time.process_time()
    for case in range(*args.contract_cases):
        status, desc, problems = _contract_case(case)
        counts[status] = counts.get(status, 0) + 1
        emit(f"{status:8s} {desc}" + (f"  -> {'; '.join(problems)}" if problems else ""))
    emit(f"contract: {counts} ({time.process_time() - t0:.0f} s CPU)")
    emit("")
    emit("== coverage of the true gradient (defaults) ==")
    inside = total = 0
    worst = 0.0
    for case in range(*args.coverage_cases):
        desc, k, d, zmax = _coverage_case(case)
        inside, total, worst = inside + k, total + d, max(worst, zmax)
        emit(f"{desc:40s} inside two stds {k}/{d}, max |z| {zmax:.2f}")
    emit(f"coverage: {inside}/{total} true gradients inside two stds, largest |z| {worst:.2f}")
    Path(args.out).write_text("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
