"""Goodness-of-fit helpers for statistical tests of samplers (exact distribution vs. samples)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Hashable, Iterable, Mapping

from scipy.stats import chi2


@dataclass(frozen=True)
class ChiSquareResult:
    """Pearson chi-square goodness-of-fit.

    Attributes:
      statistic: sum over cells of (observed - expected)^2 / expected.
      dof: degrees of freedom (cells after merging - 1).
      p_value: probability of a statistic at least this large under the exact distribution.
      cells: number of cells after merging the rare ones.
      unexpected: samples of outcomes that have probability 0 under the exact distribution.
    """

    statistic: float
    dof: int
    p_value: float
    cells: int
    unexpected: int


def chi_square_gof(
    samples: Iterable[Hashable] | Mapping[Hashable, int],
    probabilities: Mapping[Hashable, float],
    *,
    min_expected: float = 5.0,
) -> ChiSquareResult:
    """Chi-square test of observed outcomes against exact probabilities.

    Cells whose expected count is below ``min_expected`` are merged (rarest first) into one pooled
    cell so that the chi-square approximation holds. An outcome of probability 0 that was observed
    makes the test fail outright (``p_value = 0``): no sampling noise explains it.

    Args:
      samples: the observed outcomes, or a ``{outcome: count}`` mapping.
      probabilities: ``{outcome: probability}``; must sum to 1.
      min_expected: smallest expected count of a cell.

    Returns:
      A :class:`ChiSquareResult`.
    """
    counts = Counter(samples) if not isinstance(samples, Mapping) else Counter(dict(samples))
    total = sum(counts.values())
    if total == 0:
        raise ValueError("no samples")
    mass = sum(probabilities.values())
    if abs(mass - 1.0) > 1e-9:
        raise ValueError(f"probabilities sum to {mass}, not 1")
    unexpected = sum(c for outcome, c in counts.items() if probabilities.get(outcome, 0.0) <= 0.0)
    cells: list[tuple[float, int]] = []  # (expected, observed)
    pooled_expected, pooled_observed = 0.0, 0
    for outcome, p in sorted(probabilities.items(), key=lambda item: item[1]):
        if p <= 0.0:
            continue
        expected = p * total
        if expected < min_expected or pooled_expected and pooled_expected < min_expected:
            pooled_expected += expected
            pooled_observed += counts.get(outcome, 0)
        else:
            cells.append((expected, counts.get(outcome, 0)))
    if pooled_expected > 0.0:
        if pooled_expected < min_expected and cells:
            # Too little mass even pooled: fold it into the rarest regular cell.
            expected, observed = cells.pop(0)
            pooled_expected += expected
            pooled_observed += observed
        cells.append((pooled_expected, pooled_observed))
    statistic = sum((o - e) ** 2 / e for e, o in cells)
    dof = len(cells) - 1
    if dof < 1:
        raise ValueError("need at least two cells; draw more samples")
    p_value = 0.0 if unexpected else float(chi2.sf(statistic, dof))
    return ChiSquareResult(statistic=statistic, dof=dof, p_value=p_value, cells=len(cells), unexpected=unexpected)
