"""Progress moves with the work: documents count once scored (before they are written),
lines come on a clock whether or not a commit came, and the last line agrees with the
summary. Driven by an injected clock."""

from __future__ import annotations

import logging

import pyarrow as pa
from minkscan.distributed.pieces import STATISTICS
from minkscan.distributed.progress import Progress
from minkscan.schema import PieceKey

PIECE = str(PieceKey("ab" * 8, 0, 100))


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def statistics(arrived: int, written: int) -> pa.Table:
    return pa.Table.from_pylist(
        [{"piece": PIECE, "arrived": arrived, "rows": written, "tokens": 4 * written,
          "statuses": f'{{"ok": {written}}}' if written else "{}", "seconds": "{}"}],
        schema=STATISTICS,
    )  # fmt: skip


def progress_lines(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.getMessage().startswith("progress: ")]


def started(caplog) -> tuple[Clock, Progress]:
    """A piped run's progress of 100 documents, a line every 10 s, on a clock the test
    moves (no ticker: the test calls `show` where the ticker would)."""
    caplog.set_level(logging.INFO, logger="minkscan")
    clock = Clock()
    progress = Progress(every=10, total=100, clock=clock, redraw=None)
    progress.start(terminal=False)
    return clock, progress


def test_documents_count_when_scored_before_any_is_written(caplog):
    clock, progress = started(caplog)
    clock.now = 10
    progress.add(statistics(arrived=30, written=0))
    assert progress_lines(caplog) == [
        "progress: 30 of 100 documents (30%), 3.0 docs/s, ETA 0:00:23"
    ]
    assert (progress.scored, progress.documents, progress.unwritten) == (30, 0, 30)
    progress.close()


def test_a_line_comes_on_the_clock_without_a_commit(caplog):
    clock, progress = started(caplog)
    progress.add(statistics(arrived=20, written=0))
    clock.now = 5
    progress.show()
    assert progress_lines(caplog) == []  # not yet due
    clock.now = 20
    progress.show()  # what the ticker thread calls every second
    assert progress_lines(caplog) == [
        "progress: 20 of 100 documents (20%), 1.0 docs/s, ETA 0:01:20"
    ]
    progress.close()


def test_when_all_is_written_progress_and_summary_agree(caplog):
    clock, progress = started(caplog)
    progress.add(statistics(arrived=60, written=0))
    progress.add(statistics(arrived=40, written=100))
    clock.now = 5
    progress.close()
    assert (
        progress_lines(caplog)[-1]
        == "progress: 100 of 100 documents (100%), 20.0 docs/s, ETA 0:00:00"
    )
    assert (progress.scored, progress.documents, progress.unwritten) == (100, 100, 0)
    assert progress.tokens == 400 and progress.statuses == {"ok": 100}


def test_until_the_first_rows_arrive_the_line_says_the_model_is_loading(caplog):
    clock, progress = started(caplog)
    clock.now = 10
    progress.show()
    assert progress_lines(caplog) == [
        "progress: loading the model: 0 of 100 documents (0%), 0.0 docs/s, ETA ?"
    ]
    progress.add(statistics(arrived=10, written=0))
    clock.now = 20
    progress.show()
    assert progress_lines(caplog)[-1] == (
        "progress: 10 of 100 documents (10%), 0.5 docs/s, ETA 0:03:00"
    )
    assert progress.phase == "scoring"
    progress.close()
