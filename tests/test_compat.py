"""gpytorch_explain._compat: every private GPyTorch / linear_operator name the package uses resolves, and only
_compat imports such names (a leading underscore, or a module path with a private part)."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import gpytorch_explain
from gpytorch_explain import _compat

PACKAGE = Path(gpytorch_explain.__file__).parent
UPSTREAM = ("gpytorch", "linear_operator")


def test_every_private_name_resolves_to_the_upstream_object():
    assert _compat.PRIVATE_NAMES  # the list is not empty
    for name, module in _compat.PRIVATE_NAMES.items():
        assert name in _compat.__all__, name
        assert getattr(_compat, name) is getattr(importlib.import_module(module), name), name


def _private_imports(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            parts = node.module.split(".")
            if parts[0] not in UPSTREAM:
                continue
            private_module = any(p.startswith("_") for p in parts)
            for alias in node.names:
                if private_module or alias.name.startswith("_"):
                    found.append(f"{path.relative_to(PACKAGE)}:{node.lineno} from {node.module} import {alias.name}")
        elif isinstance(node, ast.Import):
            for alias in node.names:
                parts = alias.name.split(".")
                if parts[0] in UPSTREAM and any(p.startswith("_") for p in parts):
                    found.append(f"{path.relative_to(PACKAGE)}:{node.lineno} import {alias.name}")
    return found


def test_no_module_but_compat_imports_a_private_upstream_name():
    offenders = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.name == "_compat.py" and path.parent == PACKAGE:
            continue
        offenders += _private_imports(path)
    assert not offenders, "import these through gpytorch_explain._compat:\n" + "\n".join(offenders)


def test_the_scan_finds_private_imports():
    """The checker itself: _compat's own imports are found (so the test above can fail)."""
    found = _private_imports(PACKAGE / "_compat.py")
    assert any("_value_context" in f for f in found) and any("_matmul import Matmul" in f for f in found)
