#!/usr/bin/env python3
r"""Tabular inputs of :class:`~gpytorch_explain.local.LocalGPExplainer`: arrays, tensors and pandas DataFrames.

The explainer works in numeric coordinates: one float per feature. A numpy array or tensor is used as it is. A
pandas ``DataFrame`` is mapped column by column (:class:`FrameCodec`):

* numeric columns keep their values;
* columns that are not numeric (strings, objects, ``category``, ``bool``) are categorical features whether or not
  ``categorical_features`` lists them; their numeric coordinate is a code :math:`0, \dots, K-1` into the values the
  training data takes (``FrameCodec.levels[j]``: sorted, or in the ``category`` dtype's order);
* the black box receives DataFrames with the training data's columns, in its column order, each categorical column
  decoded back to its values and dtype (so a scikit-learn pipeline with a ``ColumnTransformer`` that selects
  columns by name, or a ``OneHotEncoder`` on strings, works as it does on the training data); continuous
  integer columns receive non-integer values, as with a numpy array.

Example:
    >>> import pandas as pd
    >>> from gpytorch_explain.local.tabular import FrameCodec
    >>> df = pd.DataFrame({"age": [30.0, 40.0, 50.0], "colour": ["red", "blue", "red"]})
    >>> codec = FrameCodec(df)
    >>> codec.categorical, list(codec.levels[1])
    ([1], ['blue', 'red'])
    >>> codec.encode(df)[:, 1].tolist()
    [1.0, 0.0, 1.0]
    >>> codec.decode(codec.encode(df)).equals(df)
    True
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

__all__ = ["FrameCodec", "as_instance", "as_training_array", "is_frame", "is_series"]


def _from_pandas(obj: Any) -> bool:
    return type(obj).__module__.split(".")[0] == "pandas"


def is_frame(obj: Any) -> bool:
    """Whether ``obj`` is a pandas ``DataFrame`` (checked without importing pandas)."""
    return _from_pandas(obj) and hasattr(obj, "columns") and getattr(obj, "ndim", 0) == 2


def is_series(obj: Any) -> bool:
    """Whether ``obj`` is a pandas ``Series`` (checked without importing pandas)."""
    return _from_pandas(obj) and hasattr(obj, "index") and getattr(obj, "ndim", 0) == 1


def _is_plain_numeric(dtype: Any) -> bool:
    """A numeric, non-boolean column dtype (one that stays a number in the explainer's coordinates)."""
    import pandas as pd

    return bool(pd.api.types.is_numeric_dtype(dtype)) and not pd.api.types.is_bool_dtype(dtype)


def _is_time(dtype: Any) -> bool:
    """A datetime or timedelta column dtype."""
    import pandas as pd

    return bool(pd.api.types.is_datetime64_any_dtype(dtype) or pd.api.types.is_timedelta64_dtype(dtype))


def _sorted_levels(values: np.ndarray) -> np.ndarray:
    """The distinct values, sorted (by their text where they do not compare, e.g. mixed types)."""
    distinct = list(dict.fromkeys(values.tolist()))
    try:
        distinct.sort()
    except TypeError:
        distinct.sort(key=str)
    return _object_array(distinct)


def _object_array(values: list) -> np.ndarray:
    """A 1-d object array holding ``values`` as they are (tuples stay elements)."""
    out = np.empty(len(values), dtype=object)
    out[:] = values
    return out


class FrameCodec:
    r"""Numeric coordinates for the columns of a pandas DataFrame, and back (see the module docstring).

    :param frame: the training data.
    :param categorical_features: column positions or names of categorical features; non-numeric columns are added.
    :ivar columns: the column labels, in order.
    :ivar categorical: sorted positions of the categorical columns (listed and non-numeric).
    :ivar levels: ``{position: values}`` for the encoded (non-numeric) columns; the code of ``values[k]`` is ``k``.
        Values of an instance that the training data never takes get the next codes (``explain`` warns).
    """

    def __init__(self, frame: Any, categorical_features: Sequence[int | str] | None = None):
        self.columns = list(frame.columns)
        if len(set(self.columns)) != len(self.columns):
            raise ValueError(f"training_data has duplicate column names: {self.columns}.")
        self.dtypes = list(frame.dtypes)
        cats = set(resolve_columns(categorical_features, self.columns))
        self.levels: dict[int, np.ndarray] = {}
        for j, (name, dtype) in enumerate(zip(self.columns, self.dtypes, strict=True)):
            if _is_plain_numeric(dtype):
                continue
            if _is_time(dtype) and j not in cats:
                raise TypeError(
                    f"training_data column {name!r} holds {dtype} values, which the explainer cannot perturb; convert "
                    "it to numbers (e.g. days since a date) or list it in categorical_features."
                )
            column = frame.iloc[:, j]
            if column.isna().any():
                raise ValueError(
                    f"training_data column {name!r} has missing values; fill or drop them before explaining."
                )
            if str(dtype) == "category":
                seen = set(column.tolist())
                levels = _object_array([c for c in dtype.categories.tolist() if c in seen])
            else:
                levels = _sorted_levels(column.to_numpy(dtype=object))
            self.levels[j] = levels
            cats.add(j)
        self.categorical = sorted(cats)
        self.num_seen = {j: levels.size for j, levels in self.levels.items()}
        self._index = {j: {v: k for k, v in enumerate(levels.tolist())} for j, levels in self.levels.items()}

    def check_integers(self, row: np.ndarray, name: str = "x") -> np.ndarray:
        """``row`` (coordinates), after checking that its integer-dtype categorical columns hold whole numbers.

        The black box receives those columns rounded to integers, so a non-integer value would be explained at a
        row it never received.
        """
        import pandas as pd

        for j in self.categorical:
            if j not in self.levels and pd.api.types.is_integer_dtype(self.dtypes[j]) and row[j] != np.rint(row[j]):
                raise ValueError(
                    f"{name}'s value {row[j]:g} for the integer categorical column {self.columns[j]!r} is not a whole "
                    "number; the black box receives the column as integers."
                )
        return row

    @property
    def encoded(self) -> bool:
        """Whether some column is encoded (then the black box cannot take plain float arrays)."""
        return bool(self.levels)

    def _code(self, j: int, value: Any, register: bool) -> float:
        index = self._index[j]
        if value is None or (isinstance(value, (float, np.floating)) and np.isnan(value)):
            raise ValueError(f"column {self.columns[j]!r} has a missing value ({value!r}).")
        if value not in index:
            if not register:
                raise ValueError(
                    f"column {self.columns[j]!r} has the value {value!r}, which training_data never takes "
                    f"(seen: {self.seen_text(j)})."
                )
            index[value] = len(index)
            self.levels[j] = np.append(self.levels[j], _object_array([value]))
        return float(index[value])

    def encode(self, frame: Any, register: bool = False) -> np.ndarray:
        """``(N, D)`` float64 coordinates of a DataFrame with the training data's columns.

        :param register: give values the training data never takes new codes (otherwise they are an error).
        """
        missing = [c for c in self.columns if c not in set(frame.columns)]
        if missing:
            raise ValueError(f"the DataFrame lacks the training data's column(s) {missing}.")
        frame = frame[self.columns]
        out = np.empty((len(frame), len(self.columns)), dtype=np.float64)
        for j, name in enumerate(self.columns):
            column = frame.iloc[:, j]
            if j in self.levels:
                out[:, j] = [self._code(j, v, register) for v in column.tolist()]
            else:
                try:
                    out[:, j] = column.to_numpy(dtype=np.float64)
                except (TypeError, ValueError) as err:
                    raise ValueError(f"column {name!r} is numeric in training_data but not here: {err}") from err
        return out

    def decode(self, X: np.ndarray) -> Any:
        """The DataFrame (training data's columns and dtypes) whose coordinates are ``X`` (``(m, D)``)."""
        import pandas as pd

        X = np.asarray(X, dtype=np.float64)
        data = {}
        for j, (name, dtype) in enumerate(zip(self.columns, self.dtypes, strict=True)):
            v = X[:, j]
            if j in self.levels:
                values = self.levels[j][np.rint(v).astype(np.int64)]
                if str(dtype) == "category":
                    data[name] = pd.Categorical(values, categories=dtype.categories, ordered=dtype.ordered)
                elif pd.api.types.is_bool_dtype(dtype):
                    data[name] = values.astype(bool)
                else:
                    data[name] = pd.array(values, dtype=dtype)
            elif j in self.categorical and pd.api.types.is_integer_dtype(dtype):
                data[name] = pd.array(np.rint(v).astype(np.int64), dtype=dtype)  # numpy or nullable integers
            else:
                data[name] = v
        frame = pd.DataFrame(data, columns=pd.Index(self.columns))
        return frame

    def seen_text(self, j: int, limit: int = 10) -> str:
        """The first ``limit`` values of the encoded column ``j``, for messages."""
        seen = self.levels[j][: self.num_seen[j]]
        return ", ".join(map(repr, seen[:limit].tolist())) + (", ..." if seen.size > limit else "")

    def value_text(self, j: int, value: float) -> str:
        """How the coordinate ``value`` of feature ``j`` reads to a person (its category for encoded columns)."""
        if j in self.levels:
            return str(self.levels[j][int(round(value))])
        return f"{value:g}"


def resolve_columns(features: Sequence[int | str] | None, columns: list | None, D: int | None = None) -> list[int]:
    """Positions of ``features`` (positions, negative ones from the end, numpy integers, or column labels / feature
    names when ``columns`` is given)."""
    if features is None:
        return []
    if isinstance(features, (str, bytes)) or not hasattr(features, "__iter__"):
        raise TypeError(f"categorical_features must be a sequence of indices or column names, got {features!r}.")
    D = len(columns) if columns is not None else D
    out = []
    for f in features:
        if columns is not None and not isinstance(f, (bool, np.bool_)) and f in columns:
            out.append(columns.index(f))
            continue
        if isinstance(f, (bool, np.bool_)) or not isinstance(f, (int, np.integer)):
            known = f"; columns: {columns}" if columns is not None else ""
            raise ValueError(f"categorical feature {f!r} is neither an index nor a column name{known}.")
        if not -D <= int(f) < D:
            raise IndexError(f"categorical feature index {f} is out of range for D = {D} features.")
        out.append(int(f) % D)  # a negative index counts from the end, as in Python
    if len(set(out)) != len(out):
        raise ValueError(f"categorical_features has duplicates: {list(features)}.")
    return out


def as_training_array(
    training_data: Any, categorical_features: Sequence[int | str] | None, feature_names: Sequence[str] | None
) -> tuple[np.ndarray, list[int], list[str], FrameCodec | None]:
    """Check the explainer's data: ``(data (N, D) float64, categorical positions, feature names, codec or None)``."""
    codec = None
    if is_frame(training_data):
        codec = FrameCodec(training_data, categorical_features)
        data = codec.encode(training_data)
        cats = codec.categorical
        default_names = [str(c) for c in codec.columns]
    else:
        data = training_data.detach().cpu().numpy() if torch.is_tensor(training_data) else training_data
        if np.iscomplexobj(data):
            raise ValueError("training_data has complex values; the explainer needs real numbers.")
        try:
            data = np.asarray(data, dtype=np.float64)
        except (TypeError, ValueError) as err:
            raise ValueError(
                f"training_data must be numeric ({err}); for string or other non-numeric categorical columns pass a "
                "pandas DataFrame, whose non-numeric columns are encoded (gpytorch_explain.local.tabular)."
            ) from err
        if data.ndim != 2:
            raise ValueError(f"training_data must be (N, D) with N >= 2, got shape {data.shape}.")
        named = (  # categorical features may be named by feature_names
            [str(n) for n in feature_names]
            if feature_names is not None
            and not isinstance(feature_names, (str, bytes))
            and hasattr(feature_names, "__len__")
            and len(feature_names) == data.shape[1]
            else None
        )
        cats = sorted(resolve_columns(categorical_features, named, data.shape[1]))
        default_names = [f"x{j}" for j in range(data.shape[1])]
    if data.ndim != 2 or data.shape[0] < 2:
        raise ValueError(f"training_data must be (N, D) with N >= 2, got shape {data.shape}.")
    if not np.isfinite(data).all():
        bad = sorted({int(j) for j in np.nonzero(~np.isfinite(data))[1]})
        shown = [codec.columns[j] for j in bad] if codec is not None else bad
        raise ValueError(f"training_data contains NaN or infinite values (in feature(s) {shown[:10]}).")
    if feature_names is not None and (isinstance(feature_names, (str, bytes)) or not hasattr(feature_names, "__len__")):
        raise TypeError(f"feature_names must be a sequence of names, got {feature_names!r}.")
    names = default_names if feature_names is None else [str(n) for n in feature_names]
    if len(names) != data.shape[1]:
        raise ValueError(f"{len(names)} feature names for D = {data.shape[1]} features.")
    if len(set(names)) != len(names):
        dup = sorted({n for n in names if names.count(n) > 1})
        raise ValueError(f"feature_names has duplicates: {dup[:10]}.")
    return data, sorted(cats), names, codec


def as_instance(
    x: Any, D: int, codec: FrameCodec | None, name: str = "x", feature_names: list[str] | None = None
) -> np.ndarray:
    """One instance as a ``(D,)`` float64 array: numpy, list, tensor, ``(1, D)``, or a pandas Series / 1-row frame.

    Without a DataFrame's codec, a Series (or 1-row frame) labelled with ``feature_names`` (in any order) is read by
    label; one with a plain 0..D-1 index by position; other labels are an error (they would be read by position)."""
    if codec is not None and (is_frame(x) or is_series(x)):
        if is_series(x):
            labels = list(x.index)
            if set(labels) >= set(codec.columns):
                x = x[codec.columns]
            elif labels != list(range(len(labels))):  # labelled, not positional: read by label or not at all
                missing = [c for c in codec.columns if c not in set(labels)]
                unknown = [c for c in labels if c not in set(codec.columns)]
                raise ValueError(
                    f"{name} (a Series) lacks the training data's column(s) {missing[:10]}"
                    + (f" and has unknown label(s) {unknown[:10]}" if unknown else "")
                    + "; its values are matched to columns by label."
                )
            elif len(x) != D:
                raise ValueError(f"{name} (a Series) must have the training data's {D} columns, got {len(x)}.")
            import pandas as pd

            x = pd.DataFrame([x.to_numpy(dtype=object)], columns=pd.Index(codec.columns))
        if len(x) != 1:
            raise ValueError(f"{name} must be one instance (a 1-row DataFrame), got {len(x)} rows.")
        return codec.check_integers(codec.encode(x, register=True)[0], name)
    if codec is not None and codec.encoded and not torch.is_tensor(x):
        row = np.asarray(x, dtype=object)
        if row.ndim == 2 and row.shape[0] == 1:
            row = row[0]
        if row.shape != (D,):
            raise ValueError(f"{name} must be one instance of shape ({D},), got {row.shape}.")
        import pandas as pd

        frame = pd.DataFrame([row], columns=pd.Index(codec.columns))
        return codec.check_integers(codec.encode(frame, register=True)[0], name)
    if is_frame(x) or is_series(x):
        raw = list(x.index if is_series(x) else x.columns)
        labels = [str(label) for label in raw]
        names = [str(n) for n in feature_names] if feature_names is not None else None
        if raw == list(range(len(raw))):  # a plain positional index (e.g. a Series built from a list)
            names = None
        if names is not None and labels != names and sorted(labels) == sorted(names):
            x = x[list((x.index if is_series(x) else x.columns)[[labels.index(n) for n in names]])]
        elif names is not None and labels != names and labels != [str(i) for i in range(len(labels))]:
            raise ValueError(
                f"{name} is labelled {labels[:10]}, which are not the feature names {names[:10]}; a labelled row is "
                "matched to the features by label. Pass the values in the training data's order (e.g. "
                f"{name}.to_numpy()) or label them with the feature names."
            )
        x = x.to_numpy()
    x = x.detach().cpu().numpy() if torch.is_tensor(x) else x
    if np.iscomplexobj(x):
        raise ValueError(f"{name} has complex values; the explainer needs real numbers.")
    try:
        x = np.asarray(x, dtype=np.float64)
    except (TypeError, ValueError) as err:
        raise ValueError(f"{name} must be numeric ({err}).") from err
    if x.ndim == 2 and x.shape[0] == 1:
        x = x[0]
    if x.shape != (D,):
        raise ValueError(f"{name} must be one instance of shape ({D},), got {x.shape}.")
    return x if codec is None else codec.check_integers(x, name)
