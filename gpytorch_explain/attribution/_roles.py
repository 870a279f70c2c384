#!/usr/bin/env python3
r"""Which GPyTorch kernel's mathematics a kernel object follows, for the closed forms and the structural recursion.

The derivative code dispatches on the kernel classes whose formulas it knows (``RBFKernel``, ``ScaleKernel``, ...).
Dispatching on ``type(kernel)`` alone sent every subclass, even ``class MyRBF(RBFKernel): pass``, to the generic
autograd leaf. :func:`kernel_role` also accepts a subclass that inherits its base's ``forward``, ``__call__`` and
``covar_dist`` unchanged (so it computes the same function), and a class that declares its role in
``_explain_role`` (a kernel whose ``forward`` is written out but equals its base's mathematics). A subclass that
overrides one of those methods has no role: its own ``forward`` is differentiated.
"""

from __future__ import annotations

from gpytorch.kernels import (
    AdditiveKernel,
    ConstantKernel,
    Kernel,
    LinearKernel,
    MaternKernel,
    PeriodicKernel,
    ProductKernel,
    RBFKernel,
    RFFKernel,
    RQKernel,
    ScaleKernel,
)

__all__ = ["kernel_role"]

_KNOWN: tuple[type[Kernel], ...] = (
    ScaleKernel,
    AdditiveKernel,
    ProductKernel,
    RBFKernel,
    RQKernel,
    MaternKernel,
    PeriodicKernel,
    LinearKernel,
    ConstantKernel,
    RFFKernel,
)


def kernel_role(kernel: Kernel) -> type[Kernel] | None:
    """The known GPyTorch class whose mathematics ``kernel`` computes, or ``None`` (differentiate its ``forward``).

    Example:
        >>> from gpytorch.kernels import RBFKernel
        >>> class MyRBF(RBFKernel):
        ...     pass
        >>> kernel_role(MyRBF()) is RBFKernel
        True
    """
    cls = type(kernel)
    for klass in cls.__mro__:  # a declaration counts unless a class below it redefines how the value is computed
        if "_explain_role" in vars(klass):
            declared = vars(klass)["_explain_role"]
            return declared if isinstance(kernel, declared) else None
        if any(name in vars(klass) for name in _COMPUTING):
            break
    if cls in _KNOWN:
        return cls
    for known in _KNOWN:
        if isinstance(kernel, known) and not _overrides(cls, known):
            return known
    return None


#: the methods a kernel's value comes from (``RBFKernel.forward`` calls ``self.covar_dist``)
_COMPUTING = ("forward", "__call__", "covar_dist")


def _overrides(cls: type, known: type) -> bool:
    """Whether ``cls`` or a class between it and ``known`` redefines a method the kernel's value comes from."""
    for klass in cls.__mro__:
        if klass is known:
            return False
        if any(name in vars(klass) for name in _COMPUTING):
            return True
    return True
