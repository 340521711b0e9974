"""What a run did, from the statistics rows its commit streams back: running totals, the
periodic progress line, and the one-line summary.

Totals are kept per input file (O(files), never per document), so when a shard is dropped
after some of its rows were committed (it went bad midway) the summary counts only the rows
the output keeps.
"""

from __future__ import annotations

import datetime
import json
import logging
import threading
import time
import warnings
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from minkscan.distributed.console import (
    ray_actor_line_dropped,
    raylet_lines_dropped_once_stopping,
)
from minkscan.distributed.context import data_context
from minkscan.distributed.ids import IdReport
from minkscan.distributed.session import verbose
from minkscan.io.changes import InputChanges
from minkscan.io.inputs import not_read_note
from minkscan.schema import PieceKey

logger = logging.getLogger(__name__)


@dataclass
class _Totals:
    scored: int = 0  # rows the commit has seen (scored, maybe not yet written)
    rows: int = 0  # rows written
    tokens: int = 0
    statuses: Counter = field(default_factory=Counter)


LOADING, SCORING = "loading the model", "scoring"


@dataclass
class Progress:
    """Running totals of the commit's statistics, shown as they come and on a clock: one bar
    in a terminal (documents scored of the planned total, rate, ETA; redrawn every second),
    else a line every ``every`` seconds. Documents count once scored, before they are
    written; the summary counts what was written. ``clock`` is injectable for tests, and
    ``redraw`` (seconds between the ticker's redraws; None: no ticker, the caller drives
    `show`) too."""

    every: float
    total: int | None = None  # documents to score, when every piece's size is known
    by_file: dict[str, _Totals] = field(default_factory=dict)
    seconds: Counter = field(default_factory=Counter)
    clock: Callable[[], float] = time.perf_counter
    redraw: float | None = 1.0
    started: float = field(default_factory=time.perf_counter)
    last_line: float = field(default_factory=time.perf_counter)
    # What the run is doing: the actors start (their model loads and is probed) until the
    # first scored rows arrive; from then on it scores.
    phase: str = LOADING
    bar: Any = None
    _ticker: threading.Event | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def start(self, *, terminal: bool, width: int = 80) -> None:
        """Start the clock, and the bar (``width`` columns) when ``terminal``; then redraw
        the bar, or log a line when one is due, every second until `close`, whether or not a
        commit came. (The terminal is asked before the run pipes descriptor 2, so the bar
        is told its width rather than measuring the pipe.)"""
        self.started = self.last_line = self.clock()
        if terminal:
            from tqdm import tqdm

            self.bar = tqdm(total=self.total, unit="doc", desc=self.phase, ncols=width)
        if self.redraw is not None:
            self._ticker = threading.Event()
            threading.Thread(target=self._tick, args=(self._ticker,), daemon=True).start()

    def _tick(self, stop: threading.Event) -> None:
        while not stop.wait(self.redraw):
            self.show()

    def add(self, stats: pa.Table) -> None:
        with self._lock:
            self._add(stats)
        self.show()

    def _add(self, stats: pa.Table) -> None:
        for piece, arrived, rows, tokens, statuses, seconds in zip(
            *(stats[name].to_pylist() for name in ("piece", "arrived", "rows", "tokens",
                                                    "statuses", "seconds")),
            strict=True,
        ):  # fmt: skip
            totals = self.by_file.setdefault(PieceKey.parse(piece).file, _Totals())
            totals.scored += arrived
            totals.rows += rows
            totals.tokens += tokens
            totals.statuses.update(json.loads(statuses))
            self.seconds.update(json.loads(seconds))
        if self.scored:
            self.phase = SCORING

    def show(self) -> None:
        """Bring the bar up to date; without one, log the line if ``every`` has passed."""
        with self._lock:
            if self.bar is not None:
                if self.bar.desc != self.phase:
                    self.bar.set_description_str(self.phase, refresh=False)
                self.bar.update(self.scored - self.bar.n)
                return
            now = self.clock()
            if now - self.last_line >= self.every:
                self.last_line = now
                logger.info("progress: %s", self.line(now))

    def line(self, now: float) -> str:
        """'1,200 of 3,000 documents (40%), 52.1 docs/s, ETA 0:00:35', after 'loading the
        model: ' while no document is scored yet."""
        if self.phase != SCORING:
            return f"{self.phase}: {self._counts(now)}"
        return self._counts(now)

    def _counts(self, now: float) -> str:
        scored = self.scored
        rate = scored / max(now - self.started, 1e-9)
        if not self.total:
            return f"{scored:,} documents, {rate:.1f} docs/s"
        left = max(self.total - scored, 0)
        eta = str(datetime.timedelta(seconds=round(left / rate))) if rate > 0 else "?"
        return (
            f"{scored:,} of {self.total:,} documents "
            f"({100 * scored / self.total:.0f}%), {rate:.1f} docs/s, ETA {eta}"
        )

    def close(self) -> None:
        if self._ticker is not None:
            self._ticker.set()
        with self._lock:
            if self.bar is not None:
                self.bar.update(self.scored - self.bar.n)
                self.bar.close()
            elif self.scored:  # the last line, agreeing with the summary that follows
                logger.info("progress: %s", self.line(self.clock()))

    @property
    def unwritten(self) -> int:
        """Rows scored that no score file holds (the commit actor lost what it held)."""
        return self.scored - self.documents

    @property
    def scored(self) -> int:
        return sum(totals.scored for totals in self.by_file.values())

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
    skipped_files: dict[str, str] = field(default_factory=dict)  # not read, and why
    input_changes: InputChanges = field(default_factory=InputChanges)
    forward_passes: dict[str, int] = field(default_factory=dict)
    pass_seconds: dict[str, float] = field(default_factory=dict)
    ids: IdReport | None = None

    @property
    def docs_per_second(self) -> float:
        return self.documents / self.seconds if self.seconds > 0 else 0.0

    @property
    def tokens_per_second(self) -> float:
        return self.tokens / self.seconds if self.seconds > 0 else 0.0

    def line(self, wall_seconds: float | None = None) -> str:
        """The one-line summary printed at the end of a run; ``wall_seconds``, what the
        person waited (imports, planning and Ray's start-up included), beside the scoring
        seconds the rates divide by."""
        statuses = ", ".join(f"{k}={v}" for k, v in sorted(self.statuses.items()))
        passes = ", ".join(
            f"{k} {v} ({self.pass_seconds.get(k, 0.0):.1f} s)"
            for k, v in self.forward_passes.items()
        )
        ids = f"; ids: {self.ids.line()}" if self.ids and self.ids.line() else ""
        return (
            f"scored {self.documents} documents ({self.tokens} tokens) in {self.seconds:.1f} s"
            f"{'' if wall_seconds is None else f' ({wall_seconds:.1f} s in all)'}: "
            f"{self.docs_per_second:.1f} docs/s, {self.tokens_per_second:.0f} tokens/s; "
            f"statuses: {statuses or 'none'}; forward passes per document (actor seconds): "
            f"{passes}; "
            f"already done: {self.resumed_documents}; "
            f"skipped shards: {len(self.skipped_shards)}{not_read_note(self.skipped_files)}"
            f"{self.input_changes.note()}"
            f"{ids}; output: {self.output}"
        )


@contextmanager
def quiet_ray() -> Iterator[None]:
    """Ray's internals out of sight unless ``-v``: Ray Data's progress bars, execution plan
    and INFO lines, Ray's warnings about its own workings and the Python warnings of its
    modules, Ray Data's log of a failed task (a traceback whose cause the run's one-line
    error states first and alone), and the one error-level line Ray's C++ core prints for
    Ray Data's actors whatever their arguments (`ray_actor_line_dropped`), and the
    "(raylet)" lines of a stopped run's shutdown (`raylet_lines_dropped_once_stopping`).
    Ray's other errors, and minkscan's warnings, still show."""
    if verbose():
        yield
        return
    loggers = [logging.getLogger(name) for name in ("ray", "ray.data")]
    levels = [log.level for log in loggers]
    for log, level in zip(loggers, (logging.ERROR, logging.CRITICAL), strict=True):
        log.setLevel(level)
    settings = {"enable_progress_bars": False, "print_on_execution_start": False}
    try:
        with (
            warnings.catch_warnings(),
            data_context(**settings),
            ray_actor_line_dropped(),
            raylet_lines_dropped_once_stopping(),
        ):
            warnings.filterwarnings("ignore", module=r"ray(\.|$)")
            yield
    finally:
        for log, level in zip(loggers, levels, strict=True):
            log.setLevel(level)
