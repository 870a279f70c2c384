#!/usr/bin/env python3
"""LocalGPExplainer (BO-LIME and beyond) against LIME: inconsistency, top-5 agreement, time per explanation.

The paper's setting (Saini & Prasad): Boston housing with an ``ExtraTreesRegressor`` and scikit-learn's
breast-cancer data with ``SVC(probability=True)`` (80/20 split), repeated explanations (different seeds)
of the same test instances (the first ``--instances`` rows of the test split).

* inconsistency (the paper's metric): per instance, the scores of each repeat are made absolute and divided
  by their maximum; the std across repeats (ddof 0), averaged over the features, then over the instances;
* scores: LIME's linear coefficients; for the GP explainer both the paper's ARD relevance ``1/ℓ`` and the
  signed gradient ``∂f/∂x`` times the feature's std (made absolute by the metric);
* fidelity: top-5 agreement (|overlap| / 5) of the mean |score| over repeats with LIME at ``--lime-large``
  samples (mean |coefficient| over the same repeats) and with KernelSHAP (``--shap-samples``);
* time: wall and CPU seconds per explanation (the machine may be shared; CPU time is the fairer number).

Every explanation's scores are stored in ``benchmarks/results/local_vs_lime_scores.json.gz`` (gzip-compressed
JSON; a path ending in ``.json`` is read and written uncompressed) keyed by dataset,
method, budget, setting, instance and repeat, so partial runs (``--instances/--repeats/--budgets/
--acquisitions``) accumulate; ``benchmarks/results/local_vs_lime.txt`` is regenerated from the whole store
after every run (``--report-only`` just regenerates it). Each GP row is compared with LIME on exactly the
same (instance, repeat) cells. Repeat ``r`` of instance ``i`` uses seed ``1000 r + i`` (LIME: ``random_state``).

Usage::

    PYTHONPATH=$PWD python benchmarks/local_vs_lime.py --datasets boston --instances 20 --repeats 10 \\
        --budgets 25 50 100 --acquisitions variance --jobs 2
    PYTHONPATH=$PWD python benchmarks/local_vs_lime.py --report-only
"""

from __future__ import annotations

import argparse
import gzip
import io
import json
import os
import sys
import time
import warnings
from collections import defaultdict
from concurrent.futures import ProcessPoolExecutor

import numpy as np

BOSTON = os.environ.get("BOSTON_CSV", "/work/shared/datasets/boston_housing.csv")
HERE = os.path.dirname(os.path.abspath(__file__))
STORE = os.path.join(HERE, "results", "local_vs_lime_scores.json.gz")
REPORT = os.path.join(HERE, "results", "local_vs_lime.txt")
NOTES = os.path.join(HERE, "results", "local_vs_lime_notes.txt")  # hand-written reading, put atop the report


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
    elif name == "cancer":
        from sklearn.datasets import load_breast_cancer
        from sklearn.pipeline import make_pipeline
        from sklearn.preprocessing import StandardScaler
        from sklearn.svm import SVC

        ds = load_breast_cancer()
        X, y, names = ds.data, ds.target, list(ds.feature_names)
        Xtr, Xte, ytr, yte = train_test_split(X, y, test_size=0.2, random_state=seed)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)  # SVC(probability=True) deprecation (sklearn >= 1.9)
            model = make_pipeline(StandardScaler(), SVC(probability=True, random_state=seed)).fit(Xtr, ytr)
        score = model.score(Xte, yte)

        def predict(Z):
            return model.predict_proba(Z)[:, 1]

        mode = "classification"
    else:
        raise ValueError(f"unknown dataset {name!r}")
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


# ---------------------------------------------------------------------------------------------- workers
_CACHE: dict = {}


def _data(name):
    if name not in _CACHE:
        _CACHE[name] = load(name)
    return _CACHE[name]


def _lime_one(task, discretize: bool = False, around: bool = False):
    from lime.lime_tabular import LimeTabularExplainer

    name, budget, i, r = task
    Xtr, Xte, _, model, predict, mode, _ = _data(name)
    fn = model.predict_proba if mode == "classification" else predict
    ex = LimeTabularExplainer(
        Xtr, mode=mode, discretize_continuous=discretize, sample_around_instance=around, random_state=1000 * r + i
    )
    t0, c0 = time.perf_counter(), time.process_time()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        exp = ex.explain_instance(Xte[i], fn, num_features=Xtr.shape[1], num_samples=budget, labels=(1,))
    cpu, wall = time.process_time() - c0, time.perf_counter() - t0
    label = 1 if mode == "classification" else next(iter(exp.as_map()))
    s = np.zeros(Xtr.shape[1])
    for j, c in exp.as_map()[label]:
        s[j] = c
    return {"score": s.tolist(), "cpu": cpu, "wall": wall}


def _lime_default_one(task):
    """LIME as its users call it: ``LimeTabularExplainer``'s defaults (quartile-discretised continuous features)."""
    return _lime_one(task, discretize=True)


def _lime_local_one(task):
    """Continuous LIME sampled around the instance (``sample_around_instance=True``; the default samples around the
    training mean, so the "continuous LIME" rows fit a kernel-weighted line over the whole data cloud)."""
    return _lime_one(task, around=True)


def _gp_one(task):
    from gpytorch_explain.local import LocalGPExplainer, from_sklearn_classifier

    name, budget, i, r, setting = task
    Xtr, Xte, _, model, predict, _, _ = _data(name)
    setting = dict(setting)
    if setting.pop("output", "probability") == "logit":  # explain the logit of the class-1 probability
        predict = from_sklearn_classifier(model, 1, output="logit")
    ex = LocalGPExplainer(predict, Xtr, budget=budget, seed=1000 * r + i, **setting)
    t0, c0 = time.perf_counter(), time.process_time()
    res = ex.explain(Xte[i])
    cpu, wall = time.process_time() - c0, time.perf_counter() - t0
    assert len(res.y_samples) == budget
    return {
        "relevance": res.relevance.tolist(),
        "relevance_std": res.relevance_std.tolist(),
        "gradient": (res.gradient_mean * Xtr.std(0)).tolist(),
        "loo": float(res.fidelity),
        "nwarn": len(res.warnings),
        "cpu": cpu,
        "wall": wall,
    }


def _shap_one(task):
    import shap

    name, nsamples, i = task
    Xtr, Xte, _, _, predict, _, _ = _data(name)
    ex = shap.KernelExplainer(predict, shap.kmeans(Xtr, 10))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        vals = ex.shap_values(Xte[i : i + 1], nsamples=nsamples, silent=True)
    return {"score": np.abs(np.asarray(vals)).reshape(-1).tolist()}


# ---------------------------------------------------------------------------------------------- store
def _key(*parts) -> str:
    return "|".join(str(p) for p in parts)


def _open(path: str, mode: str):
    """Text handle on the store: gzip for ``*.gz`` (mtime 0, so equal stores give equal bytes), plain otherwise."""
    if path.endswith(".gz"):
        return io.TextIOWrapper(gzip.GzipFile(path, mode[0] + "b", mtime=0), encoding="utf-8")
    return open(path, mode[0], encoding="utf-8")


def load_store(path: str = STORE) -> dict:
    if os.path.exists(path):
        with _open(path, "r") as fh:
            return json.load(fh)
    return {"records": {}, "commands": []}


def save_store(store: dict, path: str = STORE) -> None:
    tmp = path + ".tmp"
    with _open(tmp if not path.endswith(".gz") else tmp + ".gz", "w") as fh:
        json.dump(store, fh, separators=(",", ":"))
    os.replace(tmp if not path.endswith(".gz") else tmp + ".gz", path)


def setting_label(setting: dict) -> str:
    return ",".join(f"{k}={setting[k]}" for k in sorted(setting))


def run(args, store: dict, path: str = STORE) -> None:
    setting_base = {
        "interval": args.interval,
        "lengthscale_prior_scale": args.prior_scale,
        "linear_trend": args.linear_trend == "on",
        "relevance_prior": args.relevance_prior,
    }
    if args.n_initial is not None:
        setting_base["n_initial"] = args.n_initial
    if args.num_restarts is not None:
        setting_base["num_restarts"] = args.num_restarts
    if args.raw_samples is not None:
        setting_base["raw_samples"] = args.raw_samples
    if args.output == "logit":
        setting_base["output"] = "logit"
    if args.link != "identity":
        setting_base["link"] = args.link
    if args.attribution_noise is not None:
        setting_base["attribution_noise"] = args.attribution_noise
    if args.relevance_bootstrap:  # absent: 0, a single fit (every record made before the option existed)
        setting_base["relevance_bootstrap"] = args.relevance_bootstrap
    if args.relevance_noise is not None:  # absent: learned (every record made before the option existed)
        setting_base["relevance_noise"] = args.relevance_noise
    if args.stencil != "auto":
        setting_base["stencil"] = None if args.stencil == "none" else float(args.stencil)
    if args.stencil_completion is not None:
        setting_base["stencil_completion"] = args.stencil_completion
    tasks = []
    for name in args.datasets:
        cells = [(i, r) for i in range(args.instances) for r in range(args.repeats)]
        for i in range(args.instances):
            tasks.append(("shap", _key(name, "shap", args.shap_samples, "", i, 0), (name, args.shap_samples, i)))
        for budget in sorted(set(args.budgets + [args.lime_large])):
            for i, r in cells:
                tasks.append(("lime", _key(name, "lime", budget, "", i, r), (name, budget, i, r)))
                tasks.append(("limedef", _key(name, "limedef", budget, "", i, r), (name, budget, i, r)))
                tasks.append(("limeloc", _key(name, "limeloc", budget, "", i, r), (name, budget, i, r)))
        for budget in args.budgets:
            for acq in args.acquisitions:
                setting = dict(setting_base, acquisition=acq)
                for i, r in cells:
                    key = _key(name, "gp", budget, setting_label(setting), i, r)
                    tasks.append(("gp", key, (name, budget, i, r, setting)))
    todo = [t for t in tasks if t[1] not in store["records"]]
    print(f"{len(tasks)} cells, {len(todo)} to compute (others already stored)", flush=True)
    fns = {
        "lime": _lime_one,
        "limedef": _lime_default_one,
        "limeloc": _lime_local_one,
        "gp": _gp_one,
        "shap": _shap_one,
    }
    cmd = "PYTHONPATH=$PWD python benchmarks/local_vs_lime.py " + " ".join(sys.argv[1:])
    if todo and cmd not in store["commands"]:
        store["commands"].append(cmd)
    last = time.time()
    with ProcessPoolExecutor(max_workers=args.jobs) as pool:
        futures = [(t, pool.submit(fns[t[0]], t[2])) for t in todo]
        for n, (t, fut) in enumerate(futures, 1):
            store["records"][t[1]] = fut.result()
            if time.time() - last > 60 or n == len(futures):
                save_store(store, path)
                last = time.time()
                print(f"  {n}/{len(futures)} done ({t[1]})", flush=True)


# ---------------------------------------------------------------------------------------------- report
_ABBREV = {
    "acquisition=": "",
    "interval=": "r=",
    "lengthscale_prior_scale=": "s=",
    "n_initial=": "n0=",
    "linear_trend=True": "trend",
    "linear_trend=False": "no-trend",
    "output=": "",
    "link=logit": "logit-link",
    "attribution_noise=": "an=",
    "num_restarts=": "nr=",
    "raw_samples=": "rs=",
    "repeats=True": "repeats",
    # made before stencil="auto" and the trend surrogate's broad noise prior became the defaults (2026-11-28)
    "pre_stencil=True": "pre-stencil",
    # made before the analytic acquisitions evaluated a cached posterior (2026-11-28: equal to round-off per
    # evaluation, but BO paths can part at round-off, so individual explanations differ)
    "pre_cache=True": "pre-cache",
    "relevance_prior=": "rel=",
    "relevance_bootstrap=": "bag=",
    "relevance_noise=": "rn=",
    # made before the trend surrogate was fitted from two starts (2026-11-28): only the gradient and LOO R2 differ
    "trend_start=warm": "warm-trend",  # made before the explainer replaced repeated proposals (lcb/ei/pi repeat points)
    # made with a stencil before gradient_mean took the stencil's difference where the surrogate's slope contradicts
    # it (2026-11-29): only the gradient differs
    "stencil_mean=surrogate": "surrogate-mean",
    "stencil_completion=": "sc=",
    # made while stencil_completion chose the features by doubt even when the calls sufficed for all (2026-11-29)
    "completion_pick=doubt": "doubt-pick",
    # made before the surrogates' fits used the dense objective (2026-11-30: equal to round-off per evaluation, but
    # fits and BO paths can part at round-off, so individual explanations differ)
    "pre_dense=True": "pre-dense",
    # made while the refits of an interpolating relevance fit (relevance_noise) started from the full fit and kept
    # half of the samples away from x (2026-11-30; since: cold starts, 0.3 of them)
    "subsample_start=warm-half": "warm-half",
}


def _short(setting: str) -> str:
    parts = setting.split(",")
    order = sorted(parts, key=lambda t: (not t.startswith("acquisition="), t))  # acquisition first
    text = " ".join(order)
    for long, short in _ABBREV.items():
        text = text.replace(long, short)
    return text


def _grid(cells) -> tuple[list[int], list[int]]:
    """The largest complete instances x repeats grid (repeats 0..R-1, R >= 2) inside ``cells``."""
    best: tuple[list[int], list[int]] = ([], [])
    for R in range(2, 1 + max((r for _, r in cells), default=-1) + 1):
        inst = sorted({i for i, _ in cells if all((i, r) in cells for r in range(R))})
        if len(inst) * R > len(best[0]) * len(best[1]):
            best = (inst, list(range(R)))
    return best


HEAD = (
    f"{'method':<42}{'budget':>6}{'I x R':>8}{'incons':>8}{'LIME@b':>8}{'LIME@5k':>8}{'/LIME@b':>8}"
    f"{'/5k':>6}{'top5 L5k':>9}{'top5 SHAP':>10}{'LOO R2':>8}{'cpu s':>7}{'wall s':>7}"
)


def _rows(method, budget, setting, cells, inst, reps, lime, shap_ref) -> list[str]:
    """Report lines for one method on the grid ``inst`` x ``reps`` (LIME on the same cells)."""
    full = [(i, r) for i in inst for r in reps]
    big = max(lime) if lime else None  # LIME's large budget (--lime-large, 5000 by default): the reference
    if not full or big is None or budget not in lime:
        return []
    if not all(c in lime[big] and c in lime[budget] and c in cells for c in full):
        return []

    def arr(src, field):
        return np.array([[src[(i, r)][field] for r in reps] for i in inst])

    S_big, S_b = arr(lime[big], "score"), arr(lime[budget], "score")
    ref_l = np.abs(S_big).mean(1)
    ref_s = None
    if shap_ref is not None and all((i, 0) in shap_ref for i in inst):
        ref_s = np.array([shap_ref[(i, 0)]["score"] for i in inst])
    i_big, i_b = inconsistency(S_big), inconsistency(S_b)
    out = []
    fields = (("score", "LIME"),) if method == "lime" else (("relevance", "1/l"), ("gradient", "|grad|"))
    for field, lab in fields:
        S = arr(cells, field)
        inc = inconsistency(S)
        label = "LIME" if method == "lime" else f"GP {lab} {_short(setting)}"
        t5s = f"{top5(S, ref_s):>10.2f}" if ref_s is not None else f"{'':>10}"
        # the reference itself (the same cells): its overlap with itself would read 1.00
        t5l = f"{'ref':>9}" if method == "lime" and budget == big else f"{top5(S, ref_l):>9.2f}"
        loo = f"{np.nanmean([cells[c]['loo'] for c in full]):>8.3f}" if method == "gp" else f"{'':>8}"
        cpu = np.mean([cells[c]["cpu"] for c in full])
        wall = np.mean([cells[c]["wall"] for c in full])
        out.append(
            f"{label:<42}{budget:>6}{f'{len(inst)}x{len(reps)}':>8}{inc:>8.4f}{i_b:>8.4f}{i_big:>8.4f}"
            f"{inc / i_b:>8.2f}{inc / i_big:>6.2f}{t5l}{t5s}{loo}{cpu:>7.2f}{wall:>7.2f}"
        )
    return out


def report(store: dict) -> str:
    recs = store["records"]
    by = defaultdict(dict)  # (dataset, method, budget, setting) -> {(i, r): record}
    for k, v in recs.items():
        name, method, budget, setting, i, r = k.split("|")
        by[(name, method, int(budget), setting)][(int(i), int(r))] = v
    lines = [
        "LocalGPExplainer vs LIME (benchmarks/local_vs_lime.py; generated from local_vs_lime_scores.json.gz).",
        "Inconsistency = the paper's metric (per repeat |score| / max |score|; std across repeats; mean over",
        "features, then instances). Each GP row is compared with LIME on the SAME (instance, repeat) cells",
        "(I x R = first I test instances x R seeds): 'LIME@b' = LIME at the same budget, 'LIME@5k' = at 5000",
        "samples; '/LIME@b', '/5k' = GP / LIME. top-5 = overlap of the top-5 features of the mean |score| over",
        "repeats with LIME@5000 (mean |coef|) and KernelSHAP; the LIME@5000 row is that reference ('ref'; LIME@5000",
        "with other seeds, not run here, would be the realistic ceiling of the rows' agreement), and LIME@b, run",
        "with the same seed, shares its first b perturbations with it. 1/l = the paper's ARD relevance",
        "(result.relevance); |grad| = posterior mean gradient x feature std. LOO R2 = the surrogate's",
        "leave-one-out R2 (mean over explanations). cpu/wall: seconds per explanation (the machine is shared:",
        "wall >> cpu when loaded). Setting: r = interval, s = lengthscale_prior_scale, n0 = n_initial,",
        "nr/rs = num_restarts/raw_samples of the acquisition optimiser (library defaults 2/32 when absent); 'logit':",
        "the GP explains the logit of the probability (LIME and KernelSHAP the probability).",
        "",
        "Commands that produced the stored cells:",
    ]
    lines += ["  " + c for c in store["commands"]]
    if os.path.exists(NOTES):
        with open(NOTES) as fh:
            lines += ["", fh.read().rstrip()]
    for name in sorted({k[0] for k in by}):
        lime = {k[2]: v for k, v in by.items() if k[0] == name and k[1] == "lime"}
        shap_runs = {k[2]: v for k, v in by.items() if k[0] == name and k[1] == "shap"}
        shap_ref = shap_runs[max(shap_runs)] if shap_runs else None
        lines += ["", f"=== {name}: every setting on all its cells ===", HEAD]
        for key in sorted(k for k in by if k[0] == name and k[1] in ("gp", "lime")):
            inst, reps = _grid(by[key])
            lines += _rows(key[1], key[2], key[3], by[key], inst, reps, lime, shap_ref)
        for budget in sorted({k[2] for k in by if k[0] == name and k[1] == "gp"}):
            keys = sorted(k for k in by if k[0] == name and k[1] == "gp" and k[2] == budget)
            if len(keys) < 2:
                continue
            common = set.intersection(*(set(by[k]) for k in keys))
            inst, reps = _grid(common)
            lines += ["", f"--- {name}, budget {budget}: the GP settings on their common cells ---", HEAD]
            lines += _rows("lime", budget, "", lime.get(budget, {}), inst, reps, lime, shap_ref)
            for key in keys:
                lines += _rows("gp", budget, key[3], by[key], inst, reps, lime, shap_ref)
        if shap_runs:
            lines.append(f"(KernelSHAP nsamples={max(shap_runs)}, background: 10 k-means centres of the training data)")
        for method, title, tag in _OTHER_LIMES:
            ref = {k[2]: v for k, v in by.items() if k[0] == name and k[1] == method}
            lines += _other_lime_rows(name, by, ref, title, tag)
    return "\n".join(lines) + "\n"


#: the other LIME baselines: (method, section title, column tag)
_OTHER_LIMES = (
    (
        "limedef",
        "against LIME with LimeTabularExplainer's defaults (discretize_continuous=True: quartile-bin indicators; the "
        "rows above use continuous LIME)",
        "LIMEd",
    ),
    (
        "limeloc",
        "against continuous LIME sampled around the instance (sample_around_instance=True; the continuous LIME above "
        "keeps LimeTabularExplainer's default, N(training mean, sigma^2) samples weighted by their distance to x)",
        "LIMEx",
    ),
)


def _other_lime_rows(name: str, by: dict, limedef: dict, title: str, tag: str) -> list[str]:
    """The current GP settings against another LIME baseline (``limedef``: budget -> cells), on common cells."""
    if not limedef:
        return []
    big = max(limedef)  # LIME's large budget (--lime-large)
    out = [
        "",
        f"--- {name}: {title} ---",
        f"{'method':<58}{'budget':>6}{'I x R':>8}{'1/l':>8}{'|grad|':>8}{tag + '@b':>8}{tag + '@5k':>9}"
        f"{'/' + tag + '@b':>18}{'/' + tag + '@5k':>18}",
    ]
    for budget in sorted(b for b in limedef if b != big):
        keys = [
            k
            for k in sorted(by)
            if k[0] == name and k[1] == "gp" and k[2] == budget and not any(t in k[3] for t in _OLD_RECORDS)
        ]
        for key in keys:
            common = set(by[key]) & set(limedef[budget]) & set(limedef[big])
            inst, reps = _grid(common)
            if not inst:
                continue

            def arr(src, field, inst=inst, reps=reps):
                return np.array([[src[(i, r)][field] for r in reps] for i in inst])

            i_b, i_big = inconsistency(arr(limedef[budget], "score")), inconsistency(arr(limedef[big], "score"))
            rel, grad = inconsistency(arr(by[key], "relevance")), inconsistency(arr(by[key], "gradient"))
            out.append(
                f"{'GP ' + _short(key[3]):<58}{budget:>6}{f'{len(inst)}x{len(reps)}':>8}{rel:>8.4f}{grad:>8.4f}"
                f"{i_b:>8.4f}{i_big:>9.4f}{f'{rel / i_b:.2f} / {grad / i_b:.2f}':>18}"
                f"{f'{rel / i_big:.2f} / {grad / i_big:.2f}':>18}"
            )
    return out


#: settings of records made by older code (kept for the record, left out of the default-LIME comparison)
_OLD_RECORDS = (
    "pre_stencil",
    "pre_cache",
    "repeats=True",
    "linear_trend=False",
    "trend_start=warm",
    "stencil_mean=surrogate",
    "completion_pick=doubt",
    "pre_dense",
)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--datasets", nargs="+", default=["boston", "cancer"], choices=["boston", "cancer"])
    p.add_argument("--instances", type=int, default=20)
    p.add_argument("--repeats", "--seeds", type=int, default=10, dest="repeats")
    p.add_argument("--budgets", type=int, nargs="+", default=[25, 50, 100])
    p.add_argument("--acquisitions", nargs="+", default=["variance"])
    p.add_argument("--interval", type=float, default=2.0)
    p.add_argument("--prior-scale", type=float, default=0.5, help="lengthscale_prior_scale")
    p.add_argument(
        "--linear-trend",
        choices=["on", "off"],
        default="on",
        help="LocalGPExplainer(linear_trend=...): the gradient from the surrogate with a linear trend (on, the "
        "library's default) or from the ARD RBF alone (off; every record made before the option existed)",
    )
    p.add_argument(
        "--relevance-prior",
        choices=["saas", "lognormal"],
        default="saas",
        help="LocalGPExplainer(relevance_prior=...): 1/l from a SAAS refit (the library's default) or from the "
        "acquisition surrogate's log-normal prior (every record made before the option existed)",
    )
    p.add_argument(
        "--relevance-bootstrap",
        type=int,
        default=8,
        help="LocalGPExplainer(relevance_bootstrap=...): bootstrap refits behind the relevance (8, the library's "
        "default since 2026-11-29; 0: one fit, every record made before the option existed)",
    )
    p.add_argument("--n-initial", type=int, default=None, help="n_initial (default: the library's)")
    p.add_argument(
        "--stencil", default="auto", help="LocalGPExplainer(stencil=...): 'auto' (the library's default), 'none' or δ"
    )
    p.add_argument(
        "--stencil-completion",
        type=float,
        default=None,
        help="LocalGPExplainer(stencil_completion=...) (default: the library's, 0.5 since 2026-11-29; records of "
        "settings that reach it made before are labelled stencil_completion=0.0)",
    )
    p.add_argument("--num-restarts", type=int, default=None, help="num_restarts (default: the library's)")
    p.add_argument("--raw-samples", type=int, default=None, help="raw_samples (default: the library's)")
    p.add_argument(
        "--output",
        choices=["probability", "logit"],
        default="probability",
        help="classification: what the GP explains (LIME and KernelSHAP always explain the probability)",
    )
    p.add_argument(
        "--link",
        choices=["identity", "logit"],
        default="identity",
        help="LocalGPExplainer(link=...): 'logit' models the logit of the probability and reports the probability's "
        "scores (LIME and KernelSHAP explain the probability too)",
    )
    p.add_argument(
        "--attribution-noise",
        type=float,
        default=None,
        help="LocalGPExplainer(attribution_noise=...), e.g. 1e-6 to interpolate (default: learned)",
    )
    p.add_argument(
        "--relevance-noise",
        type=float,
        default=None,
        help="LocalGPExplainer(relevance_noise=...): the SAAS relevance surrogate's fixed noise (default: learned)",
    )
    p.add_argument("--lime-large", type=int, default=5000)
    p.add_argument("--shap-samples", type=int, default=2048)
    p.add_argument("--jobs", type=int, default=1, help="worker processes (one explanation each)")
    p.add_argument("--report-only", action="store_true")
    p.add_argument("--store", default=STORE, help="the JSON score store (default: %(default)s)")
    p.add_argument("--report", default=REPORT, help="the text report (default: %(default)s)")
    args = p.parse_args(argv)
    store = load_store(args.store)
    if not args.report_only:
        run(args, store, args.store)
        save_store(store, args.store)
    text = report(store)
    with open(args.report, "w") as fh:
        fh.write(text)
    print(text)


if __name__ == "__main__":
    main()
