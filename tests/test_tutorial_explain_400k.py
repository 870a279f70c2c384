"""The 400k-row explanation tutorial runs end to end in quick mode on generated (synthetic) data."""

import importlib.util
import math
import pathlib

import numpy as np

TUTORIAL = pathlib.Path(__file__).resolve().parents[1] / "tutorials" / "explain_400k_rows.py"


def _load_tutorial():
    spec = importlib.util.spec_from_file_location("explain_400k_rows", TUTORIAL)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_synthetic_frame_looks_like_the_beijing_file():
    tutorial = _load_tutorial()
    frame = tutorial.synthetic_beijing(500, seed=1)
    assert list(frame)[-1] == "PM2.5" and {"PM10", "wd", "station", "hour", "month"} <= set(frame)
    assert all(len(v) == 500 for v in frame.values())
    assert np.isnan(frame["CO"]).any() and np.isnan(frame["PM2.5"]).any()
    assert frame["wd"].dtype.kind == "U"


def test_quick_run_on_synthetic_data(tmp_path, capsys):
    tutorial = _load_tutorial()
    results = tutorial.main(
        [
            "--synthetic",
            "4000",
            "--quick",
            "--subset",
            "1500",
            "--inducing",
            "12",
            "--max-iter",
            "8",
            "--refine-iter",
            "2",
            "--n-explain",
            "300",
            "--samples",
            "20",
            "--n-check",
            "100",
            "--no-progress",
            "--threads",
            "1",
            "--out",
            str(tmp_path),
        ]
    )
    out = capsys.readouterr().out
    assert "PM10: excluded" in out and "step 3b" in out
    names = results["names"]
    assert len(names) == 12 and "PM10" not in names and "day" not in names and "PM2.5" not in names
    for key in ("rmse", "rmse_all_rows", "rmse_subset", "rmse_ols", "rmse_ugm3", "fit_loss", "contribution_sd_median"):
        assert math.isfinite(results[key]), key
    assert results["rmse"] < 1.0  # better than predicting the mean of the standardised target
    importance, sd = results["importance"], results["importance_sd"]
    assert importance.shape == (12,) and np.isfinite(importance).all() and (importance >= 0).all()
    assert np.isfinite(sd).all() and (sd > 0).all()
    assert results["contribution_sd_median"] > 0
    assert all(0.0 <= v <= 1.0 for v in results["coverage"].values())
    assert all(np.isfinite(g).all() for g in results["group_weights"].values())
    assert max(results["explain_gaps"]) < 1e-6  # contributions add up; zᵀCov[w]z is the latent variance
    assert 0.0 <= results["split_half_within"] <= 1.0
    for path in results["plots"]:  # empty without matplotlib
        assert pathlib.Path(path).is_file() and pathlib.Path(path).parent == tmp_path
