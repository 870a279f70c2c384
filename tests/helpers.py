"""Helpers shared by the test modules (import as ``from tests.helpers import ...``; the repository root is on
pytest's ``pythonpath``)."""

from __future__ import annotations

import torch

__all__ = ["NO_RELEVANCE", "assert_close_to_scale", "assert_rel_close", "generator"]

#: ``LocalGPExplainer(**NO_RELEVANCE)``: the relevance from the acquisition surrogate's own lengthscales, without the
#: SAAS refit and the bootstrap refits. These options change only ``relevance``, ``relevance_std``, ``lengthscales``
#: and the relevance's messages in ``warnings``: the samples, the gradient, IG and fidelity are bit-identical
#: (``tests/local/test_local_relevance_bootstrap.py``), and an explanation runs ~3x faster. For tests that read none
#: of what they change.
NO_RELEVANCE = dict(relevance_bootstrap=0, relevance_prior="lognormal")


def generator(seed: int) -> torch.Generator:
    """A CPU generator seeded with ``seed`` (every random draw in a test names its seed)."""
    return torch.Generator().manual_seed(seed)


def assert_rel_close(a: torch.Tensor, b: torch.Tensor, rtol: float, what: str = "") -> None:
    """``max |a - b| / max |b| <= rtol``, with the relative error in the message."""
    scale = b.abs().max().clamp_min(1e-300)
    err = (a - b).abs().max() / scale
    assert err <= rtol, f"{what}: relative error {err:.3e} > {rtol:.1e}"


def assert_close_to_scale(a: torch.Tensor, b: torch.Tensor, rtol: float, what: str) -> None:
    """``max |a - b| <= rtol * max |b|``, with the error and the scale in the message."""
    err = (a - b).abs().max().item()
    scale = b.abs().max().item()
    assert err <= rtol * scale, f"{what}: max error {err:.3g} vs scale {scale:.3g}"
