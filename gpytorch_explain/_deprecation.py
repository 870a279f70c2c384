#!/usr/bin/env python3
"""Deprecated aliases of renamed public names, served by module-level ``__getattr__`` (PEP 562).

An alias *is* the renamed object (``isinstance`` and pickling keep working); reading it warns once per access
with a ``DeprecationWarning`` that names the replacement.

Example:
    >>> import warnings
    >>> import gpytorch_explain
    >>> with warnings.catch_warnings(record=True) as caught:
    ...     warnings.simplefilter("always")
    ...     old = gpytorch_explain.IntegratedGradients
    >>> old is gpytorch_explain.PosteriorIntegratedGradients, caught[0].category.__name__
    (True, 'DeprecationWarning')
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

__all__ = ["DEPRECATED_NAMES", "resolve_deprecated"]

#: old name -> (new name, module path where the new name is defined)
DEPRECATED_NAMES: dict[str, tuple[str, str]] = {
    "IntegratedGradients": ("PosteriorIntegratedGradients", "gpytorch_explain.attribution.posterior"),
    "Gradient": ("GradientFunctional", "gpytorch_explain.attribution.functionals"),
    "IntegratedGradient": ("IntegratedGradientFunctional", "gpytorch_explain.attribution.functionals"),
}


def resolve_deprecated(module: str, name: str, served: tuple[str, ...], lookup: Callable[[str], Any]) -> Any:
    """The object behind deprecated ``name`` of ``module`` (one of ``served``), with a ``DeprecationWarning``.

    :param lookup: maps the new name to the object (usually the module's own globals).
    :raises AttributeError: ``name`` is not a deprecated alias of ``module``.
    """
    if name not in served:
        raise AttributeError(f"module {module!r} has no attribute {name!r}")
    new, _ = DEPRECATED_NAMES[name]
    warnings.warn(
        f"{module}.{name} is deprecated and will be removed; use {new} (the same class).",
        DeprecationWarning,
        stacklevel=3,
    )
    return lookup(new)
