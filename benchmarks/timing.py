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


def plain_line(seconds: float) -> str:
    """The reference row of a comparison: the plain scoring pass."""
    return f"{'plain scoring pass (every single-pass method):':47} {seconds:.2f} s"


def against_plain(label: str, seconds: float, plain: float, note: str = "") -> str:
    """A row of a comparison: ``label``'s seconds and their multiple of the plain pass."""
    return f"{label + ':':47} {seconds:.2f} s  ({seconds / plain:.2f}x the plain pass{note})"
