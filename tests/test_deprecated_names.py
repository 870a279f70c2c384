"""Renamed public names: the new names are exported, and each old name still works (the same object) with a
``DeprecationWarning``; derived kernels are importable from both ``gpytorch_explain.kernels`` and the old
``gpytorch_explain.attribution`` path."""

from __future__ import annotations

import importlib
import pickle

import gpytorch
import pytest
import torch

import gpytorch_explain
from gpytorch_explain.attribution import (
    GradientFunctional,
    IntegratedGradientFunctional,
    PosteriorIntegratedGradients,
)

ALIASES = [
    ("gpytorch_explain", "IntegratedGradients", PosteriorIntegratedGradients),
    ("gpytorch_explain.attribution", "IntegratedGradients", PosteriorIntegratedGradients),
    ("gpytorch_explain.attribution.posterior", "IntegratedGradients", PosteriorIntegratedGradients),
    ("gpytorch_explain.attribution", "Gradient", GradientFunctional),
    ("gpytorch_explain.attribution.functionals", "Gradient", GradientFunctional),
    ("gpytorch_explain.attribution", "IntegratedGradient", IntegratedGradientFunctional),
    ("gpytorch_explain.attribution.functionals", "IntegratedGradient", IntegratedGradientFunctional),
]


@pytest.mark.parametrize(("module", "old", "new"), ALIASES)
def test_old_name_is_the_new_object_and_warns(module, old, new):
    mod = importlib.import_module(module)
    with pytest.warns(DeprecationWarning, match=rf"{old} is deprecated.*use {new.__name__}"):
        obj = getattr(mod, old)
    assert obj is new
    assert old not in getattr(mod, "__all__", ())  # star imports stay silent


def test_old_names_keep_isinstance_and_pickling():
    with pytest.warns(DeprecationWarning):
        from gpytorch_explain import IntegratedGradients
    with pytest.warns(DeprecationWarning):
        from gpytorch_explain.attribution import IntegratedGradient
    functional = IntegratedGradient(torch.zeros(2, dtype=torch.float64))
    assert isinstance(functional, IntegratedGradientFunctional)
    assert pickle.loads(pickle.dumps(IntegratedGradients)) is PosteriorIntegratedGradients
    assert PosteriorIntegratedGradients.__name__ == "PosteriorIntegratedGradients"


def test_new_names_are_exported_without_warnings(recwarn):
    for name in ("PosteriorIntegratedGradients", "GradientFunctional", "IntegratedGradientFunctional"):
        assert name in gpytorch_explain.__all__ and name in gpytorch_explain.attribution.__all__
        assert getattr(gpytorch_explain, name) is getattr(gpytorch_explain.attribution, name)
    assert not [w for w in recwarn if issubclass(w.category, DeprecationWarning)]


def test_unknown_attribute_still_raises():
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        gpytorch_explain.attribution.Nope  # noqa: B018
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        gpytorch_explain.Nope  # noqa: B018


@pytest.mark.parametrize("name", ["DerivedKernel", "GradientKernel", "IntegratedGradientKernel"])
def test_derived_kernels_live_in_kernels_and_keep_the_old_path(name, recwarn):
    import gpytorch_explain.kernels as kernels

    cls = getattr(kernels, name)
    assert cls.__module__ == f"gpytorch_explain.kernels.{_snake(name)}"
    assert getattr(gpytorch_explain.attribution, name) is cls
    assert name in kernels.__all__ and name in gpytorch_explain.attribution.__all__
    assert not [w for w in recwarn if issubclass(w.category, DeprecationWarning)]


def test_old_kernel_import_path_computes_the_same():
    from gpytorch_explain.attribution import GradientKernel as Old
    from gpytorch_explain.kernels import GradientKernel as New

    x = torch.randn(3, 2, dtype=torch.float64)
    base = gpytorch.kernels.RBFKernel().double()
    assert Old is New
    torch.testing.assert_close(Old(base)(x).to_dense(), New(base)(x).to_dense())


def _snake(name: str) -> str:
    return "".join(f"_{c.lower()}" if c.isupper() else c for c in name).lstrip("_")
