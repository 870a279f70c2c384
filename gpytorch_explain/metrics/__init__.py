#!/usr/bin/env python3
"""Explanation-quality metrics on plain arrays (numpy or torch in, numpy out).

- :func:`faithfulness`, :func:`sufficiency`: feature-removal tests (GPX paper §5.2, Table 2, Figure 2).
- :func:`stability`: local Lipschitz estimate over the test set (GPX paper eq. (19), Table 3).
- :func:`inconsistency`, :func:`topk_agreement`: run-to-run consistency (BO-LIME).
- :func:`interval_coverage`, :func:`completeness_gap`: for explainers with uncertainty / additivity.
"""

from .consistency import inconsistency, topk_agreement
from .removal import faithfulness, sufficiency
from .stability import stability
from .uncertainty import completeness_gap, interval_coverage

__all__ = [
    "completeness_gap",
    "faithfulness",
    "inconsistency",
    "interval_coverage",
    "stability",
    "sufficiency",
    "topk_agreement",
]
