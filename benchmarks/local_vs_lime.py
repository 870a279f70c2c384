#!/usr/bin/env python3
"""LocalGPExplainer (BO-LIME and beyond) against LIME: inconsistency, top-5 agreement, time per explanation.

The paper's setting (Saini & Prasad): Boston housing with an ``ExtraTreesRegressor`` and scikit-learn's
breast-cancer data with ``SVC(probability=True)`` (80/20 split), repeated explanations (different seeds)
of the same test instances.

* inconsistency (the paper's metric): per instance, the scores of each repeat are made absolute and divided
  by their maximum; the std across repeats, averaged over the features, then over the instances;
* scores: LIME's linear coefficients; for the GP explainer both the paper's ARD relevance ``1/ℓ`` and the
  signed gradient ``∂f/∂x`` (made absolute by the metric) in the units of the standardised features;
* fidelity: top-5 agreement (|overlap| / 5) of the mean |score| with LIME at 5,000 samples and with
  KernelSHAP (``nsamples`` below); the GP scores are compared per feature scale, so the gradient is
  multiplied by the feature's std (LIME standardises its features internally too);
* time: wall and CPU seconds per explanation (the machine may be shared; CPU time is the fairer number).

Usage::

    PYTHONPATH=$PWD python benchmarks/local_vs_lime.py            # the full setting (hours on 2 cores)
    PYTHONPATH=$PWD python benchmarks/local_vs_lime.py --quick    # 3 instances x 4 repeats, budgets 25/50
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import warnings

import numpy as np

BOSTON = os.environ.get("BOSTON_CSV", "/work/shared/datasets/boston_housing.csv")


def load(name: str, seed: int = 0):
    from sklearn.model_selection import train_test_split

    if name == "boston":
        from sklearn.ensemble import ExtraTreesRegressor

        raw = np.genfromtxt(BOSTON, delimiter=",", names=True)
        names = list(raw.dtype.names)
        data = np.column_stack([raw[n] for n in names]).astype(np.float64)
        X, y, names = data[:, :-1], data[:, -1], names[:-1]
        Xtr, Xte, ytr, yte = train_test_split(X, y, test_size=0.2, random_state=seed)
        model = ExtraTreesRegressor(n_estimators=100, random_state=seed).fit(Xtr, ytr)
        score = model.score(Xte, yte)

        def predict(Z):
            return model.predict(Z)

        mode = "regression"
    else:
        from sklearn.datasets import load_breast_cancer
        from sklearn.pipeline import make_pipeline
        from sklearn.preprocessing import StandardScaler
        from sklearn.svm import SVC

        ds = load_breast_cancer()
        X, y, names = ds.data, ds.target, list(ds.feature_names)
        Xtr, Xte, ytr, yte = train_test_split(X, y, test_size=0.2, random_state=seed)
        model = make_pipeline(StandardScaler(), SVC(probability=True, random_state=seed)).fit(Xtr, ytr)
        score = model.score(Xte, yte)

        def predict(Z):
            return model.predict_proba(Z)[:, 1]

        mode = "classification"
    return Xtr, Xte, names, model, predict, mode, score


def inconsistency(scores: np.ndarray) -> float:
    """``scores``: (instances, repeats, D) -> the paper's metric averaged over instances."""
    a = np.abs(scores)
    a = a / np.maximum(a.max(-1, keepdims=True), 1e-300)
    return float(a.std(axis=1).mean(-1).mean())


def top5(scores: np.ndarray, ref: np.ndarray) -> float:
    """Mean over instances of |top5(mean |scores|) ∩ top5(ref)| / 5; ``scores`` (I, R, D), ``ref`` (I, D)."""
    a = np.abs(scores).mean(1)
    return float(np.mean([len(set(np.argsort(-a[i])[:5]) & set(np.argsort(-ref[i])[:5])) / 5 for i in range(len(a))]))


def lime_scores(Xtr, instances, predict, model, mode, budget, repeats):
    from lime.lime_tabular import LimeTabularExplainer

    D = Xtr.shape[1]
    out = np.zeros((len(instances), repeats, D))
    times = []
    fn = model.predict_proba if mode == "classification" else predict
    for i, x in enumerate(instances):
        for r in range(repeats):
            ex = LimeTabularExplainer(Xtr, mode=mode, discretize_continuous=False, random_state=1000 * r + i)
            t0 = time.process_time()
            exp = ex.explain_instance(x, fn, num_features=D, num_samples=budget, labels=(1,))
            times.append(time.process_time() - t0)
            label = 1 if mode == "classification" else next(iter(exp.as_map()))
            for j, c in exp.as_map()[label]:
                out[i, r, j] = c
    return out, float(np.mean(times))


def shap_scores(Xtr, instances, predict, nsamples):
    import shap

    background = shap.kmeans(Xtr, 10)
    ex = shap.KernelExplainer(predict, background)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        vals = ex.shap_values(np.asarray(instances), nsamples=nsamples, silent=True)
    return np.abs(np.asarray(vals))


def gp_scores(Xtr, instances, predict, acquisition, budget, repeats, interval, q, prior_scale=None):
    from gpytorch_explain.local import LocalGPExplainer

    D = Xtr.shape[1]
    rel = np.zeros((len(instances), repeats, D))
    grad = np.zeros_like(rel)
    wall, cpu, fid, nwarn = [], [], [], 0
    sd = Xtr.std(0)
    extra = {} if prior_scale is None else {"lengthscale_prior_scale": prior_scale}
    for i, x in enumerate(instances):
        for r in range(repeats):
            ex = LocalGPExplainer(
                predict, Xtr, acquisition=acquisition, budget=budget, seed=1000 * r + i, interval=interval, q=q, **extra
            )
            t0, c0 = time.perf_counter(), time.process_time()
            res = ex.explain(x)
            wall.append(time.perf_counter() - t0)
            cpu.append(time.process_time() - c0)
            assert len(res.y_samples) == budget
            rel[i, r] = res.relevance
            grad[i, r] = res.gradient_mean * sd  # per feature std, as LIME's standardised coefficients
            fid.append(res.fidelity)
            nwarn += len(res.warnings)
    return rel, grad, float(np.mean(wall)), float(np.mean(cpu)), float(np.nanmean(fid)), nwarn


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="3 instances x 4 repeats, budgets 25 and 50")
    p.add_argument("--datasets", nargs="+", default=["boston", "cancer"])
    p.add_argument("--instances", type=int, default=20)
    p.add_argument("--repeats", type=int, default=10)
    p.add_argument("--budgets", type=int, nargs="+", default=[25, 50, 100])
    p.add_argument(
        "--acquisitions", nargs="+", default=["lcb", "ei", "pi", "variance", "integrated_variance", "gradient"]
    )
    p.add_argument("--interval", type=float, default=1.0)
    p.add_argument("--q", type=int, default=1)
    p.add_argument("--prior-scale", type=float, default=None, help="lengthscale_prior_scale (default: the library's)")
    p.add_argument("--no-shap", action="store_true", help="skip KernelSHAP (top-5 vs SHAP reported as nan)")
    p.add_argument("--lime-large", type=int, default=5000)
    p.add_argument("--shap-samples", type=int, default=2048)
    args = p.parse_args(argv)
    if args.quick:
        args.instances, args.repeats, args.budgets = 3, 4, [25, 50]
    print("command: python " + " ".join(sys.argv))
    print(
        f"instances={args.instances} repeats={args.repeats} budgets={args.budgets} interval={args.interval} q={args.q}"
        f" prior_scale={args.prior_scale} (None: library default)"
    )
    for name in args.datasets:
        Xtr, Xte, names, model, predict, mode, score = load(name)
        instances = Xte[: args.instances]
        print(f"\n=== {name}: D={Xtr.shape[1]}, black box test score {score:.3f} ({type(model).__name__}) ===")
        big, t_big = lime_scores(Xtr, instances, predict, model, mode, args.lime_large, args.repeats)
        ref_lime = np.abs(big).mean(1)
        if args.no_shap:
            ref_shap = np.full((len(instances), Xtr.shape[1]), np.nan)
        else:
            ref_shap = shap_scores(Xtr, instances, predict, args.shap_samples)
        print(
            f"LIME@{args.lime_large}: inconsistency {inconsistency(big):.4f}, top-5 vs KernelSHAP "
            f"{top5(big, ref_shap):.2f}, cpu {t_big:.2f} s/expl"
        )
        print(
            f"{'method':<28}{'budget':>7}{'incons':>9}{'top5 LIME':>10}{'top5 SHAP':>10}{'LOO R2':>8}"
            f"{'wall s':>8}{'cpu s':>8}"
        )
        for budget in args.budgets:
            small, t_small = lime_scores(Xtr, instances, predict, model, mode, budget, args.repeats)
            print(
                f"{'LIME':<28}{budget:>7}{inconsistency(small):>9.4f}{top5(small, ref_lime):>10.2f}"
                f"{top5(small, ref_shap):>10.2f}{'':>8}{'':>8}{t_small:>8.2f}"
            )
            for acq in args.acquisitions:
                rel, grad, wall, cpu, fid, nwarn = gp_scores(
                    Xtr, instances, predict, acq, budget, args.repeats, args.interval, args.q, args.prior_scale
                )
                for label, sc in ((f"GP {acq} relevance 1/l", rel), (f"GP {acq} |gradient|", grad)):
                    print(
                        f"{label:<28}{budget:>7}{inconsistency(sc):>9.4f}{top5(sc, ref_lime):>10.2f}"
                        f"{top5(sc, ref_shap):>10.2f}{fid:>8.3f}{wall:>8.2f}{cpu:>8.2f}",
                        flush=True,
                    )
                if nwarn:
                    print(f"    ({nwarn} fit/acquisition warnings in {args.instances * args.repeats} explanations)")


if __name__ == "__main__":
    main()
