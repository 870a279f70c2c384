r"""Whether the samples of :class:`~gpytorch_explain.local.LocalGPExplainer` can tell its most relevant features apart.

On a black box that is flat over most of the box (a saturated classifier, a tree ensemble's plateau) the output's
variation can rest on a handful of samples. The relevance :math:`1/\ell_i` then says which features *separate those
samples from the rest*, and when two features take the same values on them (acquisitions such as ``"lcb"`` and
``"variance"`` sample corners of the box, where every coordinate is :math:`\pm 1`) the samples cannot say which of
the two matters: the sparsity prior hands the relevance to one of them, possibly to a feature the black box never
reads. On a gradient-boosted classifier of 10 breast-cancer features with two appended columns it ignores, three of
50 samples carried 99 % of the variation and the relevance put 0.98 on the two ignored columns, which agreed on those
samples with three features the model does use.

:func:`confounded_features` finds such ties: the *informative samples* are the fewest that hold
``_INFORMATIVE_SHARE`` of :math:`\sum_s (z_s - \operatorname{median} z)^2`; two features are tied when their box
coordinates on every informative sample differ by at most ``_TIE_TOL`` (or are mirrored: :math:`u_k \approx -u_j`,
which an RBF cannot tell apart either). The check reads the samples only; it changes no result.
"""

from __future__ import annotations

import numpy as np

__all__ = ["confounded_features", "informative_samples"]

#: the informative samples hold this share of the output's squared deviations from its median
_INFORMATIVE_SHARE = 0.9
#: two features are tied when their box coordinates on the informative samples differ by at most this
_TIE_TOL = 0.25
#: with more informative samples than this, a tie within ``_TIE_TOL`` on all of them is not looked for
_MAX_INFORMATIVE = 8
#: only features with at least this normalised relevance are checked
_MIN_RELEVANCE = 0.05


def informative_samples(z: np.ndarray, share: float = _INFORMATIVE_SHARE) -> np.ndarray:
    r"""Indices of the fewest samples that hold ``share`` of :math:`\sum_s (z_s - \operatorname{median} z)^2`.

    Empty when every output equals the median (a constant black box).

    Example:
        >>> import numpy as np
        >>> z = np.r_[np.zeros(20), 5.0, -4.0, 0.1]
        >>> sorted(informative_samples(z).tolist())
        [20, 21]
    """
    z = np.asarray(z, dtype=np.float64).reshape(-1)
    dev = (z - np.median(z)) ** 2
    total = dev.sum()
    if not total > 0:
        return np.zeros(0, dtype=int)
    order = np.argsort(-dev, kind="stable")
    k = int(np.searchsorted(np.cumsum(dev[order]) / total, share - 1e-12) + 1)
    return order[: min(k, len(z))]


def confounded_features(
    U: np.ndarray, z: np.ndarray, relevance: np.ndarray, top: int = 3
) -> tuple[np.ndarray, dict[int, list[int]]]:
    r"""``(informative, ties)``: the informative samples and, for each of the ``top`` most relevant features ``j``
    (relevance at least ``_MIN_RELEVANCE``), the other features tied with it on those samples.

    :param U: ``(n, d)`` samples in box coordinates (``x`` at 0, the box :math:`[-1, 1]^d`).
    :param z: ``(n,)`` outputs (any affine scale).
    :param relevance: ``(d,)`` normalised relevances.

    ``ties`` is empty when there are more than ``_MAX_INFORMATIVE`` informative samples or none.

    Example:
        >>> import numpy as np
        >>> rng = np.random.RandomState(0)
        >>> U = rng.uniform(-1, 1, (30, 4))
        >>> U[:3, 1] = -1.0; U[:3, 3] = 1.0          # three corner samples: feature 3 mirrors feature 1 on them
        >>> z = np.where(np.arange(30) < 3, 4.0, 0.0)
        >>> informative, ties = confounded_features(U, z, np.array([0.1, 0.6, 0.1, 0.2]))
        >>> sorted(informative.tolist()), ties
        ([0, 1, 2], {1: [3], 3: [1]})
    """
    U = np.asarray(U, dtype=np.float64)
    relevance = np.asarray(relevance, dtype=np.float64).reshape(-1)
    informative = informative_samples(z)
    ties: dict[int, list[int]] = {}
    if informative.size == 0 or informative.size > _MAX_INFORMATIVE:
        return informative, ties
    V = U[informative]
    for j in np.argsort(-relevance, kind="stable")[:top]:
        if relevance[j] < _MIN_RELEVANCE:
            continue
        same = np.abs(V - V[:, [j]]).max(0) <= _TIE_TOL
        mirrored = np.abs(V + V[:, [j]]).max(0) <= _TIE_TOL
        tied = [int(k) for k in np.flatnonzero(same | mirrored) if k != j]
        if tied:
            ties[int(j)] = tied
    return informative, ties
