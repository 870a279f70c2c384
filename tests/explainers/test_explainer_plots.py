#!/usr/bin/env python3
"""Smoke tests of the explanation plots (Agg backend) and their input checks."""

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from gpytorch_explain.explainers import ExplainerOutput, plot_summary, plot_weight_maps  # noqa: E402


def test_summary_orders_features_by_mean_abs_and_labels_std():
    rng = np.random.default_rng(0)
    c = rng.normal(size=(40, 3)) * [0.1, 3.0, 1.0]
    for kind in ("beeswarm", "box"):
        ax = plot_summary(
            ExplainerOutput(c, std=0.2 * np.abs(c)),
            x=rng.normal(size=(40, 3)),
            feature_names=["a", "b", "c"],
            kind=kind,
        )
        labels = [t.get_text() for t in ax.get_yticklabels()]
        assert labels == ["a", "c", "b"]  # bottom to top: smallest to largest mean |contribution|
        assert "±1 std" in ax.get_xlabel()
        plt.close("all")
    ax = plot_summary(c, max_features=2)
    assert len(ax.get_yticklabels()) == 2 and "std" not in ax.get_xlabel()
    plt.close("all")


def test_summary_and_maps_reject_bad_input():
    with pytest.raises(ValueError, match="kind"):
        plot_summary(np.ones((3, 2)), kind="violin")
    with pytest.raises(ValueError, match="feature_names"):
        plot_summary(np.ones((3, 2)), feature_names=["a"])
    with pytest.raises(ValueError, match="image_shape"):
        plot_weight_maps(np.ones((2, 10)))
    with pytest.raises(ValueError, match="std of weights must"):
        plot_weight_maps(np.ones((2, 64)), std=np.ones((2, 63)))


def test_weight_maps_symmetric_colour_scale():
    w = np.zeros((2, 64))
    w[0, 0], w[1, 5] = 2.0, -0.5
    fig = plot_weight_maps(w, images=np.ones((2, 64)), titles=["a", "b"])
    ims = [ax.images[0] for ax in fig.axes if ax.images]
    assert len(ims) == 4
    lo, hi = ims[2].get_clim()
    assert lo == -2.0 and hi == 2.0
    plt.close(fig)
