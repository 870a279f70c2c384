#!/usr/bin/env python3
"""``PRESETS["smooth_classifier"]`` on smooth classifiers the preset was not tuned on, against LIME.

The preset was chosen on breast cancer / SVC (``local_vs_lime.py``). This script checks that its run-to-run
steadiness carries over to other smooth classifiers, on data bundled with scikit-learn (80/20 split, seed 0,
``StandardScaler`` in a pipeline, explaining the class-1 probability):

* ``wine_mlp``: the wine data (13 features, 3 classes) with an ``MLPClassifier`` (one hidden layer of 32 units);
* ``cancer_logreg``: breast cancer (30 features) with an L2 ``LogisticRegression`` (C = 0.3), a black box whose
  logit is linear, so the preset's logit link makes it exactly linear for the surrogate.

The first ``--instances`` test rows are each explained ``--repeats`` times (seed ``1000 r + i``, as
``local_vs_lime.py``) at ``--budget`` calls. Scores: the relevance 1/ℓ, the gradient times the feature's std,
and LIME's coefficients at the same budget and at 5,000 samples, with ``LimeTabularExplainer``'s defaults
(quartile-discretised features) and continuous (``discretize_continuous=False``). The inconsistency is
:func:`gpytorch_explain.metrics.inconsistency` (the BO-LIME paper's metric), averaged over instances; CPU seconds
are per explanation. Needs ``lime``.

Usage::

    PYTHONPATH=$PWD python benchmarks/local_smooth_classifiers.py [--instances 6 --repeats 5 --jobs 2]
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

RESULTS = Path(__file__).resolve().parent / "results"
DATASETS = ("wine_mlp", "cancer_logreg")
LIME_LARGE = 5000
_CACHE: dict = {}


def load(name: str):
    """``(X_train, X_test, fitted pipeline)`` for one of :data:`DATASETS`."""
    if name in _CACHE:
        return _CACHE[name]
    from sklearn.model_selection import train_test_split
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    if name == "wine_mlp":
        from sklearn.datasets import load_wine
        from sklearn.neural_network import MLPClassifier

        ds, clf = load_wine(), MLPClassifier((32,), max_iter=3000, random_state=0)
    elif name == "cancer_logreg":
        from sklearn.datasets import load_breast_cancer
        from sklearn.linear_model import LogisticRegression

        ds, clf = load_breast_cancer(), LogisticRegression(C=0.3, max_iter=2000)
    else:
        raise ValueError(f"unknown dataset {name!r}; choose from {DATASETS}")
    Xtr, Xte, ytr, _ = train_test_split(ds.data, ds.target, test_size=0.2, random_state=0)
    _CACHE[name] = (Xtr, Xte, make_pipeline(StandardScaler(), clf).fit(Xtr, ytr))
    return _CACHE[name]


def one(task: tuple) -> tuple[tuple, dict]:
    """One explanation: ``("gp", name, i, r, budget)`` or ``("lime"|"limed", name, i, r, samples)``."""
    import torch

    torch.set_num_threads(1)
    kind, name, i, r, budget = task
    Xtr, Xte, model = load(name)
    seed = 1000 * r + i
    if kind in ("lime", "limed"):
        from lime.lime_tabular import LimeTabularExplainer

        ex = LimeTabularExplainer(Xtr, mode="classification", discretize_continuous=kind == "limed", random_state=seed)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            exp = ex.explain_instance(
                Xte[i], model.predict_proba, num_features=Xtr.shape[1], num_samples=budget, labels=(1,)
            )
        s = np.zeros(Xtr.shape[1])
        for j, c in exp.as_map()[1]:
            s[j] = c
        return task, {"score": s}
    from gpytorch_explain.local import PRESETS, LocalGPExplainer, from_sklearn_classifier

    explainer = LocalGPExplainer(
        from_sklearn_classifier(model, 1), Xtr, budget=budget, seed=seed, **PRESETS["smooth_classifier"]
    )
    c0 = time.process_time()
    res = explainer.explain(Xte[i])
    cpu = time.process_time() - c0
    return task, {"relevance": res.relevance, "gradient": res.gradient_mean * Xtr.std(0), "cpu": cpu}


def main(argv: list[str] | None = None) -> str:
    from gpytorch_explain.metrics import inconsistency

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--datasets", nargs="+", default=list(DATASETS), choices=DATASETS)
    p.add_argument("--instances", type=int, default=6)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--budget", type=int, default=50)
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--output", default=str(RESULTS / "local_smooth_classifiers.txt"))
    args = p.parse_args(argv)
    cells = [(i, r) for i in range(args.instances) for r in range(args.repeats)]
    tasks = [
        (kind, name, i, r, b)
        for name in args.datasets
        for i, r in cells
        for kind, b in (
            ("gp", args.budget),
            ("limed", args.budget),
            ("limed", LIME_LARGE),
            ("lime", args.budget),
            ("lime", LIME_LARGE),
        )
    ]
    out: dict = {}
    with ProcessPoolExecutor(args.jobs) as pool:
        for task, value in pool.map(one, tasks):
            out[task] = value
    I, R, b = args.instances, args.repeats, args.budget

    def incons(kind, name, field, budget):
        scores = np.array([[out[(kind, name, i, r, budget)][field] for r in range(R)] for i in range(I)])
        return float(np.mean([inconsistency(s) for s in scores]))

    lines = [
        f"PRESETS['smooth_classifier'] vs LIME, {b} calls, {I} instances x {R} seeds "
        f"(benchmarks/local_smooth_classifiers.py; lower is steadier)",
        f"{'black box':<15}{'score':<10}{'incons':>8}{'LIMEd@b':>9}{'LIMEd@5k':>9}{'LIME@b':>8}{'LIME@5k':>8}"
        f"{'/LIMEd@b':>9}{'/LIMEd@5k':>10}{'/LIME@b':>8}{'/LIME@5k':>9}{'CPU s':>7}",
    ]
    for name in args.datasets:
        ld_b, ld_k = incons("limed", name, "score", b), incons("limed", name, "score", LIME_LARGE)
        lc_b, lc_k = incons("lime", name, "score", b), incons("lime", name, "score", LIME_LARGE)
        cpu = float(np.mean([out[("gp", name, i, r, b)]["cpu"] for i, r in cells]))
        for field, label in (("relevance", "1/l"), ("gradient", "|grad|")):
            v = incons("gp", name, field, b)
            lines.append(
                f"{name:<15}{label:<10}{v:>8.4f}{ld_b:>9.4f}{ld_k:>9.4f}{lc_b:>8.4f}{lc_k:>8.4f}"
                f"{v / ld_b:>9.2f}{v / ld_k:>10.2f}{v / lc_b:>8.2f}{v / lc_k:>9.2f}{cpu:>7.2f}"
            )
    lines.append("LIMEd: LimeTabularExplainer's defaults (quartile bins); LIME: continuous features")
    text = "\n".join(lines)
    print(text)
    Path(args.output).write_text(text + "\n")
    return text


if __name__ == "__main__":
    main()
