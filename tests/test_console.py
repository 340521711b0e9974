"""Ray's one actor line (ray-project/ray#57733) is kept off the terminal; everything else
written to descriptor 2 reaches it unchanged and in order, a line split across writes
included, and a closed terminal never blocks the writer. Ray's "(raylet)" lines on standard
output show while a run goes and are dropped once a stopped run shuts Ray down."""

from __future__ import annotations

import io
import signal
import subprocess
import sys

import pytest
from minkscan.distributed.console import (
    filtered,
    raylet_lines_dropped_once_stopping,
    stop_signals_mark_stopping,
    stopping,
)

RAY_LINE = (
    "[2026-11-25 18:57:24,937 E 11062 11062] core_worker.cc:2465: Actor with class name: "
    "'MapWorker(MapBatches(ScoreStage))' and ID: 'cd4c107b097d78d4950cc3af01000000' has "
    "constructor arguments in the object store and max_restarts > 0. If the arguments in the "
    "object store go out of scope or are lost, the actor restart will fail. See "
    "https://github.com/ray-project/ray/issues/53727 for more details.\n"
)
OTHER_RAY_LINE = "[2026-11-25 18:57:25,001 W 11062 11062] raylet_client.cc:10: a warning\n"


def stderr_of(writes: list[str], tail: str = "") -> subprocess.CompletedProcess:
    """Run ``writes`` to descriptor 2 inside `ray_actor_line_dropped`, then ``tail``."""
    code = (
        "import os, sys\n"
        "from minkscan.distributed.console import ray_actor_line_dropped\n"
        "with ray_actor_line_dropped():\n"
        f"    for piece in {writes!r}:\n"
        "        os.write(2, piece.encode())\n"
        "    print('through Python', file=sys.stderr)\n"
        f"os.write(2, {tail!r}.encode())\n"
    )
    return subprocess.run([sys.executable, "-c", code], capture_output=True)


def test_rays_actor_line_is_dropped_and_everything_else_passes_in_order():
    half = len(RAY_LINE) // 2
    result = stderr_of(
        ["progress: 1 of 4\n", "\rscoring:  25%", RAY_LINE[:half], RAY_LINE[half:],
         OTHER_RAY_LINE, "\rscoring: 100%"],
        tail="after\n",
    )  # fmt: skip
    assert result.returncode == 0
    assert result.stderr.decode() == (
        "progress: 1 of 4\n\rscoring:  25%" + OTHER_RAY_LINE + "\rscoring: 100%through Python\n"
        "after\n"
    )


def test_a_ray_line_split_across_reads_is_held_until_whole_then_dropped():
    """However the pipe's reads cut the writes (here: at every byte)."""
    stream = ("\rscoring:  25%" + RAY_LINE + OTHER_RAY_LINE + "\rscoring: 50%").encode()
    shown, pending = b"", b""
    for byte in stream:
        out, pending = filtered(pending + bytes([byte]))
        shown += out
    assert (shown + pending).decode() == "\rscoring:  25%" + OTHER_RAY_LINE + "\rscoring: 50%"


def test_a_closed_terminal_never_blocks_the_writer():
    code = (
        "import os\n"
        "from minkscan.distributed.console import ray_actor_line_dropped\n"
        "with ray_actor_line_dropped():\n"
        "    for _ in range(64):\n"
        "        os.write(2, b'x' * 65536)\n"
        "print('done')\n"
    )
    job = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE)  # fmt: skip
    job.stderr.close()  # nobody reads descriptor 2 any more (`minkscan ... 2>&1 | head`)
    out, _ = job.communicate(timeout=60)
    assert job.returncode == 0 and out == b"done\n"


SUBMIT_FAILED = (
    "\x1b[33m(raylet)\x1b[0m Task MapWorker(MapBatches(ScoreStage)).submit failed. There are "
    "infinite retries remaining, so the task will be retried. Error: The worker died"
)


def test_raylet_lines_show_while_a_run_goes_and_are_dropped_once_it_is_stopping(monkeypatch):
    terminal = io.StringIO()
    monkeypatch.setattr(sys, "stdout", terminal)
    with raylet_lines_dropped_once_stopping():
        print("(raylet) A worker died or was killed while executing a task")  # news: shown
        print("scored 10 documents")
        stopping()
        print(SUBMIT_FAILED)
        sys.stdout.write(SUBMIT_FAILED[:20])  # one line in two writes
        sys.stdout.write(SUBMIT_FAILED[20:] + "\nthe line after it\n")
        print("an unfinished line", end="")
    assert sys.stdout is terminal
    assert terminal.getvalue() == (
        "(raylet) A worker died or was killed while executing a task\nscored 10 documents\n"
        "the line after it\nan unfinished line"
    )


def test_ctrl_c_marks_the_run_stopping_before_it_unwinds_through_ray(monkeypatch):
    """Ray Data's iterator kills its actors while the interrupt unwinds through it, before
    the run's own ``except``: the "(raylet)" lines of those kills are dropped already."""
    terminal = io.StringIO()
    monkeypatch.setattr(sys, "stdout", terminal)
    before = signal.signal(signal.SIGINT, signal.default_int_handler)  # as in a terminal
    try:
        with raylet_lines_dropped_once_stopping():
            restore = stop_signals_mark_stopping()
            try:
                with pytest.raises(KeyboardInterrupt):
                    try:
                        signal.raise_signal(signal.SIGINT)
                    finally:  # as Ray Data's iterator shuts its executor down
                        print(SUBMIT_FAILED)
            finally:
                restore()
            print("minkscan score: interrupted")
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    finally:
        signal.signal(signal.SIGINT, before)
    assert terminal.getvalue() == "minkscan score: interrupted\n"
