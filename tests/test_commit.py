"""The commit: scored rows are written by rows, by time and when a piece is whole, so a
kill loses at most about `data.commit_seconds` of work, and the run's last rows are always
written. Driven by an injected clock: no test here waits."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest
from minkscan.distributed.pieces import CommitStage
from minkscan.io.scores import ScoreOutput
from minkscan.schema import N_TOKENS, PIECE, PIECE_ROWS, ROW, STATUS, PieceKey


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def piece_key(name: str, rows: int) -> str:
    """Rows [0, rows) of the file whose key is ``name`` sixteen times."""
    return str(PieceKey(file=name * 16, start=0, end=rows))


def block(piece: str, rows: range, piece_rows: int) -> pa.Table:
    """Scored rows of ``piece`` as they reach the commit."""
    n = len(rows)
    return pa.table({
        "id": [f"{piece}:{r}" for r in rows], ROW: pa.array(list(rows), pa.int64()),
        N_TOKENS: [3] * n, STATUS: ["ok"] * n, "mean_logprob": [-1.0] * n,
        PIECE: [piece] * n, PIECE_ROWS: pa.array([piece_rows] * n, pa.int64()),
        "_seconds_main": [0.5] * n,
    })  # fmt: skip


@pytest.fixture
def output(tmp_path) -> ScoreOutput:
    return ScoreOutput(pafs.LocalFileSystem(), str(tmp_path))


def stage(output: ScoreOutput, clock: Clock, rows: int = 100, seconds: float = 30.0):
    return CommitStage(fs=output.fs, output_root=output.root, commit_rows=rows,
                       commit_seconds=seconds, clock=clock)  # fmt: skip


def written_rows(output: ScoreOutput) -> list[int]:
    return sorted(output.committed_rows(output.parts()))


def test_rows_are_held_until_the_oldest_is_commit_seconds_old(output):
    clock, piece = Clock(), piece_key("a", 1000)
    commit = stage(output, clock)
    stats = commit(block(piece, range(0, 10), 1000))
    assert stats.to_pylist()[0] | {"statuses": None, "seconds": None} == {
        "piece": piece, "arrived": 10, "rows": 0, "tokens": 0, "statuses": None,
        "seconds": None}  # fmt: skip
    assert written_rows(output) == []
    clock.now = 29.9
    commit(block(piece, range(10, 20), 1000))
    assert written_rows(output) == []
    clock.now = 30.0
    stats = commit(block(piece, range(20, 25), 1000)).to_pylist()
    assert written_rows(output) == list(range(25))
    assert stats == [{"piece": piece, "arrived": 5, "rows": 25, "tokens": 75,
                      "statuses": '{"ok": 25}', "seconds": '{"main": 12.5}'}]  # fmt: skip
    # The clock restarts with the next row held.
    clock.now = 50.0
    commit(block(piece, range(25, 30), 1000))
    assert written_rows(output) == list(range(25))


def test_commit_rows_held_are_written_at_once(output):
    clock = Clock()
    commit = stage(output, clock, rows=15)
    commit(block(piece_key("a", 1000), range(0, 10), 1000))
    commit(block(piece_key("b", 1000), range(0, 5), 1000))
    assert len(output.parts()) == 2 and len(written_rows(output)) == 15


def test_a_whole_piece_is_written_when_its_last_row_arrives(output):
    clock, whole, other = Clock(), piece_key("a", 12), piece_key("b", 1000)
    commit = stage(output, clock)
    commit(block(whole, range(0, 8), 12))
    commit(block(other, range(0, 3), 1000))
    assert output.parts() == []
    commit(block(whole, range(8, 12), 12))
    (part,) = output.parts()
    assert str(part.piece) == whole and part.rows == 12
    complete, _ = ScoreOutput.completion(output.parts())
    assert {str(p) for p in complete} == {whole}


def test_zero_commit_seconds_writes_every_block(output):
    clock, piece = Clock(), piece_key("a", 1000)
    commit = stage(output, clock, seconds=0)
    for start in range(0, 30, 10):
        commit(block(piece, range(start, start + 10), 1000))
        assert len(written_rows(output)) == start + 10


def test_the_score_files_keep_no_pipeline_column(output):
    commit = stage(output, Clock(), seconds=0)
    commit(block(piece_key("a", 1000), range(4), 1000))
    (part,) = output.parts()
    assert pq.read_schema(part.path).names == ["id", ROW, N_TOKENS, STATUS, "mean_logprob"]
    assert part.first == 0 and part.rows == 4
