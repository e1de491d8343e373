"""The percentile every benchmark and evaluation reports (p50, p95, p99 latencies)."""

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
