"""Per-document p-values against calibration non-members, and a selection that controls
the false discovery rate.

A document's conformal p-value is (1 + number of calibration non-member scores >= its
score) / (n + 1) (higher score = more member-like). If the calibration non-members and the
audited non-members are exchangeable, a non-member's p-value is super-uniform, and the
p-values of a set of documents are positively dependent in the way Benjamini-Hochberg needs
(Bates et al. 2023, "Testing for outliers with conformal p-values"), so selecting with BH at
level q keeps the expected share of non-members among the selected at or under q. A random
sample of the calibration non-members is itself exchangeable with them, so p-values against
the sample a calibration file keeps are valid too, with resolution 1 / (n + 1).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.stats import false_discovery_control


def conformal_p_values(scores: np.ndarray, nonmembers: np.ndarray) -> np.ndarray:
    """(1 + #{non-member scores >= score}) / (n + 1) for every score."""
    reference = np.sort(np.asarray(nonmembers, dtype=np.float64))
    at_least = reference.size - np.searchsorted(reference, np.asarray(scores, np.float64), "left")
    return (1.0 + at_least) / (reference.size + 1.0)


@dataclass(frozen=True)
class Selection:
    """Which p-values Benjamini-Hochberg selects at ``q``: a mask, their BH-adjusted values
    (q-values) and the largest selected p-value (0 when none is)."""

    selected: np.ndarray
    q_values: np.ndarray
    cutoff: float


def benjamini_hochberg(p_values: np.ndarray, q: float) -> Selection:
    """Benjamini-Hochberg at level ``q`` (scipy's adjustment)."""
    if not 0 < q < 1:
        raise ValueError(f"the FDR level must be in (0, 1), got {q}")
    p_values = np.asarray(p_values, dtype=np.float64)
    if p_values.size == 0:
        return Selection(np.zeros(0, bool), np.zeros(0), 0.0)
    adjusted = false_discovery_control(p_values, method="bh")
    selected = adjusted <= q
    cutoff = float(p_values[selected].max()) if selected.any() else 0.0
    return Selection(selected, adjusted, cutoff)
