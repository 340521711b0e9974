"""Nightly scans score only new or changed shards (local disk and S3), then report and diff."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from minkscan.calibration import calibrate
from minkscan.cli import main
from minkscan.commands.nightly_scan import MANIFEST_NAME, nightly_scan, plan_changes
from minkscan.config import load_config

TEXTS = [f"Document number {i} talks about topic {i % 3} in a few plain words." for i in range(6)]


pytestmark = pytest.mark.usefixtures("local_ray")


@pytest.fixture(scope="module")
def calibration():
    rng = np.random.default_rng(0)
    columns = [
        "mean_logprob",
        "zlib",
        "mink_k20",
        "minkpp_k20",
        "minkpp_mu_k20",
        "minkpp_sigma_k20",
    ]
    return calibrate(pl.DataFrame({c: rng.normal(0, 1, 200) for c in columns}), n_resamples=20)


def shard(texts: list[str], start: int) -> pl.DataFrame:
    return pl.DataFrame({"id": [f"doc-{start + i}" for i in range(len(texts))], "text": texts})


def config_for(model_dir: Path, inputs: str, output: str, s3: dict | None = None):
    return load_config(
        None,
        {
            "model.name": str(model_dir),
            "model.device": "cpu",
            "scoring.k_percentages": [20],
            "data.input": [inputs],
            "data.output": output,
            "ray.block_rows": 4,
            **({f"data.s3.{k}": v for k, v in (s3 or {}).items()}),
        },
    )


def test_changes_are_new_changed_unchanged_moved_or_removed_by_fingerprint() -> None:
    changes = plan_changes(
        {"a": "1", "b": "2", "c": "3", "e2": "5"}, {"a": "1", "b": "0", "d": "4", "e": "5"}
    )
    assert (changes.new, changes.changed, changes.unchanged, changes.removed) == (
        ["c"], ["b"], ["a"], ["d"],
    )  # fmt: skip
    assert changes.moved == [("e", "e2")]


@pytest.mark.slow
def test_second_local_scan_scores_only_new_and_changed_shards_and_diffs(
    tiny_llama_dir: Path, tmp_path: Path, calibration, capsys
) -> None:
    inputs, output = tmp_path / "in", tmp_path / "scores"
    inputs.mkdir()
    shard(TEXTS[:2], 0).write_parquet(inputs / "a.parquet")
    shard(TEXTS[2:4], 2).write_parquet(inputs / "b.parquet")
    config = config_for(tiny_llama_dir, str(inputs), str(output))
    first = nightly_scan(config, calibration, tmp_path / "report1")
    assert len(first.changes.new) == 2

    shard([TEXTS[4]], 2).write_parquet(inputs / "b.parquet")  # b changes
    shard([TEXTS[5]], 5).write_parquet(inputs / "c.parquet")  # c is new
    (inputs / "old").mkdir()
    (inputs / "a.parquet").rename(inputs / "old" / "a.parquet")  # a moves
    capsys.readouterr()
    calibration.write(tmp_path / "cal.json")
    code = main(["nightly", "--input", str(inputs), "--output", str(output), "--model",
                 str(tiny_llama_dir), "--device", "cpu", "--k", "20", "--set",
                 "ray.block_rows=4", "--calibration", str(tmp_path / "cal.json"), "--report",
                 str(tmp_path / "report2")])  # fmt: skip
    assert code == 0
    printed = capsys.readouterr().out.splitlines()
    assert printed[0].startswith("scored 2 documents")  # the scan's scoring, as `score` says it
    assert printed[1].startswith("nightly scan: 1 new, 1 changed, 0 unchanged, 1 moved, 0 removed")
    assert "(minkpp_k20); distribution shift not checked" in printed[2]  # as `report` prints it
    assert sum(line.strip().startswith(("No evidence", "Evidence")) for line in printed) == 4
    assert any(line.strip().startswith("Blind baseline") for line in printed)  # as report
    manifest = json.loads((output / MANIFEST_NAME).read_text())
    runs = {Path(path).name: entry["run"] for path, entry in manifest["shards"].items()}
    assert runs == {"a.parquet": "run-0001", "b.parquet": "run-0002", "c.parquet": "run-0002"}
    rescored = pl.read_parquet(output / "runs" / "run-0002" / "part-*.parquet")["id"].sort()
    assert rescored.to_list() == ["doc-2", "doc-5"]  # a was not scored again
    assert manifest["shards"]["old/a.parquet"]["scored_as"] == "a.parquet"  # where its rows are

    report = json.loads((tmp_path / "report2" / "report.json").read_text())
    scored = {
        row["group"]: row["n_scored"]
        for row in report["results"]
        if row["method"] == "mean_logprob"
    }
    assert {Path(g).name: n for g, n in scored.items()} == {"a.parquet": 2, "b.parquet": 1,
                                                            "c.parquet": 1}  # fmt: skip
    diff = json.loads((tmp_path / "report2" / "diff.json").read_text())
    assert diff["previous_scan"] is not None
    rows = {(Path(r["group"]).name, r["method"]): r for r in diff["results"]}
    assert rows[("c.parquet", "mean_logprob")]["flagged_before"] is None
    assert (
        rows[("a.parquet", "mean_logprob")]["flagged_before"]
        == rows[("a.parquet", "mean_logprob")]["flagged_now"]
    )


@pytest.mark.slow
def test_scan_on_s3_detects_a_changed_object(
    tiny_llama_dir: Path, tmp_path: Path, calibration, s3_server
):
    endpoint, client = s3_server
    for name, frame in {"a": shard(TEXTS[:2], 0), "b": shard(TEXTS[2:3], 2)}.items():
        frame.write_parquet(tmp_path / f"{name}.parquet")
        client.upload_file(str(tmp_path / f"{name}.parquet"), "corpus", f"in/{name}.parquet")
    s3 = {"endpoint_url": endpoint, "region": "us-east-1",
          "access_key_id": "testing", "secret_access_key": "testing"}  # fmt: skip
    config = config_for(tiny_llama_dir, "s3://corpus/in/", "s3://corpus/scores", s3)
    assert len(nightly_scan(config, calibration, tmp_path / "r1").changes.new) == 2

    shard(TEXTS[3:5], 2).write_parquet(tmp_path / "b.parquet")
    client.upload_file(str(tmp_path / "b.parquet"), "corpus", "in/b.parquet")
    changes = nightly_scan(config, calibration, tmp_path / "r2").changes
    # Shards are named relative to the input root, so moving the bucket keeps the history.
    assert (changes.changed, changes.unchanged) == (["b.parquet"], ["a.parquet"])
    keys = [o["Key"] for o in client.list_objects_v2(Bucket="corpus")["Contents"]]
    assert f"scores/{MANIFEST_NAME}" in keys
    report = json.loads((tmp_path / "r2" / "report.json").read_text())
    scored = {r["group"]: r["n_scored"] for r in report["results"] if r["method"] == "mean_logprob"}
    assert scored == {"a.parquet": 2, "b.parquet": 2}


@pytest.mark.slow
def test_a_scan_killed_midway_is_recovered_by_the_next_whatever_changed(
    tiny_llama_dir: Path, tmp_path: Path, calibration, caplog
) -> None:
    """What a scan killed while scoring leaves: a run directory no manifest names, holding
    the scores of a shard that is then deleted, and another shard arrives. The next scan
    cannot resume it (it holds a shard no longer named), so it discards it with a warning
    and scores afresh (it used to fail every night until a person deleted it)."""
    from minkscan.distributed.runner import run_scoring

    inputs, output = tmp_path / "in", tmp_path / "scores"
    inputs.mkdir()
    shard(TEXTS[:2], 0).write_parquet(inputs / "a.parquet")
    config = config_for(tiny_llama_dir, str(inputs), str(output))
    nightly_scan(config, calibration, tmp_path / "report1")
    shard(TEXTS[2:4], 2).write_parquet(inputs / "b.parquet")  # the killed scan's new shard
    run_dir = str(output / "runs" / "run-0002")
    killed = config.data.model_copy(
        update={"input": [str(inputs / "b.parquet")], "input_root": str(inputs), "output": run_dir}
    )
    run_scoring(config.model_copy(update={"data": killed}))
    (inputs / "b.parquet").unlink()  # then b goes, and c comes
    shard([TEXTS[5]], 2).write_parquet(inputs / "c.parquet")
    result = nightly_scan(config, calibration, tmp_path / "report2")
    assert "discarding" in caplog.text and "left by an unfinished scan" in caplog.text
    assert result.changes.new == ["c.parquet"]
    rescored = pl.read_parquet(output / "runs" / "run-0002" / "part-*.parquet")["id"]
    assert rescored.to_list() == ["doc-2"]  # c, once; none of b


def _nightly(model_dir: Path, inputs: Path, output: Path, report: Path, cal: Path) -> list[str]:
    return ["nightly", "--input", str(inputs), "--output", str(output), "--model",
            str(model_dir), "--device", "cpu", "--k", "20", "--calibration", str(cal),
            "--report", str(report)]  # fmt: skip


@pytest.mark.parametrize(
    ("manifest", "message"),
    [
        (
            {"shards": {"gone.jsonl": {"sha256": "0" * 64, "run": "../../victim"}}, "results": []},
            "shard 'gone.jsonl' names run '../../victim', not a run directory of this output",
        ),
        (
            {"shards": {"gone.jsonl": {"sha256": "0" * 64, "run": "/tmp"}}, "results": []},
            "names run '/tmp'",
        ),
        ({"files": {}}, "has no 'shards' object and 'results' list"),
        ("not json {", "is not JSON"),
    ],
)
def test_a_manifest_minkscan_did_not_write_is_refused_before_anything_is_read_or_deleted(
    tiny_llama_dir: Path, tmp_path: Path, calibration, capsys, manifest, message
) -> None:
    """A manifest entry is data: a run it names is never followed outside the output."""
    inputs, output, victim = tmp_path / "in", tmp_path / "out" / "scores", tmp_path / "victim"
    inputs.mkdir()
    output.mkdir(parents=True)
    victim.mkdir()
    (victim / "precious.txt").write_text("keep me")
    shard(TEXTS[:2], 0).write_parquet(inputs / "a.parquet")
    text = manifest if isinstance(manifest, str) else json.dumps(manifest)
    (output / MANIFEST_NAME).write_text(text)
    calibration.write(tmp_path / "cal.json")
    capsys.readouterr()
    args = _nightly(tiny_llama_dir, inputs, output, tmp_path / "report", tmp_path / "cal.json")
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and "move it away" in err and len(err.splitlines()) == 1
    assert (victim / "precious.txt").read_text() == "keep me"
    assert not (output / "runs").exists() and not (tmp_path / "report").exists()


def test_a_stale_run_holding_files_minkscan_did_not_write_is_kept_with_a_warning(
    tiny_llama_dir: Path, tmp_path: Path, calibration, caplog
) -> None:
    inputs, output = tmp_path / "in", tmp_path / "scores"
    inputs.mkdir()
    shard(TEXTS[:2], 0).write_parquet(inputs / "a.parquet")
    stale = output / "runs" / "run-0007"
    stale.mkdir(parents=True)
    (stale / "notes.txt").write_text("a user's file")
    (output / MANIFEST_NAME).write_text(json.dumps(
        {"scans": 7, "shards": {"gone.parquet": {"sha256": "0" * 64, "run": "run-0007"}},
         "results": []}))  # fmt: skip
    config = config_for(tiny_llama_dir, str(inputs), str(output))
    result = nightly_scan(config, calibration, tmp_path / "report")
    assert result.changes.new == ["a.parquet"] and result.changes.removed == ["gone.parquet"]
    assert (stale / "notes.txt").read_text() == "a user's file"
    assert "keeping" in caplog.text and "files minkscan did not write" in caplog.text
    manifest = json.loads((output / MANIFEST_NAME).read_text())
    assert manifest["shards"]["a.parquet"]["run"] == "run-0008"


def test_an_output_inside_its_input_is_refused_before_any_work(
    tiny_llama_dir: Path, tmp_path: Path, calibration, capsys
) -> None:
    """`score` refuses it too: the scan's score files would be read back as shards."""
    inputs = tmp_path / "in"
    inputs.mkdir()
    shard(TEXTS[:2], 0).write_parquet(inputs / "a.parquet")
    calibration.write(tmp_path / "cal.json")
    capsys.readouterr()
    assert (
        main(_nightly(tiny_llama_dir, inputs, inputs, tmp_path / "r", tmp_path / "cal.json")) == 2
    )
    err = capsys.readouterr().err.strip()
    assert f"output {inputs} is inside the input {inputs}" in err and len(err.splitlines()) == 1
    assert sorted(p.name for p in inputs.iterdir()) == ["a.parquet"]
