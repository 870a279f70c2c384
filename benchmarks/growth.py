#!/usr/bin/env python3
"""How the cost of GPX (and of a standard GPyTorch GPR) grows with the number of training rows.

Issue 4 asks how time grows from 10⁴ to 10⁵ to 4·10⁵ rows, with a slope of about 1 expected for
SGPR and SKI. ``benchmarks/scale.py`` measures whole fits, whose number of L-BFGS evaluations
varies from run to run. This script measures the two costs that set the slope:

* **one objective evaluation** (value and gradient) of the training objective, the one ``fit``
  uses: ``GPXModel.fit`` for GPX, ``ExactMarginalLogLikelihood`` for the GPR. Each evaluation is one
  Adam step with a tiny step size (``--evals`` of them after one warm-up evaluation), so the
  hyperparameters stay where they are;
* **prediction**: conditioning on all rows, plus the weight posterior (mean and standard deviation)
  of GPX, or the predictive mean and variance of the GPR, at ``--n-test`` test points.

Each (method, model, n) runs in its own spawned process, so its peak RSS is its own. The data are
the synthetic GPX prior of ``scale.py`` (``x ~ N(0, I_D)``, ``z = x``), and the kernels are
``scale.py``'s (``--method sgpr`` with ``--inducing`` points; ``--method kissgp`` with a grid over
``--dims`` ≤ 3 dimensions or an additive/product structure of 1-D grids; see ``scale.py``). The
table ends with the log–log slope of each cost between consecutive sizes and over all of them
(least squares): time ∝ n^slope. For GPX the table gives the width of its feature map: ``M`` with
inducing points; with KISS-GP, the rank r of the grid root (GPX's exact grid features, see
``gpytorch_explain.settings.use_grid_features``). A GPX evaluation costs O(n d² r²), and r grows with
the range the grid must span, which widens as n grows on unbounded data.

Usage (from the repository root, with the package importable)::

    python benchmarks/growth.py --method sgpr --sizes 10000 100000 400000
    python benchmarks/growth.py --method kissgp --dims 2 --sizes 10000 100000 400000
"""

from __future__ import annotations

import argparse
import math
import multiprocessing as mp
import os
import resource
import signal
import time
import traceback
import warnings

import gpytorch
import torch
from gpytorch import settings as gsettings

from gpytorch_explain import GPXModel
from gpytorch_explain import settings as explain_settings

try:  # run as a script from the repository root or as a module
    from scale import GPR, load_data, make_kernel
    from scale import build_parser as scale_parser
except ImportError:  # pragma: no cover
    from benchmarks.scale import GPR, load_data, make_kernel
    from benchmarks.scale import build_parser as scale_parser


class _Budget(Exception):
    pass


def _peak_rss_gib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


def _alarm(seconds: float) -> None:
    def handler(signum, frame):
        raise _Budget()

    signal.signal(signal.SIGALRM, handler)
    signal.setitimer(signal.ITIMER_REAL, max(seconds, 0.001))


def _cancel() -> None:
    signal.setitimer(signal.ITIMER_REAL, 0)


def measure(which: str, n: int, args) -> dict:
    """Time ``args.evals`` objective evaluations and one prediction for one model at ``n`` rows."""
    torch.set_num_threads(args.threads or os.cpu_count() or 1)
    warnings.filterwarnings("ignore", message="CG terminated")
    warnings.filterwarnings("ignore", category=gpytorch.utils.warnings.NumericalWarning)
    sargs = scale_parser().parse_args(
        [
            "--dataset",
            "synthetic",
            "--n",
            str(n),
            "--n-test",
            str(args.n_test),
            "--method",
            args.method,
            "--inducing",
            str(args.inducing),
            "--dims",
            str(args.dims),
            "--kiss-structure",
            args.kiss_structure,
            "--seed",
            str(args.seed),
        ]
        + (["--grid-size", str(args.grid_size)] if args.grid_size else [])
    )
    data = load_data(sargs)
    x, y, x_test = data["x"], data["y"], data["x_test"]
    res = {"model": which, "n": n, "rss_data": _peak_rss_gib()}
    torch.manual_seed(args.seed)
    likelihood = gpytorch.likelihoods.GaussianLikelihood().double()
    likelihood.noise = 0.01 if which == "gpx" else 0.1
    kernel = make_kernel(sargs, x, likelihood).double()
    if which == "gpx":
        model = GPXModel(x, y, likelihood=likelihood, base_kernel=kernel)
    else:
        model = GPR(x, y, likelihood, kernel).double()

    # objective evaluations: value and gradient, through the same path as a fit
    if which == "gpx":

        def steps(k: int) -> None:
            model.fit(optimizer="adam", max_iter=k, lr=1e-6)

    else:
        mll = gpytorch.mlls.ExactMarginalLogLikelihood(likelihood, model)
        opt = torch.optim.Adam(model.parameters(), lr=1e-6)

        def steps(k: int) -> None:
            model.train()
            for _ in range(k):
                opt.zero_grad()
                loss = -mll(model(x), y)
                loss.backward()
                opt.step()

    _alarm(60 * args.max_minutes)
    try:
        t0 = time.perf_counter()
        steps(1)  # warm-up (first-call allocations)
        res["first_eval_s"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        steps(args.evals)
        res["eval_s"] = (time.perf_counter() - t0) / args.evals
    except _Budget:
        res["note"] = f"objective stopped at the {args.max_minutes} min budget"
    finally:
        _cancel()
    res["rss_fit"] = _peak_rss_gib()

    # prediction: conditioning on all rows + the test points
    model.eval()
    likelihood.eval()
    love = args.method != "sgpr"
    _alarm(60 * args.max_minutes)
    try:
        t0 = time.perf_counter()
        with torch.no_grad(), gsettings.fast_pred_var(love):
            if which == "gpx":
                post = model.predict_weights(x_test)
            else:
                post = model(x_test)
            post.mean, post.variance  # noqa: B018 (force both)
        res["pred_s"] = time.perf_counter() - t0
    except _Budget:
        res["note"] = (res.get("note", "") + "; " if "note" in res else "") + (
            f"prediction stopped at the {args.max_minutes} min budget"
        )
    finally:
        _cancel()
    res["rss_pred"] = _peak_rss_gib()
    if which == "gpx":  # width of the feature map (M inducing points, or the rank of the KISS-GP grid root)
        with torch.no_grad():
            op = model.covar_module(model.train_inputs[0][:2]).evaluate_kernel()
        res["width"] = op.phi.size(-1) if hasattr(op, "phi") else None
    return res


def _child(which: str, n: int, args, conn) -> None:
    try:
        conn.send(measure(which, n, args))
    except BaseException as exc:
        conn.send(
            {"model": which, "n": n, "note": f"error: {type(exc).__name__}: {exc}", "trace": traceback.format_exc()}
        )
    finally:
        conn.close()


def run(which: str, n: int, args) -> dict:
    ctx = mp.get_context("spawn")
    recv, send = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_child, args=(which, n, args, send))
    proc.start()
    send.close()
    result = None
    try:
        if recv.poll(60 * (2 * args.max_minutes + 5)):
            try:
                result = recv.recv()
            except EOFError:
                result = None
        proc.join(timeout=30)
    finally:
        if proc.is_alive():
            os.kill(proc.pid, signal.SIGKILL)
            proc.join()
    return result or {"model": which, "n": n, "note": f"process ended without a result (exit {proc.exitcode})"}


def slope(points: list[tuple[int, float]]) -> float:
    """Least-squares slope of log(time) against log(n)."""
    pts = [(math.log(n), math.log(t)) for n, t in points if t and t > 0 and math.isfinite(t)]
    if len(pts) < 2:
        return math.nan
    mx = sum(p[0] for p in pts) / len(pts)
    my = sum(p[1] for p in pts) / len(pts)
    sxx = sum((p[0] - mx) ** 2 for p in pts)
    return sum((p[0] - mx) * (p[1] - my) for p in pts) / sxx


def _f(v, spec=".2f") -> str:
    return "–" if v is None or (isinstance(v, float) and math.isnan(v)) else format(v, spec)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--method", choices=["sgpr", "kissgp"], default="sgpr")
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000, 400_000])
    parser.add_argument("--models", nargs="+", choices=["gpx", "gpr"], default=["gpx", "gpr"])
    parser.add_argument("--evals", type=int, default=3, help="timed objective evaluations (after one warm-up)")
    parser.add_argument("--n-test", type=int, default=1000)
    parser.add_argument("--inducing", type=int, default=256)
    parser.add_argument("--dims", type=int, default=3)
    parser.add_argument("--grid-size", type=int, default=None)
    parser.add_argument("--kiss-structure", choices=["auto", "grid", "additive", "product"], default="auto")
    parser.add_argument("--max-minutes", type=float, default=10.0, help="budget for each phase of each run")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    print(
        f"cost growth, synthetic GPX prior (D = d = {args.dims}), method {args.method}"
        + (f" (M = {args.inducing})" if args.method == "sgpr" else f" (structure {args.kiss_structure})")
        + f", {args.n_test} test points, float64, torch {torch.__version__}, gpytorch {gpytorch.__version__}, "
        f"{args.threads or os.cpu_count()} threads; GPX dense limit {explain_settings.max_cholesky_size.value()}",
        flush=True,
    )
    rows: dict[str, list[dict]] = {m: [] for m in args.models}
    print(
        "\n| model | n | s per objective evaluation | first evaluation s | prediction s | peak RSS GiB | "
        "feature width | note |"
    )
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
    for n in args.sizes:
        for which in args.models:
            r = run(which, n, args)
            rows[which].append(r)
            print(
                f"| {which} | {n} | {_f(r.get('eval_s'), '.3f')} | {_f(r.get('first_eval_s'))} | "
                f"{_f(r.get('pred_s'))} | {_f(r.get('rss_pred'))} | {r.get('width') or '–'} | {r.get('note', '')} |",
                flush=True,
            )
            if "trace" in r:
                print(r["trace"])

    print("\nlog-log slopes (time ∝ n^slope)")
    print(
        "| model | cost | "
        + " | ".join(f"{a} → {b}" for a, b in zip(args.sizes, args.sizes[1:], strict=False))
        + " | all |"
    )
    print("| --- | --- |" + " ---: |" * len(args.sizes))
    for which, rs in rows.items():
        for key, label in (("eval_s", "objective evaluation"), ("pred_s", "prediction")):
            pts = [(r["n"], r.get(key, math.nan)) for r in rs]
            pair = [_f(slope([a, b])) for a, b in zip(pts, pts[1:], strict=False)]
            print(f"| {which} | {label} | " + " | ".join(pair) + f" | {_f(slope(pts))} |")


if __name__ == "__main__":
    main()
