"""`run_scoring` / `minkscan score` on an embedded Ray with the tiny Llama: outputs, ids,
bad rows and shards, config errors, resume and actor faults."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
from pathlib import Path

import polars as pl
import pyarrow as pa
import pyarrow.fs as pafs
import pytest
import ray
from minkscan.cli import main
from minkscan.config import ConfigError, ScanConfig, build_config
from minkscan.distributed import plan, session
from minkscan.distributed.pipeline import Destination, score_stages
from minkscan.distributed.runner import run_scoring
from minkscan.distributed.spec import StageSpec
from minkscan.distributed.stages import ScoreStage
from minkscan.io.inputs import ShardError
from minkscan.io.score_reader import read_output
from minkscan.io.scores import ScoreOutput
from minkscan.models.loading import load_model
from minkscan.scorer import DocumentScorer

TEXTS = [
    "The quick brown fox jumps over the lazy dog.",
    "Ray Data streams Parquet shards through pools of model actors.",
    "",
    "A",
    "Numbers like 12345 and symbols like %, $ and # appear in real documents too.",
    None,
]


pytestmark = pytest.mark.usefixtures("local_ray")


def make_config(model_dir: Path, inputs: list[str], output: Path, **overrides) -> ScanConfig:
    base = {
        "model.name": str(model_dir),
        "model.device": "cpu",
        "scoring.k_percentages": [20, 50],
        "data.input": inputs,
        "data.output": str(output),
        "ray.cpus_per_actor": 1.0,
        "ray.block_rows": 4,
        "data.check_ids": False,
    }
    return build_config({}, base | overrides)


def read_scores(output: Path) -> pl.DataFrame:
    """The output as every user-facing command reads it."""
    return pl.from_arrow(read_output(ScoreOutput(pafs.LocalFileSystem(), str(output)))).sort("id")


def write_shards(directory: Path, texts: list, per_shard: int, with_ids: bool = True) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    for start in range(0, len(texts), per_shard):
        chunk = texts[start : start + per_shard]
        frame = pl.DataFrame({"text": chunk}, schema={"text": pl.Utf8})
        if with_ids:
            ids = [f"doc-{i:05d}" for i in range(start, start + len(chunk))]
            frame = frame.with_columns(pl.Series("id", ids))
        frame.write_parquet(directory / f"shard-{start // per_shard:03d}.parquet")


def test_every_row_scored_once_with_in_process_scores_and_statuses(tiny_llama_dir, tmp_path):
    write_shards(tmp_path / "in", TEXTS, per_shard=4)
    config = make_config(tiny_llama_dir, [str(tmp_path / "in")], tmp_path / "out")
    summary = run_scoring(config)

    scores = read_scores(tmp_path / "out")
    scorer = DocumentScorer(load_model(config.model), config.scoring)
    expected = scorer.score_frame(TEXTS).with_columns(
        pl.Series("id", [f"doc-{i:05d}" for i in range(len(TEXTS))])
    )
    assert scores["id"].to_list() == expected["id"].to_list()
    assert scores.columns == ["id", "source", "row", "n_tokens", "status", *scorer.columns]
    assert scores["status"].to_list() == expected["status"].to_list()
    assert scores["status"].to_list().count("empty") == 2
    for column in scorer.columns:
        got, want = scores[column].to_list(), expected[column].to_list()
        assert [g is None for g in got] == [w is None for w in want]
        assert all(g is None or abs(g - w) < 1e-4 for g, w in zip(got, want, strict=True))
    assert summary.documents == len(TEXTS)
    assert summary.tokens == sum(expected["n_tokens"].to_list())
    manifest = json.loads(Path(summary.manifest).read_text())
    assert manifest["summary"]["documents"] == len(TEXTS)
    assert manifest["config"]["model"]["name"] == str(tiny_llama_dir)


@pytest.mark.slow
def test_a_single_shard_is_cut_into_blocks_that_several_scoring_actors_share(
    tiny_llama_dir, tmp_path
):
    texts = [
        f"Document number {i} has a few words of its own, {'and more ' * (i % 7)}."
        for i in range(48)
    ]
    write_shards(tmp_path / "in", texts, per_shard=len(texts))
    config = make_config(
        tiny_llama_dir,
        [str(tmp_path / "in")],
        tmp_path / "out",
        **{
            "ray.num_actors": 2,
            "ray.cpus_per_actor": 0.5,
            "ray.block_bytes": 1024,
            "data.commit_rows": 4,
        },
    )
    summary = run_scoring(config)

    assert summary.documents == len(texts)
    assert sorted(read_scores(tmp_path / "out")["id"].to_list()) == [
        f"doc-{i:05d}" for i in range(len(texts))
    ]
    # Several commits of one input piece, though the input is one file.
    assert len(list((tmp_path / "out").glob("part-*.parquet"))) > 2
    assert ray.data.DataContext.get_current().target_max_block_size != 1024


def test_ids_are_derived_from_file_and_row_when_the_input_has_none(tiny_llama_dir, tmp_path):
    write_shards(tmp_path / "in", TEXTS[:5], per_shard=3, with_ids=False)
    run_scoring(make_config(tiny_llama_dir, [str(tmp_path / "in" / "*.parquet")], tmp_path / "o"))

    ids = read_scores(tmp_path / "o")["id"].to_list()
    # Relative to the input root (the glob's directory): moving the data keeps every id.
    assert ids == [f"shard-000.parquet:{row}" for row in range(3)] + [
        f"shard-001.parquet:{row}" for row in range(2)
    ]


@pytest.mark.slow
def test_rerun_scores_only_pieces_missing_from_the_output(tiny_llama_dir, tmp_path):
    write_shards(tmp_path / "in", TEXTS, per_shard=3)
    first = tmp_path / "in" / "shard-000.parquet"
    run_scoring(make_config(tiny_llama_dir, [str(first)], tmp_path / "out"))

    summary = run_scoring(make_config(tiny_llama_dir, [str(tmp_path / "in")], tmp_path / "out"))

    assert summary.resumed_documents == 3 and summary.documents == len(TEXTS) - 3
    ids = read_scores(tmp_path / "out")["id"].to_list()
    assert ids == [f"doc-{i:05d}" for i in range(len(TEXTS))]


def test_unreadable_shard_fails_with_its_path_or_is_skipped_and_listed(tiny_llama_dir, tmp_path):
    write_shards(tmp_path / "in", TEXTS[:2], per_shard=2)
    bad = tmp_path / "in" / "shard-bad.parquet"
    bad.write_bytes(b"not parquet at all")
    with pytest.raises(ShardError, match="shard-bad.parquet"):
        run_scoring(make_config(tiny_llama_dir, [str(tmp_path / "in")], tmp_path / "out"))

    config = make_config(
        tiny_llama_dir, [str(tmp_path / "in")], tmp_path / "out", **{"data.skip_bad_shards": True}
    )
    summary = run_scoring(config)
    assert list(summary.skipped_shards) == [str(bad.resolve())]
    assert read_scores(tmp_path / "out")["id"].to_list() == ["doc-00000", "doc-00001"]


def test_bad_config_fails_before_any_work_and_names_the_key(tmp_path, capsys):
    config = tmp_path / "bad.yaml"
    config.write_text("ray:\n  num_actors: 1\n  gpu_per_actor: 1\n")
    code = main(["score", "--config", str(config), "--input", "x", "--output", str(tmp_path)])
    assert code == 2
    assert "ray.gpu_per_actor" in capsys.readouterr().err
    config.write_text("scoring:\n  k_percentages: [0, 50]\n")
    assert main(["score", "--config", str(config), "--input", "x", "--output", "y"]) == 2
    assert "scoring.k_percentages" in capsys.readouterr().err
    assert not list(tmp_path.glob("*.parquet"))


@pytest.mark.slow
def test_killed_scoring_actor_is_replaced_and_its_batches_retried(
    tiny_llama_dir, tmp_path, monkeypatch
):
    killed_pid, scored_by = tmp_path / "killed.pid", tmp_path / "scored-by.log"
    kill_at_batch = 4  # of 2 rows each: the actor has returned some batches when it dies

    class ScoreStageKilledOnce(ScoreStage):
        """The real ScoreStage, except that the first actor process to reach its
        ``kill_at_batch``-th batch SIGKILLs itself after scoring it and before returning it,
        so that batch's result is lost mid-job. Defined here so cloudpickle ships it to the
        actor by value; the pid log records which process returned each batch."""

        def __init__(self, **kwargs) -> None:
            super().__init__(**kwargs)
            self.batches = 0

        def __call__(self, batch: pa.Table) -> pa.Table:
            scored = super().__call__(batch)
            self.batches += 1
            if self.batches == kill_at_batch:
                try:
                    marker = os.open(killed_pid, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
                except FileExistsError:
                    pass  # a replacement: the one death has happened
                else:
                    os.write(marker, str(os.getpid()).encode())
                    os.close(marker)
                    os.kill(os.getpid(), signal.SIGKILL)
            with scored_by.open("a") as log:
                log.write(f"{os.getpid()}\n")
            return scored

    def with_killed_once(config: ScanConfig, where: Destination) -> list[StageSpec]:
        return [
            dataclasses.replace(spec, fn=ScoreStageKilledOnce) if spec.name == "score" else spec
            for spec in score_stages(config, where)
        ]

    monkeypatch.setattr(plan, "score_stages", with_killed_once)
    texts = [f"Document {i}: " + TEXTS[i % 2] * (1 + i % 5) for i in range(120)]
    write_shards(tmp_path / "in", texts, per_shard=20)
    config = make_config(
        tiny_llama_dir, [str(tmp_path / "in")], tmp_path / "out", **{"ray.block_rows": 2}
    )

    summary = run_scoring(config)

    assert killed_pid.exists(), "no scoring actor was killed"
    pids = [int(line) for line in scored_by.read_text().split()]
    assert pids[: kill_at_batch - 1] == [int(killed_pid.read_text())] * (kill_at_batch - 1)
    assert len(set(pids[kill_at_batch - 1 :])) == 1, "not one new process scored after the kill"
    assert summary.documents == len(texts)
    ids = read_scores(tmp_path / "out")["id"].to_list()
    assert ids == [f"doc-{i:05d}" for i in range(len(texts))]


@pytest.mark.slow
def test_minkscan_score_reads_and_writes_s3(tiny_llama_dir, tmp_path, s3_server, capsys):
    endpoint, client = s3_server
    write_shards(tmp_path / "in", TEXTS[:4], per_shard=2, with_ids=False)
    for shard in sorted((tmp_path / "in").iterdir()):
        client.upload_file(str(shard), "corpus", f"raw/{shard.name}")
    config = tmp_path / "s3.yaml"
    config.write_text(
        f"model: {{name: '{tiny_llama_dir}', device: cpu}}\n"
        "scoring: {k_percentages: [20]}\n"
        f"data:\n  s3: {{endpoint_url: '{endpoint}', region: us-east-1,"
        " access_key_id: testing, secret_access_key: testing}\n"
        "ray: {cpus_per_actor: 1.0}\n"
    )
    code = main(
        [
            "score",
            "--config",
            str(config),
            "--input",
            "s3://corpus/raw/*.parquet",
            "--output",
            "s3://corpus/scores/run1",
        ]
    )
    assert code == 0, capsys.readouterr().err
    assert "scored 4 documents" in capsys.readouterr().out

    keys = [o["Key"] for o in client.list_objects_v2(Bucket="corpus")["Contents"]]
    shards = [k for k in keys if k.startswith("scores/run1/part-") and k.endswith(".parquet")]
    assert "scores/run1/_manifest.json" in keys and shards
    frames = []
    for key in shards:
        client.download_file("corpus", key, str(tmp_path / "score.parquet"))
        frames.append(pl.read_parquet(tmp_path / "score.parquet"))
    ids = sorted(pl.concat(frames)["id"].to_list())
    assert ids == [
        "shard-000.parquet:0",
        "shard-000.parquet:1",
        "shard-001.parquet:0",
        "shard-001.parquet:1",
    ]
    manifest = client.get_object(Bucket="corpus", Key="scores/run1/_manifest.json")
    assert json.loads(manifest["Body"].read())["config"]["data"]["s3"]["secret_access_key"] == "***"


def warn_if_too_small(config) -> None:
    """The capacity check of a run of ``config``'s stages."""
    where = Destination(pafs.LocalFileSystem(), "/nowhere", has_ids=False)
    session.warn_if_too_small(config, score_stages(config, where))


def test_a_cluster_smaller_than_the_run_gets_a_warning_before_work(
    tiny_llama_dir, tmp_path, caplog
):
    """Actors holding every CPU leave none for the read tasks: the run would wait, so it says
    so (a cluster may still be growing, so it is a warning, not an error)."""
    big = make_config(tiny_llama_dir, [], tmp_path / "out", **{"ray.cpus_per_actor": 8.0})
    with caplog.at_level("WARNING", logger="minkscan.distributed.session"):
        warn_if_too_small(make_config(tiny_llama_dir, [], tmp_path / "out"))
        assert not caplog.records
        warn_if_too_small(big)
    have = ray.cluster_resources()["CPU"]
    assert f"the Ray cluster has {have:g} CPUs but this run needs at least 9.5" in caplog.text


def test_too_few_gpus_is_an_error_before_work_on_the_local_ray_and_a_warning_on_a_cluster(
    tiny_llama_dir, tmp_path, caplog, monkeypatch
):
    """Actors asking for GPUs that no node has would wait forever: the embedded Ray has only
    this machine's (none here), so that is a one-line error; a cluster may still add GPU
    nodes, so there it is a warning."""
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    gpus = {"ray.gpus_per_actor": 2}
    local = make_config(tiny_llama_dir, [], tmp_path / "out", **gpus)
    with pytest.raises(ConfigError, match=r"needs 2 GPUs .* the Ray cluster has 0"):
        warn_if_too_small(local)
    cluster = make_config(tiny_llama_dir, [], tmp_path / "out", **gpus, **{"ray.address": "auto"})
    with caplog.at_level("WARNING", logger="minkscan.distributed.session"):
        warn_if_too_small(cluster)
    assert "it waits for GPU nodes" in caplog.text


def test_ctrl_c_after_the_last_commit_still_says_how_many_rows_are_kept(
    tiny_llama_dir, tmp_path, monkeypatch, capsys
):
    """An interrupt that lands after the pipeline (while the manifest is written) is the
    same one line as one inside it, with the committed rows counted, and exit 130."""
    from minkscan.distributed import runner

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    write_shards(tmp_path / "in", TEXTS, per_shard=4)
    monkeypatch.setattr(runner, "write_manifest", interrupted)
    command = ["score", "--input", str(tmp_path / "in"), "--output", str(tmp_path / "out"),
               "--model", str(tiny_llama_dir), "--set", "data.check_ids=false"]  # fmt: skip
    assert main(command) == 130
    assert capsys.readouterr().err.splitlines()[-1] == (
        f"minkscan score: interrupted: {len(TEXTS)} rows committed; re-run the same command "
        "to resume"
    )
