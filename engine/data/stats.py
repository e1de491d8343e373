"""The numbers every benchmark, evaluation and training check reports: latency percentiles
(p50, p95, p99) and the edit similarity of a completion to its reference
(dg_lsp.measure.eval.scoring
states the definitions)."""

from __future__ import annotations

import math
from collections.abc import Iterable


def percentile(values: Iterable[float], p: float) -> float:
    """Nearest-rank `p`-th percentile (0 < p <= 100) of `values`; 0.0 for none."""
    ordered = sorted(values)
    if not ordered:
        return 0.0
    rank = max(1, math.ceil(p / 100 * len(ordered)))
    return ordered[rank - 1]


def levenshtein(a: str, b: str) -> int:
    """Edit distance with unit costs, by the classic two-row dynamic programme."""
    if len(a) < len(b):
        a, b = b, a
    previous = list(range(len(b) + 1))
    for i, ca in enumerate(a, start=1):
        current = [i]
        for j, cb in enumerate(b, start=1):
            current.append(
                min(
                    previous[j] + 1,  # delete ca
                    current[j - 1] + 1,  # insert cb
                    previous[j - 1] + (ca != cb),  # substitute (free when equal)
                )
            )
        previous = current
    return previous[-1]


def edit_similarity(completion: str, reference: str) -> float:
    longest = max(len(completion), len(reference))
    if longest == 0:
        return 1.0
    return 1.0 - levenshtein(completion, reference) / longest


def wilson_interval(successes: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """The 95% Wilson score interval of a rate of `successes` in `n` trials ((0, 1) for none).
    On the 30 cases an eval class holds, one case is 3 points and the interval about 30
    points wide: a difference of a case or two says nothing."""
    if n == 0:
        return 0.0, 1.0
    rate = successes / n
    centre = (rate + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(rate * (1 - rate) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)
