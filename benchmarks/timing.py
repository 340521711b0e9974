"""What the CPU benchmarks on real text share: where WikiMIA-24 lies and best-of timing."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
WIKIMIA64 = REPO.parent / "shared" / "data" / "wikimia24" / "length64.parquet"


def best_of(repeats: int, run: Callable[[], object]) -> float:
    """The fastest of ``repeats`` timed calls of ``run``, after one untimed warm-up."""
    run()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return min(times)
