#!/usr/bin/env python3
r"""Adapters that turn any prediction function into a validated black box ``(m, D) -> (m,)``."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

__all__ = ["BlackBox", "INPUT_TYPES", "from_sklearn_classifier", "from_sklearn_regressor"]

#: what ``predict_fn`` receives: chosen from the callable and the training data, numpy arrays, tensors, DataFrames
INPUT_TYPES = ("auto", "numpy", "torch", "pandas")


def _with_feature_names(model: Any, X: Any) -> Any:
    """``X`` as a DataFrame with ``model.feature_names_in_`` when the model was fitted on one and ``X`` is an array
    (read by position, in the model's column order); a DataFrame with the model's columns in another order is
    reordered by name.

    scikit-learn warns on every call of a model fitted with feature names that gets a plain array (and a pipeline
    whose ``ColumnTransformer`` selects columns by name cannot take one at all).
    """
    names = getattr(model, "feature_names_in_", None)
    if names is None:
        return X
    columns = getattr(X, "columns", None)
    if columns is not None:
        # a DataFrame with the model's columns in another order: scikit-learn refuses it, and it selects by name
        if list(columns) != list(names) and len(columns) == len(names) and set(columns) == set(names):
            return X[list(names)]
        return X
    if not isinstance(X, np.ndarray) or X.ndim != 2 or X.shape[1] != len(names):
        return X
    import pandas as pd

    return pd.DataFrame(X, columns=list(names))


def from_sklearn_regressor(model: Any) -> Callable[[np.ndarray], np.ndarray]:
    """A black box for a fitted scikit-learn regressor (or pipeline): ``model.predict(X)``.

    A model fitted on a pandas DataFrame (one with ``feature_names_in_``) gets arrays as DataFrames with those
    column names (scikit-learn would warn on every call otherwise).

    Example:
        >>> import numpy as np
        >>> from sklearn.linear_model import LinearRegression
        >>> from gpytorch_explain.local import from_sklearn_regressor
        >>> X = np.random.RandomState(0).randn(20, 2)
        >>> f = from_sklearn_regressor(LinearRegression().fit(X, X @ [1.0, -2.0]))
        >>> f(X[:3]).shape
        (3,)
    """
    if not hasattr(model, "predict"):
        raise TypeError(f"from_sklearn_regressor needs an object with .predict, got {type(model).__name__}.")
    kind = _sklearn_kind(model)
    if kind == "classifier":
        raise TypeError(
            f"from_sklearn_regressor got a classifier ({type(model).__name__}), whose predict returns class labels "
            "(a step function); explain a class probability with from_sklearn_classifier(model, class_index)."
        )
    if kind in ("clusterer", "outlier_detector"):
        raise TypeError(
            f"from_sklearn_regressor needs a regressor, got a {kind.replace('_', ' ')} ({type(model).__name__}), "
            "whose predict returns labels; pass a callable returning the numbers to explain (e.g. "
            "model.score_samples) as predict_fn."
        )

    def predict(X: np.ndarray) -> np.ndarray:
        out = np.asarray(model.predict(_with_feature_names(model, X)))
        if out.ndim == 2 and out.shape[1] == 1:
            out = out[:, 0]
        elif out.ndim == 0 and len(X) == 1:  # one number for one row (e.g. a net ending in .squeeze())
            out = out.reshape(1)
        if out.shape != (len(X),):
            raise ValueError(
                f"{type(model).__name__}.predict returned shape {out.shape} for {len(X)} rows; a multi-output "
                "regressor needs a predict_fn that picks one output, e.g. lambda X: model.predict(X)[:, k]."
            )
        try:
            return out.astype(np.float64)
        except (TypeError, ValueError) as err:
            raise TypeError(f"{type(model).__name__}.predict returned non-numeric values ({err}).") from err

    _name_inputs(predict, model)
    return predict


def _name_inputs(predict: Callable, model: Any) -> None:
    """Attach the model's column names: an explainer given a DataFrame in another order with ``input_type="numpy"``
    (arrays read by position) can then refuse to mislabel the features."""
    names = getattr(model, "feature_names_in_", None)
    if names is not None:
        predict.feature_names_in_ = [str(name) for name in names]


def _sklearn_kind(model: Any) -> str | None:
    """``"classifier"``, ``"clusterer"``, ``"outlier_detector"``, ``"regressor"`` or ``None`` (not scikit-learn)."""
    try:
        from sklearn import base
    except ImportError:  # pragma: no cover - scikit-learn is a dependency of the helpers' users
        return None
    for kind in ("classifier", "clusterer", "outlier_detector", "regressor"):
        test = getattr(base, f"is_{kind}", None)
        try:
            if test is not None and test(model):
                return kind
        except Exception:  # an object that is not an estimator
            return None
    return None


def from_sklearn_classifier(
    model: Any, class_index: Any = 1, output: str = "probability"
) -> Callable[[np.ndarray], np.ndarray]:
    r"""A black box for a fitted scikit-learn classifier: ``model.predict_proba(X)[:, class_index]`` or its logit.

    ``output="logit"`` returns :math:`\log p_k - \log(1 - p_k)` (``p_k`` clipped to
    :math:`[10^{-12}, 1 - 10^{-12}]`). Use it where the probability saturates near the instance (``p`` ≈ 0 or 1
    in much of the sampling box): the probability is then nearly constant there, a surrogate of it has little
    to fit, while the logit keeps varying (for a binary logistic regression it is exactly
    ``decision_function``). The explanation is then of the logit, in log-odds units; to explain the probability
    itself with surrogates of its logit, keep ``output="probability"`` and pass ``link="logit"`` to
    :class:`~gpytorch_explain.local.LocalGPExplainer`. A model fitted on a DataFrame gets arrays as DataFrames with its
    ``feature_names_in_``. ``class_index`` is a column of ``predict_proba`` or one of ``model.classes_`` (e.g.
    ``"malignant"``). An int is a column; where it is also a label of another column (``classes_ = [1, 2]``,
    ``class_index=1``) a warning names both, and an int label past the last column (``class_index=2`` there) is
    that label.

    Example:
        >>> import numpy as np
        >>> from sklearn.linear_model import LogisticRegression
        >>> from gpytorch_explain.local import from_sklearn_classifier
        >>> X = np.random.RandomState(0).randn(40, 2)
        >>> f = from_sklearn_classifier(LogisticRegression().fit(X, X[:, 0] > 0), class_index=1)
        >>> bool(((f(X) >= 0) & (f(X) <= 1)).all())
        True
    """
    if not hasattr(model, "predict_proba"):
        raise TypeError(
            f"from_sklearn_classifier needs an object with .predict_proba (e.g. SVC(probability=True)), "
            f"got {type(model).__name__}."
        )
    if output not in ("probability", "logit"):
        raise ValueError(f"output must be 'probability' or 'logit', got {output!r}.")
    classes = getattr(model, "classes_", None)
    if isinstance(class_index, (bool, np.bool_)) or not isinstance(class_index, (int, np.integer)):
        labels = [] if classes is None else list(np.asarray(classes).tolist())
        if class_index in labels:  # a class label, e.g. "malignant"
            class_index = labels.index(class_index)
        else:
            raise TypeError(
                f"class_index must be a column index of predict_proba (an int) or one of the classifier's labels "
                f"{labels[:10]}, got {class_index!r}."
            )
    else:  # an int: a column of predict_proba, unless only a label reading makes sense
        labels = [] if classes is None else list(np.asarray(classes).tolist())
        in_range = classes is None or 0 <= int(class_index) < len(classes)
        if not in_range and class_index in labels:  # e.g. classes_ = [1, 2] and class_index=2: the label 2
            class_index = labels.index(class_index)
        elif in_range and class_index in labels and labels.index(class_index) != int(class_index):
            warnings.warn(
                f"class_index={class_index} is read as column {int(class_index)} of predict_proba (the class "
                f"{labels[int(class_index)]!r}); the classifier's labels {labels[:10]} also include {class_index!r}, "
                f"at column {labels.index(class_index)}. Pass class_index={labels.index(class_index)} for that class.",
                UserWarning,
                stacklevel=2,
            )
    if classes is not None and not 0 <= int(class_index) < len(classes):
        raise ValueError(f"class_index {class_index} is out of range for a classifier with {len(classes)} classes.")
    k = int(class_index)
    eps = 1e-12

    def predict(X: np.ndarray) -> np.ndarray:
        proba = np.asarray(model.predict_proba(_with_feature_names(model, X)), dtype=np.float64)
        if proba.ndim != 2 or not 0 <= k < proba.shape[1]:
            raise ValueError(f"predict_proba returned shape {proba.shape}; cannot take column {k}.")
        p = proba[:, k]
        if output == "probability":
            return p
        p = np.clip(p, eps, 1.0 - eps)
        return np.log(p) - np.log1p(-p)

    predict.returns_probability = output == "probability"  # LocalGPExplainer hints at link="logit" for these
    _name_inputs(predict, model)
    return predict


class BlackBox:
    r"""Wrap ``predict_fn`` so that it maps an ``(m, D)`` float64 array to an ``(m,)`` float64 array.

    ``torch.nn.Module``\ s (or any callable with ``input_type="torch"``) receive a tensor in the
    dtype and on the device of their first floating-point parameter or buffer (float64 on the CPU when they have
    none; a module on a GPU gets CUDA tensors), evaluated under ``torch.no_grad()``;
    with ``decode`` given (``input_type="auto"`` or ``"pandas"``), other callables receive ``decode(X)``, e.g. the
    pandas DataFrame of :meth:`gpytorch_explain.local.FrameCodec.decode`; otherwise a numpy array.
    The output may be a numpy array, list or tensor of ``m`` real numbers (``(m,)`` or ``(m, 1)``; one number for
    ``m = 1``). Wrong shapes, complex values, NaN and inf are errors naming the problem.
    The number of rows evaluated so far is counted in the attribute ``calls``; the rows of the latest call, as
    ``predict_fn`` received them (e.g. rounded to float32 for a float32 module) and cast back to float64, are in
    ``last_input``.
    """

    def __init__(
        self,
        predict_fn: Callable,
        num_features: int,
        input_type: str = "auto",
        decode: Callable[[np.ndarray], Any] | None = None,
    ):
        if not callable(predict_fn):
            raise TypeError(f"predict_fn must be callable, got {type(predict_fn).__name__}.")
        if input_type not in INPUT_TYPES:
            raise ValueError(f"input_type must be one of {INPUT_TYPES}, got {input_type!r}.")
        if input_type == "auto":
            if isinstance(predict_fn, torch.nn.Module):
                input_type = "torch"
            else:
                input_type = "numpy" if decode is None else "pandas"
        if input_type == "pandas" and decode is None:
            raise ValueError("input_type='pandas' needs training_data as a pandas DataFrame (its columns and dtypes).")
        self.decode = decode
        self.predict_fn = predict_fn
        self.num_features = int(num_features)
        self.input_type = input_type
        self.calls = 0
        self.last_input: np.ndarray | None = None

    def _torch_spec(self) -> tuple[torch.dtype, torch.device]:
        """dtype and device of the module's first floating-point parameter (then buffer); float64 on the CPU."""
        for attr in ("parameters", "buffers"):
            tensors = getattr(self.predict_fn, attr, None)
            if callable(tensors):
                for t in tensors():
                    if torch.is_tensor(t) and t.is_floating_point():
                        return t.dtype, t.device
        return torch.float64, torch.device("cpu")

    def __call__(self, X: np.ndarray) -> np.ndarray:
        X = np.asarray(X, dtype=np.float64)
        if X.ndim != 2 or X.shape[1] != self.num_features:
            raise ValueError(f"internal: black-box input must be (m, {self.num_features}), got {X.shape}.")
        m = X.shape[0]
        if self.input_type == "torch":
            with torch.no_grad():
                dtype, device = self._torch_spec()
                arg = torch.tensor(X, dtype=dtype, device=device)  # a copy: predict_fn may change it in place
                received = arg.cpu().double().numpy().copy()  # what predict_fn gets, after the cast
                out = self.predict_fn(arg)
        elif self.input_type == "pandas":
            received = X.copy()
            try:
                out = self.predict_fn(self.decode(X))
            except Exception as err:
                if "feature names" in str(err).lower():
                    hint = (
                        "the model was fitted on other columns (or another order): pass training_data with the "
                        "model's columns, e.g. training_data[list(model.feature_names_in_)]"
                    )
                else:
                    hint = "if it expects numpy arrays, pass input_type='numpy'"
                raise TypeError(
                    f"predict_fn raised {type(err).__name__}: {err}. Note: it receives pandas DataFrames with the "
                    f"training data's columns because training_data is a DataFrame; {hint}."
                ) from err
        else:
            received = X.copy()
            try:
                out = self.predict_fn(X.copy())
            except TypeError as err:
                if "tensor" not in str(err).lower():
                    raise
                raise TypeError(
                    f"predict_fn raised TypeError on a float64 numpy array of shape {X.shape}: {err}. If it expects "
                    "torch tensors, pass input_type='torch' (torch.nn.Modules get tensors without it)."
                ) from err
        if torch.is_tensor(out):
            out = out.detach().cpu()
            out = (out.resolve_conj() if out.is_complex() else out.double()).numpy()
        try:
            is_complex = np.iscomplexobj(out)
            out = np.asarray(np.real(out) if is_complex else out, dtype=np.float64)
        except (TypeError, ValueError) as err:
            hint = ""
            if isinstance(out, torch.distributions.Distribution):
                hint = (
                    " For a GPyTorch or BoTorch model pass lambda X: model(X).mean (the posterior mean), or explain it "
                    "exactly with gpytorch_explain's PosteriorGradient / PosteriorIntegratedGradients."
                )
            raise TypeError(
                f"predict_fn must return m numbers (array, list or tensor), got {type(out).__name__}.{hint}"
            ) from err
        if is_complex:
            raise ValueError(
                "predict_fn returned complex values; the black box must return real numbers (take .real or abs() "
                "of its output yourself if that is what you mean)."
            )
        if out.ndim == 2 and out.shape[1] == 1:
            out = out[:, 0]
        elif out.ndim == 0 and m == 1:  # one number for one row (e.g. a net ending in .squeeze())
            out = out.reshape(1)
        if out.shape != (m,):
            hint = " (for a classifier use from_sklearn_classifier(model, class_index))" if out.ndim == 2 else ""
            raise ValueError(f"predict_fn returned shape {out.shape} for {m} rows; expected ({m},){hint}.")
        if not np.isfinite(out).all():
            bad = int((~np.isfinite(out)).sum())
            raise ValueError(f"predict_fn returned {bad} NaN or infinite value(s) for {m} rows.")
        self.calls += m
        self.last_input = received
        return out
