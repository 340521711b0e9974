"""An output belongs to one run: one model and one set of score-changing settings, one
writer at a time, never read back as input, and no run
lost to one bad shard. Each case runs `minkscan score` as a user would and checks the rows
by id."""

from __future__ import annotations

import json
import shutil
import socket
import threading
import time

import polars as pl
import pytest
from helpers import corrupt_pages, score, score_process, scores, write_parquet
from minkscan.config import S3Config
from minkscan.io.lease import OutputBusy, WriterLease
from minkscan.io.scores import ScoreOutput
from minkscan.schema import LEASE

pytestmark = pytest.mark.usefixtures("local_ray")

TEXTS = [f"Document number {i} says something of its own." for i in range(6)]


def three_shards(directory):
    directory.mkdir()
    for shard in range(3):
        ids = [f"s{shard}-{i}" for i in range(2)]
        write_parquet(directory / f"{shard}.parquet", id=ids, text=TEXTS[2 * shard : 2 * shard + 2])
    return directory


@pytest.mark.slow
def test_resuming_with_another_model_is_refused_naming_it_and_the_output_is_untouched(
    tiny_llama_dir, tiny_gpt2_dir, tmp_path, capsys
):
    inputs = three_shards(tmp_path / "in")
    out = tmp_path / "out"
    assert score(tiny_llama_dir, inputs, out) == 0
    # What a run killed after one shard leaves: the other shards' score files gone.
    for part in sorted(out.glob("part-*.parquet"))[1:]:
        part.unlink()
    left = sorted(path.name for path in out.iterdir())
    capsys.readouterr()

    assert score(tiny_gpt2_dir, inputs, out) == 2

    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "holds scores of another run" in err
    assert f"model.name: '{tiny_llama_dir}' -> '{tiny_gpt2_dir}'" in err
    assert "give a new --output" in err
    assert sorted(path.name for path in out.iterdir()) == left
    # The same model completes it: every id exactly once.
    assert score(tiny_llama_dir, inputs, out) == 0
    assert scores(out)["id"].to_list() == [f"s{s}-{i}" for s in range(3) for i in range(2)]


@pytest.mark.slow
def test_resuming_with_a_score_changing_setting_is_refused_but_a_speed_setting_is_not(
    tiny_llama_dir, tmp_path, capsys
):
    inputs = three_shards(tmp_path / "in")
    out = tmp_path / "out"
    assert score(tiny_llama_dir, inputs, out, "--set", "scoring.max_tokens=64") == 0
    capsys.readouterr()
    assert score(tiny_llama_dir, inputs, out, "--set", "scoring.max_tokens=32") == 2
    assert "scoring.max_tokens: 64 -> 32" in capsys.readouterr().err
    code = score(tiny_llama_dir, inputs, out, "--set", "scoring.max_tokens=64",
                 "--batch-tokens", "256", "--set", "scoring.head=logits")  # fmt: skip
    assert code == 0 and "nothing to do: all 6 documents" in capsys.readouterr().out


@pytest.mark.slow
def test_a_changed_tokenizer_is_another_model_and_auto_is_the_dtype_it_resolves_to(
    tiny_llama_dir, tmp_path, capsys
):
    """The recorded identity covers a local model's tokenizer and config files, not only
    its weights; the dtype is recorded as the actors resolve it, so --dtype float32 resumes
    an `auto` run on CPU actors, and bfloat16 is refused."""
    model = tmp_path / "model"
    shutil.copytree(tiny_llama_dir, model)
    inputs = three_shards(tmp_path / "in")
    out = tmp_path / "out"
    assert score(model, inputs, out) == 0
    record = json.loads((out / "_minkscan.json").read_text())
    assert record["identity"]["model"]["dtype"] == "float32"
    capsys.readouterr()
    assert score(model, inputs, out, "--dtype", "float32") == 0  # the same setting
    assert score(model, inputs, out, "--dtype", "bfloat16") == 2
    assert "model.dtype: 'float32' -> 'bfloat16'" in capsys.readouterr().err
    tokenizer = json.loads((model / "tokenizer.json").read_text())
    tokenizer["added_tokens"][0]["content"] = "<PAD>"
    (model / "tokenizer.json").write_text(json.dumps(tokenizer))
    assert score(model, inputs, out) == 2
    assert "model.weights: 'sha256:" in capsys.readouterr().err


@pytest.mark.slow
def test_commit_settings_are_free_between_runs_and_older_outputs_naming_them_resume(
    tiny_llama_dir, tmp_path, capsys
):
    """How rows are cut into commits is no part of a run's identity: another commit_rows or
    commit_seconds resumes, and an output whose record still names commit_rows (written
    before commits were cut by time) resumes too."""
    inputs = three_shards(tmp_path / "in")
    out = tmp_path / "out"
    assert score(tiny_llama_dir, inputs, out, "--set", "data.commit_rows=1") == 0
    marker = json.loads((out / "_minkscan.json").read_text())
    marker["layout"]["commit_rows"] = 1
    (out / "_minkscan.json").write_text(json.dumps(marker))
    capsys.readouterr()
    assert score(tiny_llama_dir, inputs, out, "--set", "data.commit_seconds=0") == 0
    assert "all 6 documents already scored" in capsys.readouterr().out
    assert sorted(scores(out)["id"]) == sorted(f"s{s}-{i}" for s in range(3) for i in range(2))


@pytest.mark.slow
def test_two_runs_on_one_output_get_exactly_one_writer(tiny_llama_dir, tmp_path):
    """The first run holds the output's lease while it works; a second, started meanwhile,
    is refused in one line and writes nothing; the first completes every id once."""
    many = [f"A longer document {i} to keep the first run busy for a while." for i in range(200)]
    write_parquet(tmp_path / "in.parquet", id=[f"d{i}" for i in range(200)], text=many)
    out = tmp_path / "out"
    # The same command twice (as a cron job started again would): with other settings the
    # second could be refused for them instead, once the first has written its marker.
    settings = ("--set", "data.piece_rows=20", "--set", "ray.block_rows=8")
    first = score_process(tiny_llama_dir, tmp_path / "in.parquet", out, *settings)
    deadline = time.monotonic() + 120
    while not (out / LEASE).exists() and first.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)
    assert (out / LEASE).exists(), first.communicate()
    second = score_process(tiny_llama_dir, tmp_path / "in.parquet", out, *settings)
    _, second_err = second.communicate(timeout=120)
    first_out, first_err = first.communicate(timeout=300)

    assert second.returncode == 2, second_err
    assert "is being written by another run" in second_err and second_err.count("\n") == 1
    assert first.returncode == 0, first_err
    assert "scored 200 documents" in first_out
    assert scores(out)["id"].to_list() == sorted(f"d{i}" for i in range(200))
    assert not (out / LEASE).exists()  # released at the end


@pytest.mark.parametrize("store", ["local", "s3"])
def test_the_lease_is_taken_atomically_by_exactly_one_of_many(
    store, tmp_path, request, monkeypatch
):
    if store == "s3":
        endpoint, _ = request.getfixturevalue("s3_server")
        monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
        root, options = "corpus/out", S3Config(endpoint_url=endpoint, region="us-east-1")
    else:
        root, options = str(tmp_path), None
    leases = [WriterLease(root, s3=options) for _ in range(8)]
    winners, barrier = [], threading.Barrier(len(leases))

    def take(lease: WriterLease) -> None:
        barrier.wait()
        try:
            lease.acquire()
            winners.append(lease)
        except OutputBusy:
            pass

    threads = [threading.Thread(target=take, args=(lease,)) for lease in leases]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(winners) == 1
    loser = next(lease for lease in leases if lease is not winners[0])
    winners[0].release()
    loser.acquire()  # free again once released
    loser.release()


def test_an_s3_lease_follows_the_endpoint_the_environment_names_when_it_is_made(
    s3_env, tmp_path, monkeypatch
):
    """One process, two S3 stores named in turn by AWS_ENDPOINT_URL: each lease is written
    to the store named when it is made (s3fs's instance cache once kept the first)."""
    import boto3
    from helpers import moto_s3

    first = WriterLease("corpus/out", s3=S3Config())
    with first.held():
        pass
    with moto_s3(tmp_path / "moto.log") as endpoint:
        client = boto3.client("s3", endpoint_url=endpoint, aws_access_key_id="testing",
                              aws_secret_access_key="testing", region_name="us-east-1")  # fmt: skip
        client.create_bucket(Bucket="corpus")
        monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint)
        with WriterLease("corpus/out", s3=S3Config()).held():
            keys = [o["Key"] for o in client.list_objects_v2(Bucket="corpus")["Contents"]]
            assert keys == [f"out/{LEASE}"]


@pytest.mark.slow
def test_a_lease_left_by_a_killed_run_is_taken_over_so_its_output_can_be_resumed(
    tiny_llama_dir, tmp_path, capsys, caplog
):
    inputs = three_shards(tmp_path / "in")
    out = tmp_path / "out"
    assert score(tiny_llama_dir, inputs, out) == 0
    write_parquet(inputs / "3.parquet", id=["s3-0"], text=TEXTS[:1])  # work for the next run
    dead = {"run": "0" * 32, "host": socket.gethostname(), "pid": 2**22 + 7,
            "started": time.time() - 60, "expires": time.time() + 600}  # fmt: skip
    (out / LEASE).write_text(json.dumps(dead))  # its process is gone, its expiry still ahead
    assert score(tiny_llama_dir, inputs, out) == 0
    assert "took over the output lease" in caplog.text
    write_parquet(inputs / "4.parquet", id=["s4-0"], text=TEXTS[:1])  # more work
    elsewhere = dead | {"host": "another-host", "expires": time.time() + 600}
    (out / LEASE).write_text(json.dumps(elsewhere))  # alive as far as this host can tell
    capsys.readouterr()
    assert score(tiny_llama_dir, inputs, out) == 2
    assert "being written by another run" in capsys.readouterr().err
    (out / LEASE).write_text(json.dumps(elsewhere | {"expires": time.time() - 1}))
    assert score(tiny_llama_dir, inputs, out) == 0  # expired: taken over
    assert "s4-0" in scores(out)["id"].to_list()


@pytest.mark.slow
def test_an_output_inside_an_input_directory_is_refused_and_other_outputs_there_are_not_read(
    tiny_llama_dir, tmp_path, capsys
):
    data = tmp_path / "d"
    data.mkdir()
    write_parquet(data / "docs.parquet", id=["x0", "x1"], text=TEXTS[:2])
    assert score(tiny_llama_dir, data, data / "scores", "--token-scores") == 2
    err = capsys.readouterr().err
    assert "is inside the input" in err and not (data / "scores").exists()
    # An earlier output kept inside the corpus directory is never read as documents.
    assert score(tiny_llama_dir, data / "docs.parquet", data / "old-scores") == 0
    assert score(tiny_llama_dir, data, tmp_path / "out", "--token-scores") == 0
    assert scores(tmp_path / "out")["id"].to_list() == ["x0", "x1"]


@pytest.mark.usefixtures("ids_counted")
@pytest.mark.slow
def test_a_shard_that_fails_the_id_check_is_skipped_and_named_or_fails_the_run_in_one_line(
    tiny_llama_dir, tmp_path, capsys
):
    inputs = three_shards(tmp_path / "in")
    corrupt_pages(inputs / "1.parquet")
    ids = ["--set", "data.check_ids=true"]

    assert score(tiny_llama_dir, inputs, tmp_path / "failed", *ids) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "1.parquet" in err and "RayTaskError" not in err

    assert score(tiny_llama_dir, inputs, tmp_path / "out", *ids, "--skip-bad-shards") == 0
    out = capsys.readouterr().out
    assert "scored 4 documents" in out and "skipped shards: 1" in out and "1.parquet" in out
    assert scores(tmp_path / "out")["id"].to_list() == ["s0-0", "s0-1", "s2-0", "s2-1"]
    manifest = json.loads((tmp_path / "out" / "_manifest.json").read_text())
    assert list(manifest["summary"]["skipped_shards"]) == [str(inputs / "1.parquet")]

    # A re-run does not read the skipped shard again (it is unchanged) and scores nothing.
    assert score(tiny_llama_dir, inputs, tmp_path / "out", *ids, "--skip-bad-shards") == 0
    out = capsys.readouterr().out
    assert "nothing to do: all 4 documents already scored" in out
    assert "1.parquet" in out and "found by an earlier run" in out


def test_a_shard_failing_midway_is_dropped_whole_and_the_summary_counts_kept_rows(
    tiny_llama_dir, tmp_path, capsys
):
    inputs = tmp_path / "in"
    inputs.mkdir()
    write_parquet(inputs / "good.parquet", id=["g0", "g1"], text=TEXTS[:2])
    bad = inputs / "bad.parquet"
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.table({"id": [f"b{i}" for i in range(6)], "text": ["x " * 30] * 6})
    pq.write_table(table, bad, row_group_size=3, compression="none")
    corrupt_pages(bad, row_group=1)  # its first piece reads fine, its second does not
    code = score(tiny_llama_dir, inputs, tmp_path / "out", "--skip-bad-shards",
                 "--set", "data.piece_rows=3")  # fmt: skip
    assert code == 0
    out = capsys.readouterr().out
    assert "scored 2 documents" in out and "skipped shards: 1" in out
    assert scores(tmp_path / "out")["id"].to_list() == ["g0", "g1"]


@pytest.mark.slow
def test_a_skipped_shard_keeps_no_row_after_a_kill_and_a_resume(
    tiny_llama_dir, tmp_path, capsys, monkeypatch
):
    """Killed after the bad shard was recorded but before its readable part's scores were
    dropped (the delete never runs), then resumed: the resume drops them."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    inputs = tmp_path / "in"
    inputs.mkdir()
    write_parquet(inputs / "good.parquet", id=["g0", "g1"], text=TEXTS[:2])
    table = pa.table({"id": [f"b{i}" for i in range(6)], "text": ["x " * 30] * 6})
    pq.write_table(table, inputs / "bad.parquet", row_group_size=3, compression="none")
    corrupt_pages(inputs / "bad.parquet", row_group=1)
    args = ("--skip-bad-shards", "--set", "data.piece_rows=3")
    with monkeypatch.context() as killed:
        killed.setattr(ScoreOutput, "delete_parts", lambda self, parts: None)
        assert score(tiny_llama_dir, inputs, tmp_path / "out", *args) == 0
    assert {"b0", "b1", "b2"} <= set(scores(tmp_path / "out")["id"].to_list())  # the kill's
    capsys.readouterr()
    assert score(tiny_llama_dir, inputs, tmp_path / "out", *args) == 0
    assert "skipped shard" in capsys.readouterr().out  # named as skipped
    assert scores(tmp_path / "out")["id"].to_list() == ["g0", "g1"]


def test_a_run_where_every_shard_was_skipped_fails(tiny_llama_dir, tmp_path, capsys):
    inputs = tmp_path / "in"
    inputs.mkdir()
    for name in ("a", "b"):
        write_parquet(inputs / f"{name}.parquet", text=TEXTS[:2])
        corrupt_pages(inputs / f"{name}.parquet")
    assert score(tiny_llama_dir, inputs, tmp_path / "out", "--skip-bad-shards") == 1
    assert "every input shard was skipped" in capsys.readouterr().err


def test_a_text_column_no_input_has_is_a_usage_error_even_when_skipping_bad_shards(
    tiny_llama_dir, tmp_path, capsys
):
    inputs = three_shards(tmp_path / "in")
    code = score(tiny_llama_dir, inputs, tmp_path / "out", "--skip-bad-shards",
                 "--text-column", "txt")  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1
    assert "no input has the text column 'txt' (columns found: id, text)" in err
    assert "--text-column" in err and not (tmp_path / "out").exists()


def test_ids_keep_their_type_and_jsonl_may_mix_them(tiny_llama_dir, tmp_path):
    inputs = tmp_path / "in"
    inputs.mkdir()
    write_parquet(inputs / "ints.parquet", id=[2, 3], text=TEXTS[:2])
    write_parquet(inputs / "floats.parquet", id=[2.0, 3.5], text=TEXTS[2:4])
    (inputs / "mixed.jsonl").write_text(
        '{"id": 7, "text": "Seven."}\n{"id": "b", "text": "Bee."}\n{"id": 8, "text": 8}\n'
    )
    assert score(tiny_llama_dir, inputs, tmp_path / "out", "--set", "data.check_ids=true") == 0
    result = scores(tmp_path / "out")
    assert result["id"].to_list() == ["2", "2.0", "3", "3.5", "7", "8", "b"]
    assert dict(zip(result["id"], result["status"], strict=True))["8"] == "not_text"


@pytest.mark.slow
def test_a_score_file_that_cannot_be_written_fails_the_run_naming_it_and_the_cause(
    tiny_llama_dir, tmp_path, capsys
):
    inputs = three_shards(tmp_path / "in")
    out = tmp_path / "out"
    assert score(tiny_llama_dir, inputs, out) == 0
    # A file the commit cannot replace (a directory in its place), as a disk turned
    # read-only or full midway would make it fail.
    (victim,) = [p for p in out.glob("part-*.parquet") if "s1-0" in pl.read_parquet(p)["id"]]
    victim.unlink()
    victim.mkdir()
    (victim / "keep").write_text("")
    capsys.readouterr()

    assert score(tiny_llama_dir, inputs, out) == 1

    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"cannot write {victim}:" in err
    assert "RayTaskError" not in err and "CommitStage" not in err
