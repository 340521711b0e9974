"""README's examples run as written, in order, in a scratch directory: every shell command of
its code blocks (`minkscan` in this process, through `minkscan.cli.main`; `ray job submit`
against a head on loopback, token included; `s3://` against moto), its Python block, and its
YAML block validated as a config. The data the examples name (corpus/, testsets/, ...) is
made there from the bundled sample; the bundled SmolLM2 scores it."""

from __future__ import annotations

import os
import re
import secrets
import shlex
from pathlib import Path

import polars as pl
import pytest
import yaml
from helpers import BIN, REPO, SAMPLE, ray_head, submit_job
from minkscan.cli import main
from minkscan.config import build_config

pytestmark = pytest.mark.slow
README = REPO / "README.md"
# Commands the README shows that this test does not run, and why.
NOT_RUN = {
    "bash .ci/setup": "it is what CI runs before this test",
    ".venv/bin/python -m pytest": "it is this very suite",
    "pip install": "the install recipe is .ci/wheel-smoke's test",
}
# Documented exit codes other than 0: a gate may fail on the sample's data.
MAY_FAIL = ("--fail-above",)


def examples(text: str) -> list[tuple[str, str]]:
    """(kind, code) of every example in order: 'shell' for a command (continuation lines
    joined), 'python' and 'yaml' for fenced blocks of those."""
    found: list[tuple[str, str]] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        fence = re.match(r"^```(\w+)", line)
        if fence:
            end = lines.index("```", i + 1)
            body = lines[i + 1 : end]
            if fence.group(1) == "bash":
                found += [("shell", c) for c in _commands(body)]
            else:
                found.append((fence.group(1), "\n".join(body)))
            i = end + 1
            continue
        if line.startswith("    ") and (i == 0 or not lines[i - 1].strip()):
            block = []
            while i < len(lines) and (lines[i].startswith("    ") or not lines[i].strip()):
                block.append(lines[i][4:])
                i += 1
            found += [("shell", c) for c in _commands(block)]
            continue
        i += 1
    return found


def _commands(lines: list[str]) -> list[str]:
    joined, current = [], ""
    for line in lines:
        line = line.rstrip()
        if current:
            current += " " + line.strip()
        elif line.strip() and not line.lstrip().startswith("#"):
            current = line.strip()
        if current and not current.endswith("\\"):
            joined.append(re.sub(r"\s+#\s.*$", "", current))
            current = ""
        elif current:
            current = current[:-1].rstrip()
    return joined


@pytest.fixture
def scratch(tmp_path, monkeypatch, s3_env):
    """A scratch directory holding what the examples name, the repository's pipeline/ in it
    (the quick start and the benchmark read the bundled sample by that path) and nothing
    beside it, as in a user's clone; and S3 (moto)."""
    _, client = s3_env
    sample = pl.read_parquet(SAMPLE)
    work = tmp_path / "work"
    for directory in ("corpus", "testsets", "data/shards", "audit", "fresh"):
        (work / directory).mkdir(parents=True)
    (work / "pipeline").symlink_to(REPO / "pipeline")
    # Few rows each (SmolLM2 scores ~200 tokens/s on two cores): the examples are run for
    # what they do, not for how many rows.
    halves = [sample.slice(0, 8), sample.slice(8, 8)]
    for index, part in enumerate(halves):
        part.write_parquet(work / "corpus" / f"part-{index}.parquet")
        part.with_columns(pl.lit(f"wiki-{index}").alias("dataset")).write_parquet(
            work / "testsets" / f"set-{index}.parquet"
        )
    for index in range(4):
        sample.slice(4 * index, 4).write_parquet(work / "data" / "shards" / f"{index}.parquet")
        path = work / f"shard-{index}.parquet"
        sample.slice(4 * index, 4).write_parquet(path)
        client.upload_file(str(path), "corpus", f"shards/{index}.parquet")
        path.unlink()
    # Known non-members and members for the ReCaLL examples: texts separated by blank lines.
    (work / "known-nonmembers.txt").write_text("\n\n".join(sample["text"].tail(3).to_list()))
    (work / "known-members.txt").write_text("\n\n".join(sample["text"].head(3).to_list()))
    labelled = sample.head(32).with_columns((pl.int_range(pl.len()) % 2).alias("label"))
    labelled.write_parquet(work / "audit" / "calibration.parquet")
    labelled.select("id", "label").write_parquet(work / "labels.parquet")
    sample.head(16).with_columns(pl.col("text").str.to_uppercase()).write_parquet(
        work / "fresh" / "fresh.parquet"
    )
    # A benchmark of question/answer examples for the order test, and a held-out split.
    sample.head(8).select(
        pl.col("text").str.slice(0, 60).alias("question"),
        pl.col("text").str.slice(60, 60).alias("answer"),
    ).write_ndjson(work / "audit" / "benchmark.jsonl")
    sample.slice(16, 8).write_parquet(work / "audit" / "heldout.parquet")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.chdir(work)
    return work


@pytest.fixture
def head():
    """A Ray head on loopback with token authentication; its jobs see moto through the env."""
    token = secrets.token_hex(32)
    env = os.environ | {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": token,
                        "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"}  # fmt: skip
    with ray_head(env, dashboard=True, num_cpus=3) as address:
        yield address, token


def run_shell(command: str, env: dict[str, str], head: tuple[str, str]) -> tuple[int, str]:
    """Run one README command; returns its exit code and what it printed."""
    if command.startswith("export "):
        command = command.replace("<the token the head was started with>", head[1])
        for assignment in shlex.split(command)[1:]:
            name, _, value = assignment.partition("=")
            env[name] = value
        return 0, ""
    if command.startswith("ray job submit"):
        command = command.replace("http://HEAD:8265", f"http://{head[0]}")
        return _submit(command, env)
    words = shlex.split(command)
    program = Path(words[0]).name
    assert program == "minkscan", f"README command not understood by this test: {command}"
    try:
        return main(words[1:]), ""
    except SystemExit as exit_:  # --version, --help
        return int(exit_.code or 0), ""


def _submit(command: str, env: dict[str, str]) -> tuple[int, str]:
    """`ray job submit` from the repository, the --working-dir the README means."""
    environment = os.environ | env | {"PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"}
    result = submit_job(shlex.split(command), environment, REPO)
    return result.returncode, result.stdout + result.stderr


@pytest.fixture
def ray_seeing_s3(scratch):
    """An embedded Ray started after the S3 variables are set, so its workers read moto as a
    user's would read their S3 (the session's Ray started before them)."""
    import ray

    if ray.is_initialized():
        ray.shutdown()
    ray.init(address="local", num_cpus=5, include_dashboard=False, log_to_driver=False)


@pytest.mark.usefixtures("ray_seeing_s3")
def test_every_readme_example_runs_as_written(scratch, head, capsys):
    found = examples(README.read_text())
    assert sum(kind == "shell" for kind, _ in found) >= 20
    env: dict[str, str] = {}
    for kind, code in found:
        if kind == "yaml":
            build_config(yaml.safe_load(code))  # a config section: it must validate
            continue
        if kind == "python":
            exec(compile(code, "README.md", "exec"), {})
            continue
        for command in code.split(" && "):
            if any(command.startswith(prefix) for prefix in NOT_RUN):
                continue
            status, printed = run_shell(command, env, head)
            allowed = (0, 1, 3) if any(flag in command for flag in MAY_FAIL) else (0,)
            assert status in allowed, f"{command}\n{printed}{capsys.readouterr().err[-3000:]}"
            if command.startswith("ray job submit"):
                assert "scored 16 documents" in printed, printed[-3000:]
    assert (scratch / "out" / "report" / "report.html").is_file()
