"""The ``gpytorch-explain`` command line: end to end (subprocess) on small CSVs, error paths, io helpers.

The subprocess calls run ``python -m gpytorch_explain`` with this worktree first on ``PYTHONPATH``; the error paths
and ``--help`` go through :func:`gpytorch_explain.cli.main` in-process (the same code, without the start-up cost).
Numbers are checked against independent in-process computations in float64: the model rebuilt from the test's own
standardisation of its data, brute-force integrated gradients (Gauss–Legendre of autograd gradients) and their
variance from the dense posterior covariance.
"""

from __future__ import annotations

import configparser
import csv
import os
import subprocess
import sys
from pathlib import Path

import gpytorch
import numpy as np
import pytest
import torch

from gpytorch_explain import GPXModel
from gpytorch_explain.cli import dataio, explain, main, modelfile
from gpytorch_explain.cli.dataio import CLIError, Table, atomic_output, handle_nan, read_csv, split_names
from gpytorch_explain.cli.modelfile import StandardGPR, standardise

ROOT = Path(__file__).resolve().parents[2]
N, FEATURES = 60, ["a", "b", "c"]


def _command(*args: str) -> tuple[list[str], dict[str, str]]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    return [sys.executable, "-m", "gpytorch_explain", *args], env


def run_cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    command, env = _command(*args)
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def start_cli(*args: str, cwd: Path) -> subprocess.Popen:
    command, env = _command(*args)
    return subprocess.Popen(command, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def write_csv(path: Path, header: list[str], rows: list[list]) -> Path:
    with open(path, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(header)
        writer.writerows(rows)
    return path


def read_out(path: Path) -> tuple[list[str], list[dict[str, str]]]:
    with open(path, newline="") as handle:
        rows = list(csv.DictReader(handle))
    return list(rows[0]), rows


def column(rows: list[dict[str, str]], name: str) -> np.ndarray:
    return np.array([float(row[name]) for row in rows])


@pytest.fixture(scope="module")
def data():
    """Raw features on very different scales (means far from 0), a smooth target in its own units."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(N, 3)) * [1.0, 10.0, 0.1] + [0.0, 100.0, 5.0]
    y = 50.0 + 3.0 * X[:, 0] + 0.2 * (X[:, 1] - 100.0) * np.tanh(X[:, 0]) - 20.0 * (X[:, 2] - 5.0)
    y = y + 0.05 * rng.normal(size=N)
    return X, y


@pytest.fixture(scope="module")
def files(tmp_path_factory, data):
    X, y = data
    folder = tmp_path_factory.mktemp("cli")
    header = ["id", *FEATURES, "y"]
    write_csv(folder / "train.csv", header, [[f"s{i}", *X[i], y[i]] for i in range(N)])
    write_csv(folder / "rows.csv", header, [[f"s{i}", *X[i], y[i]] for i in range(5)])
    return folder


@pytest.fixture(scope="module")
def fitted(files):
    """``fit`` of both model kinds, run as two concurrent processes."""
    common = ["train.csv", "--target", "y", "--features", "a,b,c", "--iterations", "25"]
    procs = {
        kind: start_cli(
            "fit", *common, "--model", kind, *(["--quiet"] if kind == "gpr" else []), "--out", f"{kind}.pt", cwd=files
        )  # fmt: skip
        for kind in ("gpx", "gpr")
    }
    results = {kind: proc.communicate(timeout=300) for kind, proc in procs.items()}
    for kind, proc in procs.items():
        assert proc.returncode == 0, results[kind][1]
        out = results[kind][0]
        assert f"fitted {kind} on n = 60 rows, features = a,b,c" in out and "final loss" in out
    assert "GPX fit" in results["gpx"][1]  # the progress bar (tqdm writes to stderr)
    assert results["gpr"][1] == ""  # --quiet: no progress bar
    return files


@pytest.fixture(scope="module")
def gpx_file(fitted):
    return fitted / "gpx.pt"


@pytest.fixture(scope="module")
def gpr_file(fitted):
    return fitted / "gpr.pt"


def standardised(data):
    """The test's own standardisation (population std), independent of the CLI's code."""
    X, y = data
    xm, xs, ym, ys = X.mean(0), X.std(0), y.mean(), y.std()
    t = lambda a: torch.as_tensor(a, dtype=torch.float64)  # noqa: E731
    return t((X - xm) / xs), t((y - ym) / ys), ym, ys


# ----------------------------------------------------------------------------------------------- end to end
def test_gpx_explain_matches_the_model_rebuilt_in_process(files, gpx_file, data):
    res = run_cli("explain", "gpx.pt", "rows.csv", "--out", "gpx.csv", "--plots", "plots", "--row-ids", "id",
                  cwd=files)  # fmt: skip
    assert res.returncode == 0, res.stderr
    header, rows = read_out(files / "gpx.csv")
    assert header == ["id", "prediction", "prediction_std", "latent_std", "baseline"] + [
        f"contribution_{f}{s}" for f in FEATURES for s in ("", "_std")
    ]
    assert [row["id"] for row in rows] == [f"s{i}" for i in range(5)]

    payload = torch.load(gpx_file, weights_only=True)
    train_x, train_y, ym, ys = standardised(data)
    model = GPXModel(train_x, train_y)
    model.load_state_dict(payload["state_dict"])
    model.eval()
    x = train_x[:5]
    with torch.no_grad():
        predictive = model.likelihood(model(x))
        weights = model.predict_weights(x)
    np.testing.assert_allclose(column(rows, "prediction"), ym + ys * predictive.mean.numpy(), rtol=1e-9)
    np.testing.assert_allclose(column(rows, "prediction_std"), ys * predictive.variance.sqrt().numpy(), rtol=1e-7)
    contrib = np.stack([column(rows, f"contribution_{f}") for f in FEATURES], -1)
    contrib_std = np.stack([column(rows, f"contribution_{f}_std") for f in FEATURES], -1)
    np.testing.assert_allclose(contrib, ys * (weights.mean * x).numpy(), rtol=1e-7, atol=1e-9 * ys)
    np.testing.assert_allclose(contrib_std, ys * (weights.variance.sqrt() * x.abs()).numpy(), rtol=1e-6, atol=1e-9)
    # the contributions add up to prediction - baseline, and the baseline is the mean of y (z = 0 at the means)
    np.testing.assert_allclose(column(rows, "baseline"), ym, rtol=1e-12)
    np.testing.assert_allclose(contrib.sum(-1), column(rows, "prediction") - column(rows, "baseline"), atol=1e-8 * ys)
    # the fit is good: predictions of the training rows are close to y in its own units
    assert np.abs(column(rows, "prediction") - data[1][:5]).max() < 0.2 * ys

    pngs = sorted(p.name for p in (files / "plots").iterdir())
    assert pngs == sorted([f"row_s{i}.png" for i in range(5)] + ["summary.png"])
    for name in pngs:
        assert (files / "plots" / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_gpr_explain_integrated_gradients_against_brute_force(files, gpr_file, data):
    res = run_cli("explain", "gpr.pt", "rows.csv", "--out", "gpr.csv", cwd=files)
    assert res.returncode == 0, res.stderr
    _, rows = read_out(files / "gpr.csv")
    assert [row["row"] for row in rows] == [str(i) for i in range(5)]
    payload = torch.load(gpr_file, weights_only=True)
    train_x, train_y, ym, ys = standardised(data)
    model = StandardGPR(train_x, train_y)
    model.load_state_dict(payload["state_dict"])
    model.eval()
    contrib = np.stack([column(rows, f"contribution_{f}") for f in FEATURES], -1)
    contrib_std = np.stack([column(rows, f"contribution_{f}_std") for f in FEATURES], -1)
    b = train_x.mean(0)  # the baseline: the training mean
    with torch.no_grad():
        predictive = model.likelihood(model(train_x[:5]))
        f_b = model(b[None]).mean.item()
    np.testing.assert_allclose(column(rows, "prediction"), ym + ys * predictive.mean.numpy(), rtol=1e-9)
    np.testing.assert_allclose(column(rows, "baseline"), ym + ys * f_b, rtol=1e-9)
    # completeness in the target's units
    np.testing.assert_allclose(contrib.sum(-1), column(rows, "prediction") - column(rows, "baseline"), atol=1e-7 * ys)

    # brute force: IG_i = (x_i - b_i) ∫ ∂_i E[f](b + t (x - b)) dt, Gauss–Legendre of autograd gradients, and
    # Var(IG_i) from the dense posterior covariance k_post(p, q) = k(p, q) - k(p, X) (K + σ²I)⁻¹ k(X, q)
    nodes, w = np.polynomial.legendre.leggauss(48)
    t, w = torch.as_tensor((nodes + 1) / 2), torch.as_tensor(w / 2)
    outputscale = model.covar_module.outputscale.detach()
    lengthscale = model.covar_module.base_kernel.lengthscale.detach()[0]

    def k(p, q):  # the ARD RBF kernel written out (smooth at p = q, unlike a clamped squared distance)
        return outputscale * torch.exp(-0.5 * (((p[:, None, :] - q[None, :, :]) / lengthscale) ** 2).sum(-1))

    K = k(train_x, train_x) + model.likelihood.noise.detach() * torch.eye(N, dtype=torch.float64)
    alpha = torch.linalg.solve(K, train_y - model.mean_module.constant.detach())
    for r in range(2):
        x = train_x[r]
        path = (b + t[:, None] * (x - b)).requires_grad_(True)
        mean = k(path, train_x) @ alpha
        (grad,) = torch.autograd.grad(mean.sum(), path)
        ig = (x - b) * (w[:, None] * grad).sum(0)
        np.testing.assert_allclose(contrib[r], ys * ig.detach().numpy(), rtol=1e-6, atol=1e-8 * ys)
        for i in range(3):
            e = torch.zeros(3, dtype=torch.float64)
            e[i] = 1.0

            nodes_i = path.detach()

            def post(ab, nodes_i=nodes_i, e=e):
                p, q = nodes_i + ab[0] * e, nodes_i + ab[1] * e
                cov = k(p, q) - k(p, train_x) @ torch.linalg.solve(K, k(train_x, q))
                return w @ cov @ w

            hess = torch.autograd.functional.hessian(post, torch.zeros(2, dtype=torch.float64))
            var = (x[i] - b[i]) ** 2 * hess[0, 1]
            np.testing.assert_allclose(contrib_std[r, i], ys * var.clamp_min(0).sqrt().item(), rtol=1e-4, atol=1e-7)


def test_local_with_a_sklearn_model(tmp_path):
    joblib = pytest.importorskip("joblib")
    linear_model = pytest.importorskip("sklearn.linear_model")
    rng = np.random.default_rng(1)
    X = rng.normal(size=(80, 3))
    coef = np.array([3.0, -2.0, 0.5])
    y = X @ coef + 1.0
    write_csv(tmp_path / "data.csv", [*FEATURES, "label"], [[*X[i], y[i]] for i in range(80)])
    joblib.dump(linear_model.LinearRegression().fit(X, y), tmp_path / "model.joblib")
    res = run_cli("local", "--sklearn", "model.joblib", "data.csv", "--row", "3", "--target", "label",
                  "--budget", "14", "--acquisition", "variance", "--quiet", "--out", "local.csv", "--plot", "local.png",
                  cwd=tmp_path)  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert f"row 3 (line 5) of data.csv: prediction = {y[3]:.6g}" in res.stdout and "IG ± 1 std" in res.stdout
    _, rows = read_out(tmp_path / "local.csv")
    assert [row["feature"] for row in rows] == FEATURES
    np.testing.assert_allclose(column(rows, "value"), X[3], rtol=1e-12)
    grad, grad_std = column(rows, "gradient_mean"), column(rows, "gradient_std")
    assert np.all(np.abs(grad - coef) < 4 * grad_std + 0.05), (grad, grad_std)  # a linear model's gradient is coef
    ig, base = column(rows, "integrated_gradients"), column(rows, "baseline")
    np.testing.assert_allclose(ig.sum(), coef @ (X[3] - base), rtol=0.05, atol=0.05)
    np.testing.assert_allclose(column(rows, "relevance").sum(), 1.0, rtol=1e-9)
    assert (column(rows, "relevance_std") >= 0).all() and column(rows, "relevance_std").max() > 0
    assert set(column(rows, "gradient_from_stencil")) <= {0.0, 1.0}  # a flag per feature
    assert (tmp_path / "local.png").read_bytes()[:4] == b"\x89PNG"


def test_local_with_a_text_column(tmp_path, capsys):
    joblib = pytest.importorskip("joblib")
    pd = pytest.importorskip("pandas")
    pytest.importorskip("sklearn")
    from sklearn.compose import ColumnTransformer
    from sklearn.linear_model import Ridge
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import OneHotEncoder

    rng = np.random.default_rng(4)
    n = 60
    city = rng.choice(["lyon", "nice", "paris"], n)
    size = rng.normal(size=n)
    y = 2.0 * size + np.where(city == "paris", 3.0, 0.0)
    write_csv(tmp_path / "d.csv", ["size", "city", "y"], [[size[i], city[i], y[i]] for i in range(n)])
    frame = pd.read_csv(tmp_path / "d.csv")
    ct = ColumnTransformer([("onehot", OneHotEncoder(), ["city"])], remainder="passthrough")
    model = make_pipeline(ct, Ridge(alpha=1e-8)).fit(frame[["size", "city"]], frame["y"])
    joblib.dump(model, tmp_path / "m.joblib")
    args = ["local", "--sklearn", str(tmp_path / "m.joblib"), str(tmp_path / "d.csv"), "--row", "2", "--target", "y"]
    code, out, err = cli(capsys, *args, "--budget", "16", "--quiet", "--out", str(tmp_path / "o.csv"))
    assert code == 0, err
    assert f"prediction = {model.predict(frame[['size', 'city']].iloc[2:3])[0]:.6g}" in out
    _, rows = read_out(tmp_path / "o.csv")
    assert [row["value"] for row in rows][1] == city[2]  # the text column's value, not its code
    grad, grad_std = column(rows, "gradient_mean"), column(rows, "gradient_std")
    assert abs(grad[0] - 2.0) < 4 * grad_std[0] + 0.05, (grad, grad_std)
    # a missing text cell: an error naming the column unless --nan drop
    lines = (tmp_path / "d.csv").read_text().splitlines()
    cells = lines[5].split(",")  # row 4
    lines[5] = ",".join([cells[0], "", cells[2]])
    (tmp_path / "d.csv").write_text("\n".join(lines) + "\n")
    assert_error(capsys, [*args], "missing values in the text column 'city' (rows 4)", "--nan drop")
    code, _, err = cli(capsys, *args, "--budget", "16", "--quiet", "--nan", "drop")
    assert code == 0, err


def test_a_subprocess_error_is_one_line_with_status_2(files):
    res = run_cli("fit", "train.csv", "--target", "nope", "--out", "x.pt", cwd=files)
    assert res.returncode == 2
    assert res.stderr.count("\n") == 1 and "Traceback" not in res.stderr
    assert res.stderr.startswith("gpytorch-explain fit: error: train.csv: no target column 'nope'")
    assert not (files / "x.pt").exists()


# ------------------------------------------------------------------------------------ in-process: CLI paths
def cli(capsys, *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def assert_error(capsys, args, *fragments: str) -> str:
    code, _, err = cli(capsys, *args)
    assert code == 2, err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    for fragment in fragments:
        assert fragment in err, err
    return err


@pytest.mark.parametrize("command", ["fit", "explain", "local"])
def test_help_of_each_subcommand(command, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main([command, "--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert f"gpytorch-explain {command}" in out and "examples:" in out
    expected = {"fit": ["--target", "--features", "--z", "--model", "--nan"], "explain": ["--plots", "--row-ids"],
                "local": ["--sklearn", "--row", "--budget", "--acquisition", "--class-index", "--preset",
                          "--interval"]}  # fmt: skip
    for option in expected[command]:
        assert option in out


def test_console_script_and_acquisitions_are_wired():
    config = configparser.ConfigParser()
    config.read(ROOT / "setup.cfg")
    assert config["options.entry_points"]["console_scripts"].strip() == "gpytorch-explain = gpytorch_explain.cli:main"
    from gpytorch_explain.cli.local import ACQUISITIONS
    from gpytorch_explain.local.acquisition import ACQUISITIONS as LIBRARY

    assert ACQUISITIONS == LIBRARY
    from gpytorch_explain.cli.local import PRESET_NAMES
    from gpytorch_explain.local import PRESETS

    assert PRESET_NAMES == tuple(PRESETS)


def test_local_presets_and_their_overrides(tmp_path, capsys, monkeypatch):
    """--preset passes gpytorch_explain.local.PRESETS[name] to the explainer; --acquisition and --interval override
    it (the summary names the acquisition)."""
    joblib = pytest.importorskip("joblib")
    ensemble = pytest.importorskip("sklearn.ensemble")
    import gpytorch_explain.local as local

    X = np.random.default_rng(5).normal(size=(60, 3))
    write_csv(tmp_path / "d.csv", FEATURES, X.tolist())
    forest = ensemble.RandomForestRegressor(n_estimators=10, random_state=0).fit(X, X[:, 0] + X[:, 1] ** 2)
    joblib.dump(forest, tmp_path / "f.joblib")
    seen = []
    real = local.LocalGPExplainer

    def spy(*args, **kwargs):
        seen.append(kwargs)
        return real(*args, **kwargs)

    monkeypatch.setattr("gpytorch_explain.LocalGPExplainer", spy)
    base = ["local", "--sklearn", str(tmp_path / "f.joblib"), str(tmp_path / "d.csv"), "--row", "1", "--budget",
            "12", "--quiet"]  # fmt: skip
    assert main([*base, "--preset", "tree"]) == 0
    assert "(variance," in capsys.readouterr().out.splitlines()[1]
    assert {k: seen[-1][k] for k in local.PRESETS["tree"]} == dict(local.PRESETS["tree"])
    assert main([*base, "--preset", "tree", "--acquisition", "lcb", "--interval", "0.5"]) == 0
    assert "(lcb," in capsys.readouterr().out.splitlines()[1]
    assert seen[-1]["acquisition"] == "lcb" and seen[-1]["interval"] == 0.5 and seen[-1]["stencil"] is None
    assert main(base) == 0 and not set(seen[-1]) & set(local.PRESETS["tree"])  # the library's defaults


def test_fit_errors(files, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(files)
    assert_error(capsys, ["fit", "missing.csv", "--target", "y", "--out", "m.pt"], "not found: missing.csv")
    assert_error(capsys, ["fit", "train.csv", "--target", "y", "--features", "a,zz", "--out", "m.pt"],
                 "no feature column 'zz'", "the columns are id, a, b, c, y")  # fmt: skip
    # the id column is text: with the default features (all but the target) it is named with its row
    assert_error(capsys, ["fit", "train.csv", "--target", "y", "--out", "m.pt"],
                 "column 'id', row 0 (line 2): 's0' is not a number", "choose them with --features")  # fmt: skip
    (tmp_path / "empty.csv").write_text("")
    assert_error(capsys, ["fit", str(tmp_path / "empty.csv"), "--target", "y", "--out", "m.pt"], "is empty")
    (tmp_path / "header.csv").write_text("a,b,y\n")
    assert_error(capsys, ["fit", str(tmp_path / "header.csv"), "--target", "y", "--out", "m.pt"], "no data rows")
    assert_error(capsys, ["fit", "train.csv", "--target", "y", "--features", "a", "--model", "gpr", "--z", "a,b",
                          "--out", "m.pt"], "--z (separate explanation features) needs --model gpx")  # fmt: skip
    assert_error(capsys, ["fit", "train.csv", "--target", "y", "--features", "a,b", "--out",
                          str(tmp_path / "no_folder" / "m.pt")], "folder", "does not exist")  # fmt: skip
    assert not list(files.glob("m.pt*")) and not list(files.glob(".m.pt*"))


def test_nan_policies_in_fit(data, tmp_path, capsys):
    X, y = data
    rows = [[*X[i], y[i]] for i in range(N)]
    for i in (4, 9, 30):
        rows[i][1] = "" if i != 30 else "NaN"
    rows[7][3] = "NA"  # a missing target
    path = write_csv(tmp_path / "nan.csv", [*FEATURES, "y"], rows)
    assert_error(capsys, ["fit", str(path), "--target", "y", "--out", str(tmp_path / "m.pt")],
                 "missing/NaN values in target column 'y': 1 row(s) (7)")  # fmt: skip
    rows[7][3] = y[7]
    write_csv(path, [*FEATURES, "y"], rows)
    assert_error(capsys, ["fit", str(path), "--target", "y", "--out", str(tmp_path / "m.pt")],
                 "column 'b': 3 rows (4, 9, 30)", "--nan drop", "--nan mean")  # fmt: skip
    code, out, err = cli(capsys, "fit", str(path), "--target", "y", "--nan", "drop", "--iterations", "3", "--quiet",
                         "--out", str(tmp_path / "m.pt"))  # fmt: skip
    assert code == 0 and "n = 57 rows" in out and "dropped 3 row(s)" in err
    code, out, _ = cli(capsys, "fit", str(path), "--target", "y", "--nan", "mean", "--iterations", "3", "--quiet",
                       "--out", str(tmp_path / "m.pt"))  # fmt: skip
    assert code == 0 and "n = 60 rows" in out
    payload = torch.load(tmp_path / "m.pt", weights_only=True)
    keep = np.setdiff1d(np.arange(N), [4, 9, 30])
    filled = X[:, 1].copy()
    filled[[4, 9, 30]] = X[keep, 1].mean()
    np.testing.assert_allclose(payload["x_mean"][1].item(), filled.mean(), rtol=1e-12)
    np.testing.assert_allclose(payload["x_std"][1].item(), filled.std(), rtol=1e-12)


def test_gpx_with_separate_z_in_process(files, tmp_path, capsys, monkeypatch, data):
    monkeypatch.chdir(files)
    code, out, _ = cli(capsys, "fit", "train.csv", "--target", "y", "--features", "a,b", "--z", "a,b,c",
                       "--iterations", "10", "--quiet", "--out", str(tmp_path / "z.pt"))  # fmt: skip
    assert code == 0 and "z = a,b,c" in out
    code, _, _ = cli(capsys, "explain", str(tmp_path / "z.pt"), "rows.csv", "--out", str(tmp_path / "z.csv"))
    assert code == 0
    header, rows = read_out(tmp_path / "z.csv")
    assert [h for h in header if h.startswith("contribution_") and not h.endswith("_std")] == [
        "contribution_a", "contribution_b", "contribution_c"
    ]  # fmt: skip
    contrib = np.stack([column(rows, f"contribution_{f}") for f in FEATURES], -1)
    y_std = data[1].std()
    np.testing.assert_allclose(contrib.sum(-1), column(rows, "prediction") - column(rows, "baseline"),
                               atol=1e-8 * y_std)  # fmt: skip
    # the rows file needs the z columns too
    write_csv(tmp_path / "ab.csv", ["a", "b"], [[1.0, 100.0]])
    args = ["explain", str(tmp_path / "z.pt"), str(tmp_path / "ab.csv"), "--out", str(tmp_path / "o.csv")]
    assert_error(capsys, args, "no column 'c'", "was fitted on a,b,c")


def test_explain_errors(files, gpx_file, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(files)
    out = str(tmp_path / "out.csv")
    assert_error(capsys, ["explain", "nope.pt", "rows.csv", "--out", out], "model file not found: nope.pt")
    assert_error(capsys, ["explain", "gpx.pt", "nope.csv", "--out", out], "not found: nope.csv")
    assert_error(capsys, ["explain", "rows.csv", "rows.csv", "--out", out], "rows.csv is not a gpytorch-explain model")
    torch.save({"weights": torch.ones(3)}, tmp_path / "other.pt")
    assert_error(capsys, ["explain", str(tmp_path / "other.pt"), "rows.csv", "--out", out], "is not a gpytorch-explain")
    payload = torch.load(gpx_file, weights_only=True)
    payload.update(format_version=99, package_version="9.9.9")
    torch.save(payload, tmp_path / "future.pt")
    assert_error(capsys, ["explain", str(tmp_path / "future.pt"), "rows.csv", "--out", out],
                 "format version 99 (written by gpytorch-explain 9.9.9)", "reads format 1", "refit")  # fmt: skip
    # wrong feature set: the rows lack a feature the model was fitted on
    write_csv(tmp_path / "ac.csv", ["a", "c"], [[0.1, 5.0]])
    assert_error(capsys, ["explain", "gpx.pt", str(tmp_path / "ac.csv"), "--out", out],
                 "no column 'b'", "was fitted on a,b,c", "the file has a,c")  # fmt: skip
    write_csv(tmp_path / "text.csv", FEATURES, [[0.1, 100.0, 5.0], [0.2, "abc", 5.0]])
    assert_error(capsys, ["explain", "gpx.pt", str(tmp_path / "text.csv"), "--out", out],
                 "column 'b', row 1 (line 3): 'abc' is not a number")  # fmt: skip
    assert_error(capsys, ["explain", "gpx.pt", "rows.csv", "--row-ids", "key", "--out", out],
                 "no --row-ids column 'key'")  # fmt: skip
    assert not os.path.exists(out) and not list(tmp_path.glob(".out.csv*"))
    # a damaged file (standardisation of the wrong length) and a missing output folder, named before any work
    damaged = torch.load(gpx_file, weights_only=True)
    damaged["x_mean"] = damaged["x_mean"][:2]
    torch.save(damaged, tmp_path / "damaged.pt")
    assert_error(capsys, ["explain", str(tmp_path / "damaged.pt"), "rows.csv", "--out", out],
                 "damaged gpytorch-explain model file (x_mean has 2 entries for 3 features)")  # fmt: skip
    plots = tmp_path / "plots_not_made"
    assert_error(capsys, ["explain", "gpx.pt", "rows.csv", "--out", str(tmp_path / "no" / "o.csv"), "--plots",
                          str(plots)], "folder", "does not exist")  # fmt: skip
    assert not plots.exists()
    # another package version with the same format is read, with a note
    payload.update(format_version=modelfile.FORMAT_VERSION, package_version="0.0.1")
    torch.save(payload, tmp_path / "older.pt")
    code, _, err = cli(capsys, "explain", str(tmp_path / "older.pt"), "rows.csv", "--out", out)
    assert code == 0 and "written by gpytorch-explain 0.0.1" in err and "the file format is the same" in err
    assert len(read_out(Path(out))[1]) == 5


def test_explain_nan_policies_use_the_training_means(files, gpx_file, tmp_path, capsys):
    payload = torch.load(gpx_file, weights_only=True)
    rows = [[0.5, 105.0, 5.1], [0.1, "", 4.9], [-0.3, 95.0, 5.0]]
    path = write_csv(tmp_path / "nan.csv", FEATURES, rows)
    assert_error(capsys, ["explain", str(gpx_file), str(path), "--out", str(tmp_path / "o.csv")],
                 "column 'b': 1 row (1)")  # fmt: skip
    code, _, err = cli(capsys, "explain", str(gpx_file), str(path), "--nan", "drop", "--out", str(tmp_path / "d.csv"))
    assert code == 0 and "dropped 1 row(s)" in err
    assert [row["row"] for row in read_out(tmp_path / "d.csv")[1]] == ["0", "2"]
    code, _, _ = cli(capsys, "explain", str(gpx_file), str(path), "--nan", "mean", "--out", str(tmp_path / "m.csv"))
    assert code == 0
    filled = write_csv(tmp_path / "filled.csv", FEATURES, [[0.1, payload["x_mean"][1].item(), 4.9]])
    code, _, _ = cli(capsys, "explain", str(gpx_file), str(filled), "--out", str(tmp_path / "f.csv"))
    assert code == 0
    by_mean, by_hand = read_out(tmp_path / "m.csv")[1][1], read_out(tmp_path / "f.csv")[1][0]
    assert by_mean.keys() == by_hand.keys()
    for key in by_mean.keys() - {"row"}:  # the same row explained alone or in a batch: equal up to round-off
        np.testing.assert_allclose(float(by_mean[key]), float(by_hand[key]), rtol=1e-9, atol=1e-12, err_msg=key)


def test_local_errors(tmp_path, capsys):
    joblib = pytest.importorskip("joblib")
    linear_model = pytest.importorskip("sklearn.linear_model")
    X = np.random.default_rng(2).normal(size=(20, 3))
    write_csv(tmp_path / "d.csv", [*FEATURES, "label"], [[*X[i], X[i, 0]] for i in range(20)])
    joblib.dump(linear_model.LinearRegression().fit(X, X[:, 0]), tmp_path / "m.joblib")
    base = ["local", "--sklearn", str(tmp_path / "m.joblib"), str(tmp_path / "d.csv")]
    assert_error(capsys, [*base, "--row", "0"], "the model expects 3 features", "4", "--target")
    assert_error(capsys, [*base, "--row", "20", "--target", "label"], "--row 20 is out of range", "20 data rows")
    assert_error(capsys, [*base, "--row", "0", "--target", "nope"], "no --target column 'nope'")
    assert_error(capsys, ["local", "--sklearn", str(tmp_path / "d.csv"), str(tmp_path / "d.csv"), "--row", "0"],
                 "cannot load it with joblib")  # fmt: skip
    assert_error(capsys, [*base, "--row", "0", "--target", "label", "--budget", "2"], "budget = 2")


def test_local_errors_raised_while_explaining(tmp_path, capsys):
    """Errors met inside the explanation (the model's output, a bad seed, a clusterer) are one-line errors too,
    and an unwritable --out stops the command before it explains anything."""
    joblib = pytest.importorskip("joblib")
    linear_model = pytest.importorskip("sklearn.linear_model")
    cluster = pytest.importorskip("sklearn.cluster")
    X = np.random.default_rng(4).normal(size=(20, 3))
    write_csv(tmp_path / "d.csv", FEATURES, [list(X[i]) for i in range(20)])
    nan_model = linear_model.LinearRegression().fit(X, X[:, 0])
    nan_model.coef_ = np.full(3, np.nan)
    joblib.dump(nan_model, tmp_path / "nan.joblib")
    joblib.dump(linear_model.LinearRegression().fit(X, np.c_[X[:, 0], X[:, 1]]), tmp_path / "two.joblib")
    joblib.dump(linear_model.LinearRegression().fit(X, X[:, 0]), tmp_path / "m.joblib")
    joblib.dump(cluster.KMeans(2, n_init=2, random_state=0).fit(X), tmp_path / "km.joblib")

    def local(model, *extra):
        return ["local", "--sklearn", str(tmp_path / model), str(tmp_path / "d.csv"), "--row", "0", "--budget", "12",
                "--quiet", *extra]  # fmt: skip

    assert_error(capsys, local("nan.joblib"), "explaining row 0", "NaN or infinite")
    assert_error(capsys, local("two.joblib"), "explaining row 0", "multi-output regressor")
    assert_error(capsys, local("m.joblib", "--seed", "-1"), "seed must be None or an integer")
    assert_error(capsys, local("km.joblib"), "needs a regressor, got a clusterer")
    assert_error(capsys, local("m.joblib", "--out", str(tmp_path / "no" / "o.csv")), "folder", "does not exist")


def test_local_warns_when_mean_filling_the_explained_row(tmp_path, capsys):
    joblib = pytest.importorskip("joblib")
    linear_model = pytest.importorskip("sklearn.linear_model")
    X = np.random.default_rng(5).normal(size=(20, 3))
    joblib.dump(linear_model.LinearRegression().fit(X, X @ [1.0, 2.0, 3.0]), tmp_path / "m.joblib")
    rows = [list(X[i]) for i in range(20)]
    rows[3][0] = "nan"
    write_csv(tmp_path / "d.csv", FEATURES, rows)
    fill = np.delete(X[:, 0], 3).mean()
    base = ["local", "--sklearn", str(tmp_path / "m.joblib"), str(tmp_path / "d.csv"), "--budget", "12", "--quiet",
            "--nan", "mean"]  # fmt: skip
    code, _, err = cli(capsys, *base, "--row", "3")
    assert code == 0, err
    note = f"row 3 itself has missing values; --nan mean filled them with column means ({FEATURES[0]} = {fill:.6g})"
    assert note in err
    code, _, err = cli(capsys, *base, "--row", "4")  # a complete row: nothing to say
    assert code == 0 and "itself has missing values" not in err, err


def test_missing_matplotlib_is_a_clear_error(files, gpx_file, tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib now raises ImportError
    assert_error(capsys, ["explain", str(gpx_file), str(files / "rows.csv"), "--out", str(tmp_path / "o.csv"),
                          "--plots", str(tmp_path / "p")], "--plots needs matplotlib: pip install")  # fmt: skip
    assert not list(tmp_path.iterdir())  # it stopped before doing any work


def test_local_black_box_for_classifiers():
    linear_model = pytest.importorskip("sklearn.linear_model")
    from gpytorch_explain.cli.local import _black_box

    X = np.random.default_rng(3).normal(size=(40, 2))
    labels = np.where(X[:, 0] > 0, "yes", "no")
    clf = linear_model.LogisticRegression().fit(X, labels)
    predict, label = _black_box(clf, None)  # a classifier: P(second class) by default
    assert label == "P(class = 'yes')"
    np.testing.assert_allclose(predict(X[:3]), clf.predict_proba(X[:3])[:, 1])
    predict, label = _black_box(clf, 0)
    assert label == "P(class = 'no')"
    np.testing.assert_allclose(predict(X[:3]), clf.predict_proba(X[:3])[:, 0])
    with pytest.raises(CLIError, match="class_index 2 is out of range"):
        _black_box(clf, 2)
    numbered = linear_model.LogisticRegression().fit(X, np.where(X[:, 0] > 0, 2, 1))  # classes_ = [1, 2]
    predict, label = _black_box(numbered, 2)  # the label 2 (there is no column 2)
    assert label == "P(class = '2')"
    np.testing.assert_allclose(predict(X[:3]), numbered.predict_proba(X[:3])[:, 1])
    reg = linear_model.LinearRegression().fit(X, X[:, 0])
    predict, label = _black_box(reg, None)
    assert label == "prediction"
    np.testing.assert_allclose(predict(X[:3]), reg.predict(X[:3]))


# ------------------------------------------------------------------------------ atomic output under failure
def test_a_failure_midway_leaves_no_half_written_file(files, gpx_file, tmp_path, capsys, monkeypatch):
    out = tmp_path / "explanations.csv"
    out.write_text("the previous run's output\n")
    calls = []

    def failing_format_row(row_id, result, i):
        calls.append(i)
        if i == 2:
            raise RuntimeError("disk full (simulated)")
        return real_format_row(row_id, result, i)

    real_format_row = explain.format_row
    monkeypatch.setattr(explain, "format_row", failing_format_row)
    with pytest.raises(RuntimeError, match="simulated"):
        main(["explain", str(gpx_file), str(files / "rows.csv"), "--out", str(out)])
    assert calls == [0, 1, 2]  # it failed after writing two rows
    assert out.read_text() == "the previous run's output\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["explanations.csv"]

    def failing_save(obj, path):  # writes part of the file, then fails
        Path(path).write_bytes(b"PK\x03\x04 partial")
        raise OSError("no space left on device (simulated)")

    monkeypatch.setattr(modelfile.torch, "save", failing_save)
    with pytest.raises(OSError, match="simulated"):
        main(["fit", str(files / "train.csv"), "--target", "y", "--features", "a,b", "--iterations", "2", "--quiet",
              "--out", str(tmp_path / "model.pt")])  # fmt: skip
    assert sorted(p.name for p in tmp_path.iterdir()) == ["explanations.csv"]
    capsys.readouterr()


# ----------------------------------------------------------------------------------------------- io helpers
def test_read_csv_edge_cases(tmp_path):
    path = tmp_path / "t.csv"
    path.write_bytes("\ufeffa, b\n1,2\n\n3,4\n".encode())
    table = read_csv(str(path))
    assert table.header == ["a", "b"] and len(table) == 2  # BOM stripped, names trimmed, blank line skipped
    np.testing.assert_array_equal(table.numeric(["b", "a"]), [[2.0, 1.0], [4.0, 3.0]])
    path.write_text("a,b\n1,2\n3\n")
    with pytest.raises(CLIError, match="line 3 has 1 fields, the header has 2"):
        read_csv(str(path))
    path.write_text("a,a\n1,2\n")
    with pytest.raises(CLIError, match="names column 'a' twice"):
        read_csv(str(path))
    path.write_text("a,,c\n1,2,3\n")
    with pytest.raises(CLIError, match="empty column name"):
        read_csv(str(path))
    path.write_bytes(b"a,b\n\xff\xfe,1\n")
    with pytest.raises(CLIError, match="not a UTF-8 text file"):
        read_csv(str(path))
    with pytest.raises(CLIError, match="is a directory"):
        read_csv(str(tmp_path))
    # a line of empty cells is a row of missing values (it was dropped and later rows renumbered); blank lines are
    # not rows, and messages give each row's own line in the file
    path.write_text("a,b\n1,2\n,\n\n3,x\n")
    table = read_csv(str(path))
    assert len(table) == 3 and table.lines == [2, 3, 5]
    assert np.isnan(table.numeric(["a"])[1, 0]) and table.numeric(["a"])[2, 0] == 3.0
    with pytest.raises(CLIError, match=r"column 'b', row 2 \(line 5\): 'x' is not a number"):
        table.numeric(["b"])
    # lines of empty cells after the last data row (spreadsheet exports) are dropped; a record's line is where it
    # starts (a quoted field may span lines)
    path.write_text('a,b\r\n1,"x\ny"\r\n,\r\n3,4\r\n,\r\n,\r\n')
    table = read_csv(str(path))
    assert len(table) == 3 and table.lines == [2, 4, 5]
    # a first line of numbers is read as the header: a missing column's message says so
    path.write_text("0.5,1.5\n1,2\n")
    with pytest.raises(CLIError, match="every column name is a number"):
        read_csv(str(path)).numeric(["y"])


def test_table_numeric_missing_and_bad_cells():
    table = Table("t.csv", ["a", "b"], [["1", " NA "], ["2", "inf"], ["n/a", "3"]])
    values = table.numeric(["a"])
    assert values[0, 0] == 1.0 and values[1, 0] == 2.0 and np.isnan(values[2, 0])
    with pytest.raises(CLIError, match=r"column 'b', row 1 \(line 3\): 'inf' is infinite"):
        table.numeric(["b"])
    with pytest.raises(CLIError, match="no columns 'x', 'y'; the columns are a, b"):
        table.numeric(["x", "y"])


def test_handle_nan_policies():
    v = np.array([[1.0, np.nan], [np.nan, 4.0], [5.0, 8.0], [3.0, np.nan]])
    with pytest.raises(CLIError, match=r"column 'a': 1 row \(1\); column 'b': 2 rows \(0, 3\)"):
        handle_nan(v, ["a", "b"], "error", "t.csv")
    dropped, kept = handle_nan(v, ["a", "b"], "drop", "t.csv")
    np.testing.assert_array_equal(dropped, [[5.0, 8.0]])
    np.testing.assert_array_equal(kept, [2])
    filled, kept = handle_nan(v, ["a", "b"], "mean", "t.csv")
    np.testing.assert_array_equal(filled, [[1.0, 6.0], [3.0, 4.0], [5.0, 8.0], [3.0, 6.0]])
    np.testing.assert_array_equal(kept, [0, 1, 2, 3])
    given, _ = handle_nan(v, ["a", "b"], "mean", "t.csv", fill=np.array([10.0, 20.0]))
    assert given[1, 0] == 10.0 and given[0, 1] == 20.0 and given[3, 1] == 20.0
    with pytest.raises(CLIError, match="nothing is left"):
        handle_nan(np.full((2, 1), np.nan), ["a"], "drop", "t.csv")
    with pytest.raises(CLIError, match="column 'a' has no values"):
        handle_nan(np.full((2, 1), np.nan), ["a"], "mean", "t.csv")
    clean = np.ones((2, 2))
    assert handle_nan(clean, ["a", "b"], "error", "t.csv")[0] is clean


def test_atomic_output_and_small_helpers(tmp_path):
    target = tmp_path / "out.txt"
    with atomic_output(str(target)) as handle:
        handle.write("first")
    with pytest.raises(ValueError, match="boom"), atomic_output(str(target)) as handle:
        handle.write("half of the second")
        raise ValueError("boom")
    assert target.read_text() == "first" and sorted(os.listdir(tmp_path)) == ["out.txt"]
    with pytest.raises(CLIError, match="does not exist"), atomic_output(str(tmp_path / "no" / "x.txt")):
        pass
    with pytest.raises(CLIError, match="it is a directory"), dataio.atomic_path(str(tmp_path)):
        pass
    assert split_names(" a, b ,,c ") == ["a", "b", "c"] and split_names(None) is None
    with pytest.raises(CLIError, match="no column names"):
        split_names(" , ")
    mean, std = standardise(np.array([[1.0, 7.0], [3.0, 7.0], [5.0, 7.0]]))
    np.testing.assert_allclose(mean, [3.0, 7.0])
    np.testing.assert_allclose(std, [np.sqrt(8.0 / 3.0), 1.0])  # population std; a constant column gets 1


def test_standard_gpr_is_gpytorch_exact_gp():
    x = torch.randn(8, 2, dtype=torch.float64)
    model = StandardGPR(x, x[:, 0]).eval()
    assert isinstance(model, gpytorch.models.ExactGP) and model.covar_module.base_kernel.ard_num_dims == 2
    assert model(x[:3]).mean.dtype == torch.float64


def test_fit_and_explain_do_not_depend_on_units(data, tmp_path, capsys):
    """A target and features in units of 1e-13 give the unit-scale explanation times the unit (they were constant)."""
    X, y = data
    outs = {}
    for unit in (1.0, 1e-13):
        folder = tmp_path / str(unit)
        folder.mkdir()
        write_csv(folder / "t.csv", [*FEATURES, "y"], [[*(X[i] * unit), y[i] * unit] for i in range(N)])
        code, _, err = cli(capsys, "fit", str(folder / "t.csv"), "--target", "y", "--model", "gpr", "--iterations",
                           "10", "--quiet", "--out", str(folder / "m.pt"))  # fmt: skip
        assert code == 0, err
        code, _, err = cli(
            capsys, "explain", str(folder / "m.pt"), str(folder / "t.csv"), "--out", str(folder / "o.csv")
        )
        assert code == 0, err
        assert "warning" not in err, err
        outs[unit] = read_out(folder / "o.csv")[1][:5]
    for key in ("prediction", "prediction_std", "baseline", "contribution_a", "contribution_b_std"):
        np.testing.assert_allclose(column(outs[1e-13], key) * 1e13, column(outs[1.0], key), rtol=1e-6, err_msg=key)


def test_plot_file_names_never_collide(monkeypatch, tmp_path):
    # ids "a_2", "a" and "a!" sanitise to row_a_2, row_a, row_a: the third was renamed row_a_2 and overwrote the first
    from gpytorch_explain.cli import plots

    written = []
    monkeypatch.setattr(plots, "row_plot", lambda path, row_id, *rest: written.append((os.path.basename(path), row_id)))
    monkeypatch.setattr(plots, "summary_plot", lambda path, *rest: written.append((os.path.basename(path), None)))
    plots.write_plots(str(tmp_path), ["a_2", "a", "a!", "a", "A"], ["f"], {}, "y", "IG")
    names = [name for name, _ in written]
    assert len({n.lower() for n in names}) == len(names) == 6  # also apart on case-insensitive file systems
    assert written[:2] == [("row_a_2.png", "a_2"), ("row_a.png", "a")]
