"""Test-session hygiene shared by the tests and the doctests.

* BoTorch is imported once, here, through :func:`gpytorch_explain._compat.import_botorch`, so that test modules
  which ``import botorch`` do not switch GPyTorch's global defaults (``max_cholesky_size`` 4096, …) for every
  test collected after them.
* Every test gets torch's default dtype and those GPyTorch/linear_operator globals back as they were, so that no
  test can change what another one computes.
"""

import pytest
import torch

from gpytorch_explain._compat import _BOTORCH_GLOBALS, import_botorch

import_botorch()

#: torch's default dtype when the session starts; every test starts from it (a test module that changed it at
#: import time would otherwise change it for every test collected after it)
_SESSION_DTYPE = torch.get_default_dtype()


@pytest.fixture(autouse=True)
def _restore_global_state():
    torch.set_default_dtype(_SESSION_DTYPE)
    saved = [(getattr(mod, name), attr) for mod, name, attr in _BOTORCH_GLOBALS]
    saved = [(obj, attr, getattr(obj, attr)) for obj, attr in saved]
    yield
    torch.set_default_dtype(_SESSION_DTYPE)
    for obj, attr, value in saved:
        setattr(obj, attr, value)


#: doctests that need an optional package (module name prefix -> package); skipped where it is not installed
_DOCTEST_NEEDS = {"gpytorch_explain.local.tabular": "pandas"}


def pytest_collection_modifyitems(config, items):
    import importlib.util

    for item in items:
        for prefix, package in _DOCTEST_NEEDS.items():
            if type(item).__name__ == "DoctestItem" and item.name.startswith(prefix):
                if importlib.util.find_spec(package) is None:
                    item.add_marker(pytest.mark.skip(reason=f"the doctest needs {package}"))
