#!/usr/bin/env python3
"""Run-to-run consistency of explanations: the inconsistency metric of BO-LIME and top-k agreement."""

from __future__ import annotations

import numpy as np

from ._arrays import as_array, as_positive_int

__all__ = ["inconsistency", "topk_agreement"]


def inconsistency(scores) -> float:
    r"""Inconsistency of repeated explanations (BO-LIME, Saini & Prasad 2022, §4.1 "Metric Used", which takes it
    from its ref. [4], ALIME: Shankaranarayana & Runje 2019).

    Scores ``(R, D)`` (R repeats of one sample's explanation) or ``(R, m, D)`` (R repeats of m samples):

    .. math::

        a_{rj} = \frac{|s_{rj}|}{\max_{j'} |s_{rj'}|}, \qquad
        \mathrm{inconsistency} = \frac{1}{D}\sum_{j=1}^D \operatorname{std}_{r}(a_{rj}),

    the normalisation by the maximum being per repeat (and per sample for 3-D input), and the result averaged
    over samples too for 3-D input. Lower is better; identical repeats score 0, and the value is at most 0.5.

    Choices the paper leaves open:

    - **std** is the population std over repeats (ddof = 0, numpy's default; the paper does not say, and its
      "standard deviation of the coefficient values across the iterations" is most naturally numpy's).
    - A repeat whose scores are all zero has no maximum to divide by; it is kept as all zeros.

    :param scores: ``(R, D)`` or ``(R, m, D)`` with :math:`R \ge 2`.
    :return: a float.

    Example:
        >>> import numpy as np
        >>> inconsistency(np.array([[2.0, -1.0], [4.0, 4.0]]))
        0.125
    """
    s = np.abs(as_array("scores", scores, (2, 3)))
    if s.shape[0] < 2:
        raise ValueError(f"inconsistency needs at least 2 repeats (axis 0), got shape {s.shape}.")
    if s.shape[-1] < 1:
        raise ValueError(f"inconsistency needs at least one feature (the last axis), got shape {s.shape}.")
    mx = s.max(-1, keepdims=True)
    a = np.where(mx > 0, s / np.where(mx > 0, mx, 1.0), 0.0)
    return float(a.std(0, ddof=0).mean())


def topk_agreement(a, b, k: int) -> float | np.ndarray:
    r"""Jaccard similarity of the top-:math:`k` features of two explanations, ranked by :math:`|\text{score}|`.

    .. math::

        J = \frac{|T_k(\mathbf a) \cap T_k(\mathbf b)|}{|T_k(\mathbf a) \cup T_k(\mathbf b)|},

    with :math:`T_k` the indices of the :math:`k` largest absolute scores. Ties are broken in favour of the
    lower feature index (stable sort), so the sets always have exactly :math:`k` elements; :math:`k \ge D`
    gives 1.

    :param a: ``(D,)`` (returns a float) or ``(m, D)`` (returns ``(m,)``).
    :param b: Scores of the same shape as ``a``.
    :param k: a positive integer (an int, a numpy integer or a 0-d integer array or tensor).

    Example:
        >>> import numpy as np
        >>> topk_agreement(np.array([3.0, -2.0, 1.0, 0.0]), np.array([0.1, 5.0, -4.0, 0.0]), k=2)
        0.3333333333333333
    """
    aa = as_array("a", a, (1, 2))
    bb = as_array("b", b, (1, 2))
    if aa.shape != bb.shape:
        raise ValueError(f"a and b must have the same shape, got {aa.shape} and {bb.shape}.")
    k = as_positive_int("k", k)
    A = np.atleast_2d(aa)
    B = np.atleast_2d(bb)
    D = A.shape[1]
    kk = min(k, D)
    ta = np.argsort(-np.abs(A), axis=1, kind="stable")[:, :kk]
    tb = np.argsort(-np.abs(B), axis=1, kind="stable")[:, :kk]
    ma = np.zeros(A.shape, bool)
    mb = np.zeros(B.shape, bool)
    np.put_along_axis(ma, ta, True, axis=1)
    np.put_along_axis(mb, tb, True, axis=1)
    j = (ma & mb).sum(1) / (ma | mb).sum(1)
    return float(j[0]) if aa.ndim == 1 else j
