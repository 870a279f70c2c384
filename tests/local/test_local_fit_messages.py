"""Which surrogate-fit outcomes reach ``result.warnings``: intermediate refits cut at their limit by design are not
reported; a final fit that stops at its limit is continued once, kept as it was if the continuation gains at most
``CONVERGED_IMPROVEMENT`` per sample, and reported with its numbers if it still has not converged."""

import numpy as np
import pytest
import torch
from botorch.optim.core import OptimizationStatus

from gpytorch_explain.local import LocalGPExplainer
from gpytorch_explain.local import surrogate as S


def _model():
    g = torch.Generator().manual_seed(0)
    U = torch.rand(15, 3, generator=g, dtype=torch.float64) * 2 - 1
    y = torch.sin(3 * U[:, 0]) + U[:, 1]
    return S.make_surrogate(U, (y - y.mean()) / y.std())


def _script(monkeypatch, outcomes):
    """Replace the L-BFGS-B run by scripted (status, fval) outcomes, each shifting the noise so that we can tell
    which fit's hyperparameters the model ends with."""
    calls = []

    def fake(model, maxiter):
        status, fval = outcomes[len(calls)]
        calls.append(maxiter)
        with torch.no_grad():
            model.likelihood.noise_covar.raw_noise.add_(1.0)
        msgs = [] if status is OptimizationStatus.SUCCESS else [f"surrogate fit (n=15): {status.name}: limit"]
        return msgs, status, fval

    monkeypatch.setattr(S, "_fit_once", fake)
    return calls


def _raw_noise(model):
    return model.likelihood.noise_covar.raw_noise.detach().item()


def test_intermediate_fit_at_its_limit_is_not_reported(monkeypatch):
    model = _model()
    start = _raw_noise(model)
    calls = _script(monkeypatch, [(OptimizationStatus.STOPPED, 1.0)])
    assert S.fit_surrogate(model, maxiter=7, final=False) == []
    assert calls == [7] and _raw_noise(model) == start + 1.0


def test_final_fit_converged_in_value_keeps_the_first_fit(monkeypatch):
    model = _model()
    start = _raw_noise(model)
    _script(monkeypatch, [(OptimizationStatus.STOPPED, 1.0), (OptimizationStatus.STOPPED, 1.0 - 0.5e-6)])
    assert S.fit_surrogate(model, maxiter=5) == []
    assert _raw_noise(model) == start + 1.0  # the continuation's drift is undone


def test_final_fit_that_converges_when_continued_is_kept_silently(monkeypatch):
    model = _model()
    start = _raw_noise(model)
    _script(monkeypatch, [(OptimizationStatus.STOPPED, 1.0), (OptimizationStatus.SUCCESS, 0.9)])
    assert S.fit_surrogate(model, maxiter=5) == []
    assert _raw_noise(model) == start + 2.0


def test_final_fit_still_improving_is_reported_with_numbers(monkeypatch):
    model = _model()
    _script(monkeypatch, [(OptimizationStatus.STOPPED, 1.0), (OptimizationStatus.STOPPED, 0.9)])
    (msg,) = S.fit_surrogate(model, maxiter=5)
    assert "did not converge in 10 L-BFGS-B iterations" in msg and "1 -> 0.9" in msg


def test_unconverged_fit_says_how_far_the_watched_quantity_moved(monkeypatch):
    model = _model()
    _script(monkeypatch, [(OptimizationStatus.STOPPED, 1.0), (OptimizationStatus.STOPPED, 0.9)])
    watch = lambda m: m.likelihood.noise_covar.raw_noise  # noqa: E731 (the scripted continuation adds 1.0 to it)
    (msg,) = S.fit_surrogate(model, maxiter=5, watch=watch, watch_label="raw noise")
    assert "(the raw noise moved by up to 1 over them)" in msg


def test_watch_does_not_change_the_fit():
    plain, watched = _model(), _model()
    S.fit_surrogate(plain, maxiter=3)
    msgs = S.fit_surrogate(watched, maxiter=3, watch=lambda m: m.covar_module.lengthscale, watch_label="lengthscales")
    assert any("the lengthscales moved by up to" in m for m in msgs)
    for (k, a), (_, b) in zip(plain.state_dict().items(), watched.state_dict().items(), strict=True):
        assert torch.equal(a, b), k


def test_real_fit_with_a_tiny_limit_is_reported_and_a_long_one_is_not():
    model = _model()
    assert any("did not converge" in m for m in S.fit_surrogate(model, maxiter=1))
    assert S.fit_surrogate(_model(), maxiter=1, final=False) == []
    assert S.fit_surrogate(_model(), maxiter=500) == []


@pytest.mark.parametrize("acquisition", ["variance", "lcb"])
def test_explainer_on_a_smooth_black_box_has_no_fit_warnings(acquisition):
    data = np.random.RandomState(0).randn(200, 4)
    f = lambda X: 2.0 * X[:, 0] - np.sin(X[:, 1]) + 0.5 * X[:, 2] ** 2  # noqa: E731
    result = LocalGPExplainer(f, data, acquisition=acquisition, budget=20, seed=0, raw_samples=16).explain(data[0])
    assert not [w for w in result.warnings if "surrogate fit" in w], result.warnings


def _script_messages(monkeypatch, outcomes):
    """Like ``_script`` with each outcome's messages given: (status, fval, messages)."""
    calls = []

    def fake(model, maxiter):
        status, fval, msgs = outcomes[len(calls)]
        calls.append(maxiter)
        with torch.no_grad():
            model.likelihood.noise_covar.raw_noise.add_(1.0)
        return list(msgs), status, fval

    monkeypatch.setattr(S, "_fit_once", fake)
    return calls


ABNORMAL = [
    "surrogate fit (n=15): FAILURE: ABNORMAL: ",
    "surrogate fit (n=15): OptimizationWarning: `scipy_minimize` terminated with status "
    "OptimizationStatus.FAILURE, displaying original message from `scipy.optimize.minimize`: ABNORMAL: ",
]


def test_final_fit_stopped_by_its_line_search_at_the_optimum_is_kept_silently(monkeypatch):
    model = _model()
    start = _raw_noise(model)
    other = "surrogate fit (n=15): UserWarning: something else"
    calls = _script_messages(
        monkeypatch,
        [(OptimizationStatus.FAILURE, 1.0, ABNORMAL + [other]), (OptimizationStatus.FAILURE, 1.0 - 0.5e-6, ABNORMAL)],
    )
    assert S.fit_surrogate(model, maxiter=5) == [other]  # the line-search stop is dropped, other warnings stay
    assert calls == [5, 5] and _raw_noise(model) == start + 1.0  # the continuation is undone


def test_final_fit_stopped_by_its_line_search_before_the_optimum_keeps_the_continuation(monkeypatch):
    model = _model()
    start = _raw_noise(model)
    _script_messages(monkeypatch, [(OptimizationStatus.FAILURE, 1.0, ABNORMAL), (OptimizationStatus.SUCCESS, 0.8, [])])
    assert S.fit_surrogate(model, maxiter=5) == []
    assert _raw_noise(model) == start + 2.0
    model = _model()
    _script_messages(
        monkeypatch, [(OptimizationStatus.FAILURE, 1.0, ABNORMAL), (OptimizationStatus.FAILURE, 0.8, ABNORMAL[:1])]
    )
    assert S.fit_surrogate(model, maxiter=5) == ABNORMAL[:1]  # still stopping short: reported


def test_intermediate_fit_and_other_failures_are_not_continued(monkeypatch):
    model = _model()
    calls = _script_messages(monkeypatch, [(OptimizationStatus.FAILURE, 1.0, ABNORMAL)])
    assert S.fit_surrogate(model, maxiter=5, final=False) == ABNORMAL and calls == [5]
    model = _model()
    calls = _script_messages(monkeypatch, [(OptimizationStatus.FAILURE, 1.0, ["surrogate fit (n=15): FAILURE: x"])])
    assert S.fit_surrogate(model, maxiter=5) == ["surrogate fit (n=15): FAILURE: x"] and calls == [5]


def test_interpolating_relevance_fit_with_a_categorical_step_reports_no_false_failure():
    """End to end: a logistic black box with a categorical step under the smooth-classifier preset; the
    interpolating relevance fit's line search stops at its optimum (continuing changes nothing), which is not a
    failure to report."""
    from gpytorch_explain.local import PRESETS

    rs = np.random.RandomState(0)
    X = rs.randn(200, 6)
    X[:, 5] = rs.randint(0, 3, 200)
    X[:, 4] = 1.0  # a constant column (never perturbed)

    def proba(Z):
        return 1 / (1 + np.exp(-(Z[:, 0] - 0.5 * Z[:, 1] + 0.8 * (Z[:, 5] == 2))))

    ex = LocalGPExplainer(proba, X, budget=40, seed=0, categorical_features=[5], **PRESETS["smooth_classifier"])
    result = ex.explain(X[3])
    assert not [w for w in result.warnings if "ABNORMAL" in w or "FAILURE" in w], result.warnings
