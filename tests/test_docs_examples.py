"""The reference pages under docs/ build with MkDocs in strict mode (no broken link, no page
outside the nav), and their examples run as written, page by page in the nav's order, after
README's quick start, in a scratch directory holding the placeholders they name (corpus/,
testsets/, audit/, ...) made from the bundled sample: every shell command (`ray job submit`
against a head on loopback, token included; `s3://` against moto), every Python block, and
every YAML block validated as a config."""

from __future__ import annotations

import contextlib
import os
import secrets
import subprocess

import polars as pl
import pytest
import yaml
from doc_examples import examples, run_page
from helpers import BIN, REPO, SAMPLE, ray_head

DOCS = REPO / "docs"


def nav_pages() -> list[str]:
    """The pages of mkdocs.yml's nav, in order."""
    nav = yaml.safe_load((REPO / "mkdocs.yml").read_text())["nav"]
    return [next(iter(entry.values())) for entry in nav]


def test_the_docs_build_in_strict_mode_with_every_page_in_the_nav(tmp_path):
    assert sorted(nav_pages()) == sorted(p.name for p in DOCS.glob("*.md"))
    command = [str(BIN / "mkdocs"), "build", "--strict", "--site-dir", str(tmp_path / "site")]
    built = subprocess.run(command, cwd=REPO, capture_output=True, text=True)
    assert built.returncode == 0, built.stderr
    assert (tmp_path / "site" / "audits" / "index.html").is_file()


@pytest.fixture
def scratch(tmp_path, monkeypatch, s3_env):
    """A scratch directory holding the placeholders the pages name, the repository's
    pipeline/ in it (the pages read the bundled sample by that path) and nothing beside it,
    as in a user's clone; and S3 (moto)."""
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
    """A Ray head on loopback with token authentication, started when a page first needs it
    (so it is fresh, not idle through the pages before); its jobs see moto through the env."""
    with contextlib.ExitStack() as stack:
        started: list[tuple[str, str]] = []

        def start() -> tuple[str, str]:
            if not started:
                token = secrets.token_hex(32)
                env = os.environ | {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": token,
                                    "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"}  # fmt: skip
                address = stack.enter_context(ray_head(env, dashboard=True, num_cpus=3))
                started.append((address, token))
            return started[0]

        yield start


@pytest.fixture
def ray_seeing_s3(scratch):
    """An embedded Ray started after the S3 variables are set, so its workers read moto as a
    user's would read their S3 (the session's Ray started before them)."""
    import ray

    if ray.is_initialized():
        ray.shutdown()
    ray.init(address="local", num_cpus=5, include_dashboard=False, log_to_driver=False)


@pytest.mark.slow
@pytest.mark.usefixtures("ray_seeing_s3")
def test_every_docs_example_runs_as_written_after_the_quick_start(scratch, head):
    quick_start = "\n".join(
        f"```bash\n{code}\n```" for kind, code in examples((REPO / "README.md").read_text())[:1]
    )
    env: dict[str, str] = {}
    ran = run_page(quick_start, env, head)
    for page in nav_pages():
        ran += run_page((DOCS / page).read_text(), env, head)
    assert ran >= 20
    assert (scratch / "out" / "report" / "report.html").is_file()
