"""The embedded Ray leaves nothing behind: a run that ends shuts it down entirely, and the
processes a killed driver's Ray leaves are ended by the next run, found by the session
recorded when it started."""

from __future__ import annotations

import json
import os
import re
import signal
import time
from pathlib import Path

from helpers import score_process, write_parquet
from minkscan.distributed.session import session_processes

TEXTS = [f"A document {i} long enough to keep a run busy for a little while." for i in range(600)]


def wait_for(condition, seconds: float = 120.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.2)


def sessions() -> set[Path]:
    return set(Path("/tmp/ray").glob("session_2*"))


def test_a_killed_drivers_ray_processes_are_ended_by_the_next_run_and_a_run_leaves_none(
    tiny_llama_dir, tmp_path
):
    env = os.environ | {"MINKSCAN_CACHE": str(tmp_path / "cache")}
    records = tmp_path / "cache" / "ray-sessions"
    (tmp_path / "in").mkdir()
    write_parquet(tmp_path / "in" / "a.parquet", text=TEXTS)
    extra = ("--set", "data.piece_rows=50", "--set", "ray.block_rows=16")
    killed = score_process(tiny_llama_dir, tmp_path / "in", tmp_path / "out", *extra, env=env)
    wait_for(lambda: any(records.glob("*.json")))
    (record_path,) = records.glob("*.json")
    record = json.loads(record_path.read_text())
    wait_for(lambda: any((tmp_path / "out").glob("part-*.parquet")))  # the pipeline is running
    os.kill(killed.pid, signal.SIGKILL)
    killed.wait()
    time.sleep(3)
    left = session_processes(record["session_dir"], record["processes"])
    assert left, "nothing outlived the killed driver: this test no longer shows anything"

    write_parquet(tmp_path / "in" / "b.parquet", text=TEXTS[:10])  # so the rerun has work
    before = sessions()
    rerun = score_process(tiny_llama_dir, tmp_path / "in", tmp_path / "out", *extra, env=env)
    _, err = rerun.communicate(timeout=300)

    assert rerun.returncode == 0, err
    assert re.search(r"ended \d+ process\(es\) left by the embedded Ray of an earlier run", err)
    assert session_processes(record["session_dir"], record["processes"]) == []
    assert not record_path.exists()
    # The run that ended normally left no process of its own session, and no record.
    (own,) = sessions() - before
    wait_for(lambda: session_processes(str(own)) == [], seconds=15)
    assert not any(records.glob("*.json"))
