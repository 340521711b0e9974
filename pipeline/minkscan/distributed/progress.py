"""What a run did, from the statistics rows its commits stream back: running totals, the
periodic progress line, and the one-line summary.

Totals are kept per input file (O(files), never per document), so when a shard is dropped
after some of its rows were committed (it went bad midway) the summary counts only the rows
the output keeps.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from collections import Counter
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import pyarrow as pa

from minkscan.distributed.context import data_context
from minkscan.distributed.ids import IdReport

logger = logging.getLogger(__name__)


@dataclass
class _Totals:
    rows: int = 0
    tokens: int = 0
    statuses: Counter = field(default_factory=Counter)


@dataclass
class Progress:
    """Running totals of the commits' statistics, and the periodic progress line."""

    every: float
    by_file: dict[str, _Totals] = field(default_factory=dict)
    seconds: Counter = field(default_factory=Counter)
    started: float = field(default_factory=time.perf_counter)
    last_line: float = field(default_factory=time.perf_counter)

    def add(self, stats: pa.Table) -> None:
        for piece, rows, tokens, statuses, seconds in zip(
            *(stats[name].to_pylist() for name in ("piece", "rows", "tokens", "statuses",
                                                    "seconds")),
            strict=True,
        ):  # fmt: skip
            totals = self.by_file.setdefault(piece.split("-")[0], _Totals())
            totals.rows += rows
            totals.tokens += tokens
            totals.statuses.update(json.loads(statuses))
            self.seconds.update(json.loads(seconds))
        now = time.perf_counter()
        if now - self.last_line >= self.every:
            self.last_line = now
            rate = self.documents / (now - self.started)
            logger.info("progress: %d documents committed, %.1f docs/s", self.documents, rate)

    def drop(self, file_keys: Iterable[str]) -> None:
        """Forget the rows of files whose scores were removed (shards that went bad)."""
        for key in file_keys:
            self.by_file.pop(key, None)

    @property
    def documents(self) -> int:
        return sum(totals.rows for totals in self.by_file.values())

    @property
    def tokens(self) -> int:
        return sum(totals.tokens for totals in self.by_file.values())

    @property
    def statuses(self) -> dict[str, int]:
        return dict(sum((totals.statuses for totals in self.by_file.values()), Counter()))


@dataclass
class RunSummary:
    """What one run did (from the commits' statistics) and what the output now holds.

    ``forward_passes`` (per document) and ``pass_seconds`` (the model actors' compute
    seconds in this run, summed over actors) are keyed alike: the main pass, then each
    extra-pass method (`minkscan.methods.pass_labels`).
    """

    output: str
    manifest: str
    documents: int
    tokens: int
    seconds: float
    statuses: dict[str, int]
    total_documents: int
    resumed_documents: int
    pieces: int = 0
    pieces_done_before: int = 0
    skipped_shards: dict[str, str] = field(default_factory=dict)
    forward_passes: dict[str, int] = field(default_factory=dict)
    pass_seconds: dict[str, float] = field(default_factory=dict)
    ids: IdReport | None = None

    @property
    def docs_per_second(self) -> float:
        return self.documents / self.seconds if self.seconds > 0 else 0.0

    @property
    def tokens_per_second(self) -> float:
        return self.tokens / self.seconds if self.seconds > 0 else 0.0

    def line(self) -> str:
        """The one-line summary printed at the end of a run."""
        statuses = ", ".join(f"{k}={v}" for k, v in sorted(self.statuses.items()))
        passes = ", ".join(
            f"{k} {v} ({self.pass_seconds.get(k, 0.0):.1f} s)"
            for k, v in self.forward_passes.items()
        )
        ids = f"; ids: {self.ids.line()}" if self.ids and self.ids.line() else ""
        return (
            f"scored {self.documents} documents ({self.tokens} tokens) in {self.seconds:.1f} s: "
            f"{self.docs_per_second:.1f} docs/s, {self.tokens_per_second:.0f} tokens/s; "
            f"statuses: {statuses or 'none'}; forward passes per document (actor seconds): "
            f"{passes}; "
            f"already done: {self.resumed_documents}; "
            f"skipped shards: {len(self.skipped_shards)}{ids}; output: {self.output}"
        )


@contextmanager
def quiet_unless_terminal() -> Iterator[None]:
    """In a terminal, Ray Data's progress bars; otherwise (logs of a nightly job) none of its
    progress blocks or INFO lines: the driver's own progress line every
    ``ray.progress_seconds`` says how far the run is."""
    if sys.stderr.isatty():
        yield
        return
    ray_data = logging.getLogger("ray.data")
    level = ray_data.level
    ray_data.setLevel(logging.WARNING)
    try:
        with data_context(enable_progress_bars=False, print_on_execution_start=False):
            yield
    finally:
        ray_data.setLevel(level)
