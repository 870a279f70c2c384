"""Sphinx configuration for the gpytorch-explain documentation.

Build locally (from the repository root, in the project's environment)::

    GPYTORCH_EXPLAIN_TUTORIAL_SMALL=1 python -m sphinx -E -W --keep-going -b html docs docs/_build/html

The tutorials under ``tutorials/`` that start with a jupytext header (``# ---``) are copied into
``docs/tutorials/generated/`` at build time and executed by myst-nb (``# %%`` percent format), with
``GPYTORCH_EXPLAIN_TUTORIAL_SMALL=1`` so they run on small data. A tutorial that raises fails the build.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parent
ROOT = DOCS.parent
sys.path.insert(0, str(ROOT))
# the notebook kernels are subprocesses: they import this checkout's package and run on small data
os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH", "")]))
os.environ.setdefault("GPYTORCH_EXPLAIN_TUTORIAL_SMALL", "1")
# figures in executed tutorials are shown inline (scripts/env.sh exports MPLBACKEND=Agg, which shows nothing)
os.environ["MPLBACKEND"] = "module://matplotlib_inline.backend_inline"

import gpytorch_explain  # noqa: E402

# -- tutorials: every tutorials/*.py with a jupytext header, minus the exclude list --------------------
#: tutorials that are not rendered (name -> reason); they still run in the test suite if it runs them
TUTORIAL_EXCLUDE: dict[str, str] = {}


def _is_jupytext(path: Path) -> bool:
    with path.open(encoding="utf-8") as handle:
        return handle.readline().startswith("# ---")


def _collect_tutorials() -> list[str]:
    out = DOCS / "tutorials" / "generated"
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    names = []
    for path in sorted((ROOT / "tutorials").glob("*.py")):
        if path.name in TUTORIAL_EXCLUDE or not _is_jupytext(path):
            continue
        shutil.copyfile(path, out / path.name)
        names.append(path.stem)
    return names


TUTORIALS = _collect_tutorials()
# autosummary never deletes pages of names that left a list: start from none, as a fresh clone does
shutil.rmtree(DOCS / "api" / "generated", ignore_errors=True)

# -- project ------------------------------------------------------------------------------------------
project = "gpytorch-explain"
author = "the gpytorch-explain authors"
copyright = "2026, the gpytorch-explain authors"
release = gpytorch_explain.__version__
version = release

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.mathjax",
    "sphinx.ext.napoleon",
    "sphinx.ext.viewcode",
    "myst_nb",
]

exclude_patterns = ["_build", "conf.py", "**/.ipynb_checkpoints", "jupyter_execute"]
source_suffix = {".rst": "restructuredtext", ".md": "myst-nb", ".ipynb": "myst-nb", ".py": "myst-nb"}

# -- autodoc ------------------------------------------------------------------------------------------
autosummary_generate = True
autosummary_imported_members = True
autodoc_default_options = {"members": True, "show-inheritance": True, "member-order": "bysource"}
autodoc_typehints = "description"
autodoc_typehints_format = "short"
autodoc_preserve_defaults = True
autoclass_content = "both"
napoleon_google_docstring = True
napoleon_numpy_docstring = False
napoleon_use_ivar = True

# -- cross-references: ours must resolve; third-party types (no offline inventories) are ignored -------
nitpicky = True
nitpick_ignore_regex = [
    (r"py:.*", r"(torch|gpytorch|linear_operator|botorch|numpy|np|sklearn|matplotlib|scipy|captum|lime|shap)(\..*)?"),
    (r"py:.*", r"(Tensor|LinearOperator|MultivariateNormal|MultitaskMultivariateNormal|Kernel|Likelihood|Module)"),
    (r"py:.*", r"(collections\.abc|typing|abc|contextlib|numbers|os|pathlib|dataclasses)\..*"),
    (r"py:.*", r"(Callable|Sequence|Iterable|Mapping|Any|Literal|Optional|Union|Path|NDArray|ArrayLike)"),
    (r"py:.*", r"(int|float|bool|str|None|tuple|list|dict|object|type|slice|Exception|optional)"),
]
#: known unresolved references in package docstrings (to be fixed there); any other broken reference fails
nitpick_ignore = [
    tuple(line.split(maxsplit=1))
    for line in (DOCS / "nitpick_known.txt").read_text(encoding="utf-8").splitlines()
    if line.strip() and not line.startswith("#")
]

# -- myst / myst-nb -----------------------------------------------------------------------------------
myst_enable_extensions = ["dollarmath", "amsmath", "colon_fence"]
myst_heading_anchors = 3
nb_custom_formats = {".py": ["jupytext.reads", {"fmt": "py:percent"}]}
nb_execution_mode = "cache"
nb_execution_cache_path = str(DOCS / "_build" / ".jupyter_cache")
nb_execution_raise_on_error = True  # a failing tutorial fails the build
nb_execution_timeout = 600
nb_execution_in_temp = True  # files a tutorial writes do not land in the source tree
nb_execution_show_tb = True
nb_merge_streams = True

# -- html ---------------------------------------------------------------------------------------------
html_theme = "furo"
html_title = f"gpytorch-explain {release}"
html_static_path: list[str] = []
templates_path = ["_templates"]


# -- references to a re-exported or short name: resolve them to where the object is documented ----------
def _addressable(obj) -> bool:
    """Objects with an identity of their own (classes, functions, modules, properties), not shared values."""
    import inspect

    return inspect.isclass(obj) or inspect.isroutine(obj) or inspect.ismodule(obj) or isinstance(obj, property)


def _documented_targets(env) -> dict[int, tuple[str, str]]:
    """``id(object) -> (documented name, object type)`` over every object the Python domain documents."""
    import importlib

    cache = getattr(env, "_gpx_documented", None)
    if cache is not None:
        return cache
    cache = {}
    for name, entry in env.get_domain("py").objects.items():
        module, _, attr = name.rpartition(".")
        try:
            obj = getattr(importlib.import_module(module), attr)
        except Exception:
            continue
        if _addressable(obj):
            cache.setdefault(id(obj), (name, entry.objtype))
    env._gpx_documented = cache
    return cache


def _import_dotted(dotted: str):
    """The object at a dotted path (a module, then attributes), or ``None``."""
    import importlib

    parts = dotted.split(".")
    for split in range(len(parts) - 1, 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:split]))
            for attr in parts[split:]:
                obj = getattr(obj, attr)
            return obj
        except Exception:
            continue
    return None


def _defining_module(node) -> str | None:
    """The module that defines the object whose docstring holds ``node``: the current class, else the object
    documented on the page (autosummary pages are named after it). Short names are looked up there too, as the
    source file wrote them (``ExactGP`` imported by ``posterior.py`` is ``gpytorch.models.ExactGP``)."""
    module, cls = node.get("py:module"), node.get("py:class")
    for dotted in ([f"{module}.{cls}"] if module and cls else []) + [node.get("refdoc", "").rpartition("/")[2]]:
        if not dotted.startswith("gpytorch_explain"):
            continue
        obj = _import_dotted(dotted)
        name = getattr(obj, "__module__", None) or getattr(obj, "__name__", None)
        if isinstance(name, str):
            return name
    return None


def _lookup(target: str, node):
    """The object a dotted or short ``target`` names, tried as written, in the current class and module, in the
    module that defines the documented object, and as an attribute of the package (``gpytorch_explain.GPXModel``)."""
    module, cls = node.get("py:module"), node.get("py:class")
    candidates = [target]
    if module:
        if cls:
            candidates.append(f"{module}.{cls}.{target}")
        candidates.append(f"{module}.{target}")
    defining = _defining_module(node)
    if defining:
        candidates.append(f"{defining}.{target}")
    candidates.append(f"gpytorch_explain.{target.rpartition('.')[2]}")
    for dotted in candidates:
        obj = _import_dotted(dotted)
        if obj is not None:
            return obj
    return None


def _resolve_reexported(app, env, node, contnode):
    if node.get("refdomain") != "py":
        return None
    target = node.get("reftarget", "")
    obj = _lookup(target, node)
    if obj is None or not _addressable(obj):
        return None
    found = _documented_targets(env).get(id(obj))
    if found is None or found[0] == target:
        return None
    name, objtype = found
    from sphinx.util.nodes import make_refnode

    docname = env.get_domain("py").objects[name].docname
    return make_refnode(app.builder, node["refdoc"], docname, name, contnode, name)


def _third_party(app, domain, node) -> bool | None:
    """Silence a reference that names a third-party object by the short name its source file imported
    (``Model``, ``Prior``, ``ExactGP`` in type hints): there are no offline inventories to link it to."""
    if node.get("refdomain") != "py":
        return None
    obj = _lookup(node.get("reftarget", ""), node)
    if obj is None or not _addressable(obj):
        return None
    owner = getattr(obj, "__module__", None) or getattr(obj, "__name__", "")
    return True if isinstance(owner, str) and owner.split(".")[0] in _THIRD_PARTY else None


_THIRD_PARTY = {"torch", "gpytorch", "linear_operator", "botorch", "numpy", "sklearn", "matplotlib", "scipy"}


def _is_private_own(cls) -> bool:
    return cls.__name__.startswith("_") and getattr(cls, "__module__", "").startswith("gpytorch_explain")


def _public_bases(app, name, obj, options, bases):
    """Show a private base class of ours by its own bases (``Bases: _FunctionalPosterior`` says nothing a reader
    can follow); its public members are documented on the subclass (see ``classes_with_private_bases``)."""
    i = 0
    while i < len(bases):
        base = bases[i]
        if isinstance(base, type) and _is_private_own(base):
            bases[i : i + 1] = [b for b in base.__bases__ if b is not object] or ([object] if len(bases) == 1 else [])
        else:
            i += 1


def _classes_with_private_bases() -> list[str]:
    """Fully qualified names (as the API pages list them) of public classes that inherit from a private class of
    ours: their pages show that class's public members too (``:inherited-members:`` in the class template)."""
    import importlib
    import pkgutil

    names = []
    packages = ["gpytorch_explain"] + [
        f"gpytorch_explain.{m.name}" for m in pkgutil.iter_modules(gpytorch_explain.__path__) if m.ispkg
    ]
    for package in packages:
        module = importlib.import_module(package)
        for attr in getattr(module, "__all__", []):
            obj = getattr(module, attr, None)
            if isinstance(obj, type) and any(_is_private_own(base) for base in obj.__mro__[1:]):
                names.append(f"{package}.{attr}")
    return names


autosummary_context = {"classes_with_private_bases": _classes_with_private_bases()}


def setup(app):
    app.connect("missing-reference", _resolve_reexported)
    app.connect("warn-missing-reference", _third_party)
    app.connect("autodoc-process-bases", _public_bases)
