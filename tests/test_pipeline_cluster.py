"""The pipeline beyond one in-process Ray: a crashed `minkscan score` resumed, a Ray job
submitted to a head on loopback, and actors spread over a two-node cluster."""

from __future__ import annotations

import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import polars as pl
import psutil
import pyarrow.fs as pafs
import pytest
import ray
from minkscan.config import build_config
from minkscan.distributed.runner import run_scoring
from minkscan.io.scores import ScoreOutput
from minkscan.models.loading import load_model
from minkscan.scorer import DocumentScorer
from ray.cluster_utils import Cluster

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
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


def score_command(model_dir: Path, inputs: Path, output: Path) -> list[str]:
    return [
        str(BIN / "minkscan"),
        "score",
        "--input",
        str(inputs),
        "--output",
        str(output),
        "--model",
        str(model_dir),
    ]


def committed_ids(output: Path) -> list[str]:
    """Ids of the complete pieces, as every reader of the output sees them."""
    return sorted(ScoreOutput(pafs.LocalFileSystem(), str(output)).read(["id"])["id"].to_pylist())


def has_complete_piece(output: Path) -> bool:
    return (
        output.is_dir()
        and ScoreOutput.completion(ScoreOutput(pafs.LocalFileSystem(), str(output)).parts())[0]
        != set()
    )


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_rerun_after_killing_the_job_midway_completes_each_id_exactly_once(
    tiny_llama_dir, tmp_path
):
    ids = write_corpus(tmp_path / "in", documents=600, per_shard=20)
    output = tmp_path / "out"
    # Batches of 10 rows and commits of 20: the run commits in many small steps, so the kill
    # lands between two of them rather than after one big final commit.
    command = [*score_command(tiny_llama_dir, tmp_path / "in", output),
               "--set", "data.commit_rows=20", "--set", "ray.block_rows=10"]  # fmt: skip
    log = tmp_path / "first-run.log"
    with log.open("w") as sink:
        job = subprocess.Popen(command, cwd=REPO, stdout=sink, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 120
    while not has_complete_piece(output):  # kill once some piece is committed
        assert job.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
        time.sleep(0.05)
    driver = psutil.Process(job.pid)
    for process in [driver, *driver.children(recursive=True)]:  # the embedded Ray too
        process.kill()
    job.wait()
    partial = committed_ids(output)
    assert 0 < len(partial) < len(ids), "the kill did not land midway"
    committed_rows = sum(
        part.rows for part in ScoreOutput(pafs.LocalFileSystem(), str(output)).parts()
    )

    rerun = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=180)

    assert rerun.returncode == 0, rerun.stderr[-2000:]
    assert f"already done: {len(partial)}" in rerun.stdout
    # Strictly less than the whole corpus: complete pieces and committed rows are not redone.
    assert f"scored {len(ids) - committed_rows} documents" in rerun.stdout
    assert committed_ids(output) == ids
    # The same scores as a clean run: the in-process scorer on the same texts.
    final = pl.from_arrow(ScoreOutput(pafs.LocalFileSystem(), str(output)).read()).sort("id")
    config = build_config({}, {"model.name": str(tiny_llama_dir), "model.device": "cpu"})
    expected = DocumentScorer(load_model(config.model), config.scoring).score_frame(
        [f"Document {i} says the quick brown fox jumps over the lazy dog." for i in ids]
    )
    for column in ("loss", "minkpp_k20"):
        assert final[column].to_list() == pytest.approx(expected[column].to_list(), abs=1e-4)


def test_ray_job_submit_runs_the_score_job_on_a_loopback_head(tiny_llama_dir, tmp_path):
    ids = write_corpus(tmp_path / "in", documents=20, per_shard=10)
    dashboard = free_port()
    # The head and the client share a token (Ray's token authentication is on by default);
    # the job's `python` is this virtualenv's.
    env = os.environ | {
        "RAY_AUTH_MODE": "token",
        "RAY_AUTH_TOKEN": secrets.token_hex(32),
        "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}",
    }
    head = subprocess.Popen(
        [
            str(BIN / "ray"),
            "start",
            "--head",
            "--block",
            "--node-ip-address=127.0.0.1",
            f"--port={free_port()}",
            f"--dashboard-port={dashboard}",
            "--include-dashboard=true",
            "--dashboard-host=127.0.0.1",
            "--num-cpus=3",
        ],
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
    )
    try:
        submit = [
            str(BIN / "ray"),
            "job",
            "submit",
            "--address",
            f"http://127.0.0.1:{dashboard}",
            "--working-dir",
            str(REPO),
            "--",
            "python",
            "jobs/score.py",
            "--input",
            str(tmp_path / "in"),
            "--output",
            str(tmp_path / "out"),
            "--model",
            str(tiny_llama_dir),
        ]
        deadline = time.monotonic() + 90
        while True:
            result = subprocess.run(submit, capture_output=True, text=True, timeout=240, env=env)
            # The head answers "Failed to connect" while its dashboard starts and "No available
            # agent" while its job agent does (seen under CPU load): wait for both.
            starting = any(
                text in result.stderr for text in ("Failed to connect", "No available agent")
            )
            if not starting or time.monotonic() > deadline:
                break
            time.sleep(2)  # the dashboard's job API is still starting
        assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
        assert "scored 20 documents" in result.stdout
        assert committed_ids(tmp_path / "out") == ids
    finally:
        os.killpg(head.pid, signal.SIGTERM)
        head.wait(timeout=60)


def test_two_node_cluster_runs_scoring_actors_on_both_nodes(tiny_llama_dir, tmp_path):
    ids = write_corpus(tmp_path / "in", documents=60, per_shard=10)
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
    starve the pipeline), and output that is not a terminal gets no Ray Data progress blocks
    or deprecation warnings, only minkscan's own progress lines."""
    ids = write_corpus(tmp_path / "in", documents=40, per_shard=10)
    env = os.environ | {"RAY_AUTH_MODE": "disabled"}
    start = [str(BIN / "ray"), "start", "--head", "--num-cpus=1", f"--port={free_port()}",
             "--include-dashboard=false"]  # fmt: skip
    subprocess.run(start, check=True, capture_output=True, env=env, timeout=120)
    try:
        result = subprocess.run(
            [*score_command(tiny_llama_dir, tmp_path / "in", tmp_path / "out"),
             "--set", "ray.progress_seconds=0.5"],
            cwd=REPO, capture_output=True, text=True, timeout=240, env=env,
            stdin=subprocess.DEVNULL,
        )  # fmt: skip
    finally:
        subprocess.run([str(BIN / "ray"), "stop", "--force"], capture_output=True, env=env)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-3000:]
    assert "scored 40 documents" in result.stdout
    assert committed_ids(tmp_path / "out") == ids
    for noise in ("Running Dataset", "logging_progress", "Starting execution", "deprecated"):
        assert noise not in output, noise
    progress = [line for line in output.splitlines() if "progress: " in line]
    assert 1 <= len(progress) <= 40, progress
