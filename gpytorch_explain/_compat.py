r"""Imports from other packages that need care.

**BoTorch changes GPyTorch's global defaults when it is imported.** ``import botorch`` sets
``linear_operator.settings.max_cholesky_size`` and ``gpytorch.settings.max_eager_kernel_size`` to 4096,
``cholesky_max_tries`` to 6, and turns off linear_operator's fast covariance roots, log-probabilities and solves.
Those are sensible defaults inside a Bayesian-optimisation loop, but an explanation library must not change how
a user's *other* GPyTorch models compute just because it was imported or called. So gpytorch-explain never
imports BoTorch directly: :func:`import_botorch` imports it and puts every one of these settings back as it
found them. A user who imported BoTorch first keeps BoTorch's defaults (they are what we find and restore).

Use :func:`is_botorch_model` to ask whether a model is a BoTorch model: it does not import BoTorch (a model
cannot be a BoTorch model unless BoTorch was imported already).
"""

from __future__ import annotations

import sys
from types import ModuleType

import gpytorch.settings as _gp_settings
import linear_operator.settings as _linop_settings

# GPyTorch- and linear_operator-private names (a leading underscore, or a private module) the package uses. They
# are imported here and nowhere else, so a release that moves one breaks in one place; tests/test_compat.py
# checks that each resolves and that no other module imports a private name directly.
from gpytorch.likelihoods import _GaussianLikelihoodBase
from gpytorch.settings import _dtype_value_context, _feature_flag, _linalg_dtype_cholesky, _value_context
from gpytorch.variational import _NaturalVariationalDistribution, _VariationalDistribution, _VariationalStrategy
from linear_operator.functions._matmul import Matmul

__all__ = [
    "import_botorch",
    "is_botorch_model",
    # private upstream names, re-exported for the package
    "Matmul",
    "_GaussianLikelihoodBase",
    "_NaturalVariationalDistribution",
    "_VariationalDistribution",
    "_VariationalStrategy",
    "_dtype_value_context",
    "_feature_flag",
    "_linalg_dtype_cholesky",
    "_value_context",
]

#: ``name: upstream module`` of every private upstream name above (the module GPyTorch defines it in).
PRIVATE_NAMES = {
    "Matmul": "linear_operator.functions._matmul",
    "_GaussianLikelihoodBase": "gpytorch.likelihoods",
    "_NaturalVariationalDistribution": "gpytorch.variational",
    "_VariationalDistribution": "gpytorch.variational",
    "_VariationalStrategy": "gpytorch.variational",
    "_dtype_value_context": "gpytorch.settings",
    "_feature_flag": "gpytorch.settings",
    "_linalg_dtype_cholesky": "gpytorch.settings",
    "_value_context": "gpytorch.settings",
}

#: (settings module, class name, attribute) of every global that ``import botorch`` assigns
_BOTORCH_GLOBALS = (
    (_linop_settings, "_fast_covar_root_decomposition", "_default"),
    (_linop_settings, "_fast_log_prob", "_default"),
    (_linop_settings, "_fast_solves", "_default"),
    (_linop_settings, "cholesky_max_tries", "_global_value"),
    (_linop_settings, "max_cholesky_size", "_global_value"),
    (_gp_settings, "max_eager_kernel_size", "_global_value"),
)


def import_botorch() -> ModuleType:
    """Import BoTorch without changing GPyTorch's or linear_operator's global settings.

    >>> import gpytorch
    >>> before = gpytorch.settings.max_cholesky_size.value()
    >>> botorch = import_botorch()
    >>> gpytorch.settings.max_cholesky_size.value() == before
    True
    """
    if "botorch" in sys.modules:
        return sys.modules["botorch"]
    saved = [(getattr(mod, name), attr) for mod, name, attr in _BOTORCH_GLOBALS]
    saved = [(obj, attr, getattr(obj, attr)) for obj, attr in saved]
    try:
        import botorch
    finally:
        for obj, attr, value in saved:
            setattr(obj, attr, value)
    return botorch


def is_botorch_model(model: object) -> bool:
    """Whether ``model`` is a BoTorch ``Model`` (without importing BoTorch)."""
    if "botorch.models.model" not in sys.modules:
        return False
    return isinstance(model, sys.modules["botorch.models.model"].Model)
