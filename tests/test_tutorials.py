"""Every tutorial runs top to bottom in its small mode, writes its figures and prints sound numbers; every tutorial
is a jupytext percent notebook with markdown and code cells.

Each tutorial runs in a subprocess, as ``python tutorials/<name>.py`` from the repository root with
``GPYTORCH_EXPLAIN_TUTORIAL_SMALL=1``, ``MPLBACKEND=Agg`` and ``GPYTORCH_EXPLAIN_TUTORIAL_OUT`` set to a temporary
folder, the way the documentation build executes them (without a kernel).
"""

from __future__ import annotations

import os
import pathlib
import re
import subprocess
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[1]
TUTORIALS = sorted((REPO / "tutorials").glob("*.py"))


def _number(pattern: str, out: str) -> float:
    """The first number captured by ``pattern`` in ``out`` (fails the test with the output if absent)."""
    match = re.search(pattern, out)
    assert match is not None, f"{pattern!r} not found in the output:\n{out}"
    return float(match.group(1))


def _check_demo(out: str) -> None:
    assert _number(r"completeness gap \|sum of contributions - latent mean\| = (\S+)", out) < 1e-10
    assert _number(r"test MSE \(standardised y\): GPX (\S+)", out) < 0.8  # better than predicting the mean (1.0)
    assert 0.4 < _number(r"within ±1 predictive std: (\S+)", out) < 0.95
    assert "± 1 std" in out


def _check_attribution(out: str) -> None:
    assert _number(r"max \|mean gap\| (\S+),", out) < 1e-8
    assert _number(r"max \|variance gap\| (\S+)", out) < 1e-8
    ig2 = _number(r"\(6\.0, 6\.0\)\s+\S+ ± \S+\s+(\S+) ±", out)  # IG of x2 at (6, 6); the truth is 0.5 · 6 = 3
    assert abs(ig2 - 3.0) < 0.5


def _check_variational(out: str) -> None:
    assert _number(r"GPX classifier: test accuracy (\S+);", out) > 0.85
    assert _number(r"SVGP classifier: test accuracy (\S+)", out) > 0.85
    assert _number(r"completeness of the expected IG: max \|gap\| (\S+)", out) < 1e-3
    assert _number(r"largest completeness gap over the draws: (\S+)", out) < 0.05


def _check_scale(out: str) -> None:
    for name in ("exact", "inducing", "KISS-GP", "lean"):
        line = next(line for line in out.splitlines() if line.startswith(name))
        assert _number(r"RMSE (\S+)", line) < 0.2, line  # the noise std is 0.1
        assert _number(r"weight RMSE (\S+)", line) < 0.4, line


def _check_local(out: str) -> None:
    assert "with 20 black-box calls" in out
    assert "± 1 std" in out and "LOO R²" in out
    # the tree-ensemble part scores both settings over 3 seeds (values in [0, 0.5])
    for label in ("defaults", "tree setting"):
        assert 0.0 <= _number(label + r" +inconsistency of the relevance over 3 seeds: (\S+),", out) <= 0.5
        assert 0.0 <= _number(label + r" +inconsistency .*, of the gradient: (\S+)", out) <= 0.5
    # the DataFrame part: the text column is printed as text, and the pipeline received DataFrames
    assert re.search(r"^sex +(male|female) ", out, flags=re.M), out
    assert "[3 rows x 10 columns]" in out
    # the classifier part: link="logit" puts predict_proba's finite-difference gradient inside its intervals
    assert _number(r"finite-difference gradient inside two stds for (\d+) of 10 features", out) >= 8


def _check_metrics(out: str) -> None:
    assert _number(r"IG completeness gap: max \|gap\| = (\S+)", out) < 1e-8
    assert _number(r"GPX\s+(\S+)", out.split("inconsistency\n", 1)[1]) > 0.5  # faithfulness of GPX
    ridge = out.split("linear (ridge)", 1)[1].split()
    assert float(ridge[3]) == 0.0 and float(ridge[4]) == 0.0  # a global model: stability 0, inconsistency 0


def _check_400k(out: str) -> None:
    assert _number(r"\|prediction - Σ contributions\| ≤ (\S+),", out) < 1e-6
    assert "PM10: excluded" in out


#: per tutorial: the figures it must write, extra command-line arguments, and checks of what it prints
EXPECTED = {
    "demo_diabetes.py": (
        ["gpx_demo_explanation.png", "gpx_predictions.png", "gpx_weights.png"],
        ["--sample", "1"],
        _check_demo,
    ),
    "attribution_uncertainty.py": (
        ["attribution_path.png", "attribution_bars.png", "gradient_bars.png"],
        [],
        _check_attribution,
    ),
    "variational_classification.py": (
        ["digits_weight_maps.png", "digits_probability_ig_maps.png", "digit_probability_ig_bars.png"],
        [],
        _check_variational,
    ),
    "scale.py": (["scale_contributions.png", "scale_weight_curve.png"], [], _check_scale),
    "local_explain_sklearn.py": (["local_explain_sklearn.png"], [], _check_local),
    "evaluation_metrics.py": (["sufficiency.png", "summary_gpx.png", "summary_ig_box.png"], [], _check_metrics),
    "explain_400k_rows.py": (
        ["explanation_highest.png", "explanation_lowest.png", "importance.png", "weights_by_hour.png"],
        [],
        _check_400k,
    ),
}


def test_every_tutorial_has_expectations():
    assert {path.name for path in TUTORIALS} == set(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_tutorial_runs_in_small_mode(name, tmp_path):
    figures, args, check = EXPECTED[name]
    if name == "demo_diabetes.py":  # the demo's --out (scripts/demo.sh passes one)
        args = [*args, "--out", str(tmp_path / "gpx_demo_explanation.png")]
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "MPLBACKEND": "Agg",
        "GPYTORCH_EXPLAIN_TUTORIAL_SMALL": "1",
        "GPYTORCH_EXPLAIN_TUTORIAL_OUT": str(tmp_path),
    }
    proc = subprocess.run(
        [sys.executable, str(REPO / "tutorials" / name), *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, f"{name} failed:\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
    # like the README's snippets, a tutorial shows no warning its reader cannot act on
    warned = [line for line in proc.stderr.splitlines() if re.search(r"\b\w*Warning: ", line)]
    assert not warned, f"{name} warned:\n" + "\n".join(warned)
    for figure in figures:
        path = tmp_path / figure
        assert path.is_file() and path.stat().st_size > 1000, f"{name} did not write {figure}"
    check(proc.stdout)


@pytest.mark.parametrize("path", TUTORIALS, ids=[p.name for p in TUTORIALS])
def test_tutorial_is_a_percent_notebook(path):
    jupytext = pytest.importorskip("jupytext")
    notebook = jupytext.read(path)
    assert notebook.metadata["jupytext"]["text_representation"]["format_name"] == "percent"
    kinds = [cell.cell_type for cell in notebook.cells]
    assert kinds[0] == "markdown" and notebook.cells[0].source.startswith("# "), "starts with a markdown title"
    assert kinds.count("markdown") >= 2 and kinds.count("code") >= 2
    for cell in notebook.cells:
        if cell.cell_type != "markdown":
            continue
        text = cell.source
        assert text.count("$$") % 2 == 0, f"unbalanced $$ in {path.name}: {text[:200]}"
        assert ":math:" not in text and "``" not in text, f"reStructuredText in a markdown cell of {path.name}"
        assert "±2" not in text and "± 2" not in text, "uncertainty is shown as ±1 std"


def test_demo_script_keeps_its_command():
    """scripts/demo.sh runs the GPX drop-in tutorial and writes the bar chart into the current directory."""
    demo = (REPO / "scripts" / "demo.sh").read_text()
    assert "python tutorials/demo_diabetes.py --out gpx_demo_explanation.png" in demo
