"""The pipeline beyond one in-process Ray: a crashed `minkscan score` resumed, a run beside
another Ray head, and actors spread over a two-node cluster. (`ray job submit` to a head on
loopback is README's example, run by test_readme_examples.)"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import polars as pl
import pyarrow.fs as pafs
import pytest
import ray
from helpers import REPO, ray_head, score_command
from minkscan.config import build_config
from minkscan.distributed.runner import run_scoring
from minkscan.distributed.session import session_processes
from minkscan.io.score_reader import read_output
from minkscan.io.scores import ScoreOutput
from minkscan.models.loading import load_model
from minkscan.scorer import DocumentScorer
from ray.cluster_utils import Cluster

pytestmark = pytest.mark.slow


def write_corpus(directory: Path, documents: int, per_shard: int) -> list[str]:
    directory.mkdir(parents=True)
    ids = [f"doc-{i:05d}" for i in range(documents)]
    texts = [f"Document {i} says the quick brown fox jumps over the lazy dog." for i in ids]
    for start in range(0, documents, per_shard):
        part = slice(start, start + per_shard)
        pl.DataFrame({"id": ids[part], "text": texts[part]}).write_parquet(
            directory / f"part-{start // per_shard:04d}.parquet"
        )
    return ids


def committed_ids(output: Path) -> list[str]:
    """Ids of the complete pieces, as every reader of the output sees them."""
    return sorted(
        read_output(ScoreOutput(pafs.LocalFileSystem(), str(output)), ["id"])["id"].to_pylist()
    )


def ctrl_c_as_in_a_terminal() -> None:
    """Ctrl-C's default action for the child, as a shell in a terminal starts a command: a
    suite started in the background (``cmd &``) has SIGINT ignored, and children inherit it."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def has_complete_piece(output: Path) -> bool:
    return (
        output.is_dir()
        and ScoreOutput.completion(ScoreOutput(pafs.LocalFileSystem(), str(output)).parts())[0]
        != set()
    )


def test_rerun_after_killing_the_job_midway_completes_each_id_exactly_once(
    tiny_llama_dir, tmp_path
):
    """`kill -9` of the driver midway: the rerun scores only what was not committed, every id
    once with a clean run's scores, and ends the processes the killed driver's embedded Ray
    left behind (found by the session recorded when it started); a run that ends normally
    leaves none of its own."""
    ids = write_corpus(tmp_path / "in", documents=160, per_shard=20)
    output = tmp_path / "out"
    env = os.environ | {"MINKSCAN_CACHE": str(tmp_path / "cache")}
    records = tmp_path / "cache" / "ray-sessions"
    # Batches of 10 rows and commits of 20: the run commits in many small steps, so the kill
    # lands between two of them rather than after one big final commit.
    command = [*score_command(tiny_llama_dir, tmp_path / "in", output),
               "--set", "data.commit_rows=20", "--set", "ray.block_rows=10"]  # fmt: skip
    log = tmp_path / "first-run.log"
    with log.open("w") as sink:
        job = subprocess.Popen(command, cwd=REPO, stdout=sink, stderr=subprocess.STDOUT, env=env)
    deadline = time.monotonic() + 120
    while not has_complete_piece(output):  # kill once some piece is committed
        assert job.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
        time.sleep(0.05)
    os.kill(job.pid, signal.SIGKILL)  # the driver only, as `kill -9` does
    job.wait()
    (record,) = [json.loads(path.read_text()) for path in records.glob("*.json")]
    time.sleep(3)  # what dies with the driver has died
    left = session_processes(record["session_dir"], record["processes"])
    assert left, "nothing outlived the killed driver: this test no longer shows anything"
    partial = committed_ids(output)
    assert 0 < len(partial) < len(ids), "the kill did not land midway"
    committed_rows = sum(
        part.rows for part in ScoreOutput(pafs.LocalFileSystem(), str(output)).parts()
    )

    rerun = subprocess.Popen(command, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True, env=env)  # fmt: skip
    stdout, stderr = rerun.communicate(timeout=180)

    assert rerun.returncode == 0, stderr[-2000:]
    assert "left by the embedded Ray of an earlier run" in stderr
    assert session_processes(record["session_dir"], record["processes"]) == []
    # The rerun's own Ray session: Ray names it after the process that started it.
    (own,) = Path("/tmp/ray").glob(f"session_2*_{rerun.pid}")
    for _ in range(75):  # the rerun's own Ray is shut down entirely
        if not session_processes(str(own)):
            break
        time.sleep(0.2)
    assert session_processes(str(own)) == [] and not any(records.glob("*.json"))
    assert f"already done: {len(partial)}" in stdout
    # Strictly less than the whole corpus: complete pieces and committed rows are not redone.
    assert f"scored {len(ids) - committed_rows} documents" in stdout
    assert committed_ids(output) == ids
    # The same scores as a clean run: the in-process scorer on the same texts.
    final = pl.from_arrow(read_output(ScoreOutput(pafs.LocalFileSystem(), str(output)))).sort("id")
    config = build_config({}, {"model.name": str(tiny_llama_dir), "model.device": "cpu"})
    expected = DocumentScorer(load_model(config.model), config.scoring).score_frame(
        [f"Document {i} says the quick brown fox jumps over the lazy dog." for i in ids]
    )
    for column in ("mean_logprob", "minkpp_k20"):
        assert final[column].to_list() == pytest.approx(expected[column].to_list(), abs=1e-4)


def test_two_node_cluster_runs_scoring_actors_on_both_nodes(tiny_llama_dir, tmp_path):
    ids = write_corpus(tmp_path / "in", documents=60, per_shard=10)
    if ray.is_initialized():
        ray.shutdown()  # the session's Ray; this test needs a cluster of its own
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 3})
    cluster.add_node(num_cpus=3)
    try:
        ray.init(address=cluster.address, log_to_driver=False)
        config = build_config(
            {},
            {
                "model.name": str(tiny_llama_dir),
                "model.device": "cpu",
                "data.input": [str(tmp_path / "in")],
                "data.output": str(tmp_path / "out"),
                "ray.num_actors": 2,
                # Two replicas cannot share one 3-CPU node; each node keeps a CPU for a read.
                "ray.cpus_per_actor": 1.6,
                "ray.block_rows": 5,
                "data.check_ids": False,
            },
        )
        summary = run_scoring(config)
        nodes = {
            actor["Address"]["NodeID"]
            for actor in ray._private.state.actors().values()
            if "ScoreStage" in actor["ActorClassName"] or "ScoreStage" in str(actor)
        }
    finally:
        ray.shutdown()
        cluster.shutdown()
    assert summary.documents == len(ids)
    assert len(nodes) == 2


def test_a_run_beside_a_running_local_ray_without_a_terminal_is_quiet_and_its_own(
    tiny_llama_dir, tmp_path
):
    """A `ray start --head` on the machine is not joined without --address (its 1 CPU would
    starve the pipeline), and output that is not a terminal gets nothing of Ray's -- no
    notice, plan, progress block or warning -- only minkscan's progress lines (done of total,
    rate, ETA; the last one 40 of 40) and its summary."""
    ids = write_corpus(tmp_path / "in", documents=40, per_shard=10)
    env = os.environ | {"RAY_AUTH_MODE": "disabled"}
    with ray_head(env, dashboard=False, num_cpus=1):
        result = subprocess.run(
            [*score_command(tiny_llama_dir, tmp_path / "in", tmp_path / "out"),
             "--set", "ray.progress_seconds=0.01", "--set", "ray.block_rows=4"],
            cwd=REPO, capture_output=True, text=True, timeout=240, env=env,
            stdin=subprocess.DEVNULL,
        )  # fmt: skip
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    assert result.stdout.splitlines() == [result.stdout.splitlines()[-1]]
    assert result.stdout.startswith("scored 40 documents")
    assert committed_ids(tmp_path / "out") == ids
    lines = result.stderr.splitlines()
    assert lines and all(line.startswith("progress: ") for line in lines), lines
    assert lines[-1].startswith("progress: 40 of 40 documents (100%), ") and "ETA" in lines[-1]


def test_ctrl_c_and_sigterm_stop_a_run_in_one_line_and_the_rerun_resumes(tiny_llama_dir, tmp_path):
    """SIGINT (Ctrl-C, twice 0.3 s apart) and SIGTERM once a piece is committed: exit 130
    and 143, one line saying how many rows are committed and to re-run, no traceback, no C++
    stack; each re-run
    resumes from what was committed (every committed id once). The commits are cut by time
    (commit_seconds 0: every scored block) with commit_rows at its default of 4,096, more
    than the whole input: what was scored before the stop is kept."""
    ids = write_corpus(tmp_path / "in", documents=160, per_shard=20)
    output = tmp_path / "out"
    env = os.environ | {"MINKSCAN_CACHE": str(tmp_path / "cache")}
    command = [*score_command(tiny_llama_dir, tmp_path / "in", output),
               "--set", "data.commit_seconds=0", "--set", "ray.block_rows=10"]  # fmt: skip
    committed: list[list[str]] = []
    for stop, code in ((signal.SIGINT, 130), (signal.SIGTERM, 143)):
        before = len(committed[-1]) if committed else 0
        job = subprocess.Popen(command, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, env=env, preexec_fn=ctrl_c_as_in_a_terminal)  # fmt: skip
        deadline = time.monotonic() + 120
        while not has_complete_piece(output) or len(committed_ids(output)) <= before:
            assert job.poll() is None and time.monotonic() < deadline, job.stderr.read()[-3000:]
            time.sleep(0.05)
        job.send_signal(stop)
        if stop == signal.SIGINT:  # an impatient second Ctrl-C, while the run shuts down
            time.sleep(0.3)
            job.send_signal(stop)
        stdout, stderr = job.communicate(timeout=120)
        lines = stderr.splitlines()
        rows = sum(part.rows for part in ScoreOutput(pafs.LocalFileSystem(), str(output)).parts())
        assert job.returncode == code, stderr[-3000:]
        assert lines[-1] == (f"minkscan score: interrupted: {rows:,} rows committed; re-run the "
                             "same command to resume")  # fmt: skip
        assert "Traceback" not in stderr and "SIGTERM received" not in stderr
        assert "(raylet)" not in stdout + stderr  # nothing of Ray's shutdown
        assert not (output / "_lease.json").exists()  # the writer lease is released
        committed.append(committed_ids(output))
        assert len(set(committed[-1])) == len(committed[-1]) and set(committed[-1]) <= set(ids)
    assert set(committed[0]) < set(committed[1])  # the second run went on from the first


# Imported by every Python process of the run (PYTHONPATH): once ``armed`` exists, the next
# score file written under the output's _tmp/ announces itself (``writing``) and never ends,
# so the run is stopped with a commit half written.
COMMIT_GATE = """
import os, pathlib, time
import pyarrow.parquet as pq

_gate = pathlib.Path(os.environ["COMMIT_GATE"])
_write_table = pq.write_table

def write_table(table, where, *args, **kwargs):
    if "/_tmp/" in str(where) and (_gate / "armed").exists():
        _write_table(table.slice(0, 1), where, *args, **kwargs)  # a part of it on disk
        (_gate / "writing").touch()
        while True:
            time.sleep(1)
    return _write_table(table, where, *args, **kwargs)

pq.write_table = write_table
"""


def test_sigterm_while_a_commit_is_written_keeps_only_whole_files_and_the_rerun_completes(
    tiny_llama_dir, tmp_path
):
    """SIGTERM reaches the driver while the commit actor is inside a score file's write:
    exit 143 with the one line; the file half written never becomes a part, every committed
    id is there once, and the re-run scores the rest and clears the half-written file."""
    ids = write_corpus(tmp_path / "in", documents=60, per_shard=20)
    output, gate = tmp_path / "out", tmp_path / "gate"
    gate.mkdir()
    (tmp_path / "hooks").mkdir()
    (tmp_path / "hooks" / "sitecustomize.py").write_text(COMMIT_GATE)
    env = os.environ | {"COMMIT_GATE": str(gate), "PYTHONPATH": str(tmp_path / "hooks")}
    command = [*score_command(tiny_llama_dir, tmp_path / "in", output),
               "--set", "data.commit_seconds=0", "--set", "ray.block_rows=10"]  # fmt: skip
    job = subprocess.Popen(command, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True, env=env)  # fmt: skip
    deadline = time.monotonic() + 180  # a hang guard, not a wait for progress
    while not has_complete_piece(output):
        assert job.poll() is None and time.monotonic() < deadline, job.stderr.read()[-3000:]
        time.sleep(0.05)
    (gate / "armed").touch()
    while not (gate / "writing").exists():
        assert job.poll() is None and time.monotonic() < deadline, job.stderr.read()[-3000:]
        time.sleep(0.05)
    job.send_signal(signal.SIGTERM)
    _, stderr = job.communicate(timeout=120)
    assert job.returncode == 143, stderr[-3000:]
    kept = committed_ids(output)
    rows = sum(part.rows for part in ScoreOutput(pafs.LocalFileSystem(), str(output)).parts())
    assert stderr.splitlines()[-1] == (f"minkscan score: interrupted: {rows:,} rows committed; "
                                       "re-run the same command to resume")  # fmt: skip
    assert len(kept) == len(set(kept)) == rows and set(kept) < set(ids)
    assert list((output / "_tmp").iterdir())  # the half-written file, never renamed
    rerun = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert committed_ids(output) == ids  # every id once
    assert not (output / "_tmp").exists() or not list((output / "_tmp").iterdir())
