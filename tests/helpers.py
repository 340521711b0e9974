"""Helpers several test modules share: running `minkscan score` as a user would, reading
what it wrote, and breaking input files the ways real corpora break."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import polars as pl
import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
from minkscan.cli import main
from minkscan.io.score_reader import read_output
from minkscan.io.scores import ScoreOutput

REPO = Path(__file__).resolve().parents[1]
# The virtualenv's bin/: its `ray` and `minkscan`, and the `python` a local Ray job runs.
BIN = Path(sys.executable).parent


def shared_data_dir() -> Path:
    """The shared benchmark data: $MINKSCAN_SHARED_DATA, else ../shared/data beside the repo,
    else /work/shared/data (CI may clone the repo somewhere else)."""
    candidates = [REPO.parent / "shared" / "data", Path("/work/shared/data")]
    if "MINKSCAN_SHARED_DATA" in os.environ:
        candidates.insert(0, Path(os.environ["MINKSCAN_SHARED_DATA"]))
    return next((path for path in candidates if path.is_dir()), candidates[0])


SHARED_DATA = shared_data_dir()
WIKIMIA32 = SHARED_DATA / "wikimia24" / "length32.parquet"
WIKIMIA64 = SHARED_DATA / "wikimia24" / "length64.parquet"
# The first 64 rows of length32.parquet (id, text), shipped with the package.
SAMPLE = REPO / "pipeline" / "minkscan" / "data" / "sample.parquet"


def score(model_dir: Path, inputs: Path | str | list, output: Path, *extra: str) -> int:
    """`minkscan score` in this process (id counting off unless ``extra`` turns it on)."""
    specs = [str(i) for i in inputs] if isinstance(inputs, list) else [str(inputs)]
    return main(
        ["score", "--input", *specs, "--output", str(output), "--model", str(model_dir),
         "--set", "data.check_ids=false", *extra]
    )  # fmt: skip


def score_command(model_dir: Path, inputs: Path, output: Path, *extra: str) -> list[str]:
    """The `minkscan score` command line a user would type."""
    return [str(BIN / "minkscan"), "score", "--input", str(inputs), "--output", str(output),
            "--model", str(model_dir), *extra]  # fmt: skip


def score_process(
    model_dir: Path, inputs: Path, output: Path, *extra: str, env: dict | None = None
) -> subprocess.Popen:
    """`minkscan score` as its own process (stdout and stderr piped, text)."""
    return subprocess.Popen(
        score_command(model_dir, inputs, output, *extra),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip


def scores(output: Path) -> pl.DataFrame:
    """The rows of every complete piece of a score output, by id."""
    return pl.from_arrow(read_output(ScoreOutput(pafs.LocalFileSystem(), str(output)))).sort("id")


def corrupt_pages(path: Path, row_group: int = 0) -> None:
    """Overwrite the start of a Parquet row group's first data page, footer intact: only
    reading its rows fails."""
    raw = bytearray(path.read_bytes())
    start = pq.ParquetFile(path).metadata.row_group(row_group).column(0).data_page_offset
    raw[start : start + 32] = b"\xde\xad\xbe\xef" * 8
    path.write_bytes(bytes(raw))


def write_parquet(path: Path, **columns: list) -> Path:
    """A Parquet file of the given columns, uncompressed (so pages can be broken)."""
    pq.write_table(pa.table(columns), path, compression="none")
    return path


def free_port() -> int:
    """A TCP port free on loopback now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@contextlib.contextmanager
def ray_head(env: dict[str, str], *, dashboard: bool, num_cpus: int) -> Iterator[str]:
    """A `ray start --head` on loopback whose every port is free, so it can run beside the
    suite's own Ray (two agents on Ray's default ports fail as "No available agent").
    Yields the dashboard's address (dashboard=True) or the GCS address; ends the head and
    all it started with SIGKILL on exit (SIGTERM takes ~30 s)."""
    gcs, web = free_port(), free_port()
    command = [str(BIN / "ray"), "start", "--head", "--block", "--node-ip-address=127.0.0.1",
               f"--port={gcs}", f"--num-cpus={num_cpus}",
               f"--dashboard-agent-listen-port={free_port()}",
               f"--dashboard-agent-grpc-port={free_port()}",
               f"--runtime-env-agent-port={free_port()}",
               f"--metrics-export-port={free_port()}",
               f"--ray-client-server-port={free_port()}"]  # fmt: skip
    if dashboard:
        command += ["--include-dashboard=true", "--dashboard-host=127.0.0.1",
                    f"--dashboard-port={web}"]  # fmt: skip
    else:
        command.append("--include-dashboard=false")
    head = subprocess.Popen(command, start_new_session=True, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, env=env)  # fmt: skip
    try:
        yield f"127.0.0.1:{web if dashboard else gcs}"
    finally:
        os.killpg(head.pid, signal.SIGKILL)
        head.wait(timeout=60)


@contextlib.contextmanager
def moto_s3(log: Path) -> Iterator[str]:
    """moto's S3 server in a process of its own on a free loopback port (its request log in
    ``log``), so that neither this process's GIL nor pytest's captured streams slow or break
    it; yields its endpoint once it answers (a bound of two minutes only as a hang guard)."""
    import urllib.error
    import urllib.request

    port = free_port()
    endpoint = f"http://127.0.0.1:{port}"
    with log.open("ab") as sink:
        server = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1",
                                   "-p", str(port)], stdout=sink, stderr=sink)  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                urllib.request.urlopen(f"{endpoint}/moto-api/", timeout=5).close()
                break
            except (urllib.error.URLError, ConnectionError):
                assert server.poll() is None, f"moto's server exited: see {log}"
                assert time.monotonic() < deadline, "moto's server never answered"
                time.sleep(0.1)
        yield endpoint
    finally:
        server.kill()
        server.wait(timeout=60)


def submit_job(command: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess:
    """`ray job submit`, waiting out a head whose dashboard ("Failed to connect") or job
    agent ("No available agent") is still starting."""
    deadline = time.monotonic() + 120
    while True:
        result = subprocess.run(command, capture_output=True, text=True, timeout=300,
                                env=env, cwd=cwd)  # fmt: skip
        printed = result.stdout + result.stderr
        starting = any(text in printed for text in ("Failed to connect", "No available agent"))
        if not starting or time.monotonic() > deadline:
            return result
        time.sleep(2)
