#!/usr/bin/env python3
"""Memory available to a computation, and a check before paths that need more than that."""

from __future__ import annotations

import os
import warnings

import torch

__all__ = ["available_memory", "check_memory"]

#: Warn when an estimate exceeds this fraction of the available memory (raise above 1).
WARN_FRACTION = 0.5


def available_memory(device: torch.device | str | None = None) -> int | None:
    """Bytes available for new allocations on ``device``, or ``None`` when unknown.

    CUDA: ``torch.cuda.mem_get_info`` (free device memory) plus what PyTorch's caching allocator reserved but does
    not use. CPU: ``psutil.virtual_memory().available`` when
    psutil is installed, else ``MemAvailable`` of ``/proc/meminfo``, else free pages (``os.sysconf``).
    """
    device = torch.device("cpu") if device is None else torch.device(device)
    if device.type == "cuda":
        try:
            free = int(torch.cuda.mem_get_info(device)[0])
            # memory PyTorch's caching allocator holds but does not use is free for new tensors too
            return free + int(torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device))
        except Exception:  # pragma: no cover - depends on the driver
            return None
    if device.type != "cpu":
        return None
    try:
        import psutil

        return int(psutil.virtual_memory().available)
    except ImportError:
        pass
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return int(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):  # pragma: no cover - non-POSIX
        return None


def _gib(value: float) -> str:
    return f"{value / 2**30:.2f} GiB"


def check_memory(required: float, device: torch.device | str | None, what: str, alternatives: str = "") -> None:
    """Raise ``MemoryError`` when ``required`` bytes exceed the available memory, warn above half of it.

    The message names the estimate, the memory available and ``alternatives``. Nothing happens when the
    available memory is unknown or :class:`gpytorch_explain.settings.check_memory` is off.

    Example:
        >>> check_memory(1024.0, "cpu", "a tiny computation")  # far below any machine's memory: silent
    """
    from .. import settings as explain_settings

    if not explain_settings.check_memory.on():
        return
    available = available_memory(device)
    if available is None:
        return
    tail = f" Alternatives: {alternatives}" if alternatives else ""
    off = " (Turn this check off with gpytorch_explain.settings.check_memory(False).)"
    if required > available:
        raise MemoryError(f"{what} needs about {_gib(required)} but only {_gib(available)} is available.{tail}{off}")
    if required > WARN_FRACTION * available:
        warnings.warn(
            f"{what} needs about {_gib(required)} of the {_gib(available)} available.{tail}",
            ResourceWarning,
            stacklevel=3,
        )
