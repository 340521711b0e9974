"""Dirty corpora through `minkscan score`: no bad row, shard, id or output directory ever
costs another row, another shard or a file minkscan did not write."""

from __future__ import annotations

import json
import os
import pickle
import shutil

import polars as pl
import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest
from helpers import score, scores
from minkscan.distributed.ids import DRIVER_BYTES, DRIVER_FILES, on_driver
from minkscan.io import content
from minkscan.io.inputs import InputFile, Piece, ShardError
from minkscan.io.scores import ScoreOutput
from minkscan.scorer import score_texts

pytestmark = pytest.mark.usefixtures("local_ray")


def test_an_output_directory_holding_other_files_is_refused_and_left_untouched(
    tiny_llama_dir, tmp_path, capsys
):
    pl.DataFrame({"id": ["a"], "text": ["Some text here."]}).write_parquet(tmp_path / "in.parquet")
    output = tmp_path / "mine"
    output.mkdir()
    (output / "a.parquet").write_bytes(b"the user's own file")

    assert score(tiny_llama_dir, tmp_path / "in.parquet", output) == 2

    assert "holds files minkscan did not write (a.parquet)" in capsys.readouterr().err
    assert (output / "a.parquet").read_bytes() == b"the user's own file"
    assert sorted(p.name for p in output.iterdir()) == ["a.parquet"]


def test_an_output_that_is_a_file_or_cannot_be_created_fails_before_any_work(
    tiny_llama_dir, tmp_path, capsys
):
    pl.DataFrame({"text": ["Some text here."]}).write_parquet(tmp_path / "in.parquet")
    (tmp_path / "out").write_text("keep me")

    assert score(tiny_llama_dir, tmp_path / "in.parquet", tmp_path / "out") == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "is a file" in err
    assert (tmp_path / "out").read_text() == "keep me"

    assert score(tiny_llama_dir, tmp_path / "in.parquet", tmp_path / "out" / "scores") == 2
    assert "cannot be created" in capsys.readouterr().err


@pytest.mark.slow
def test_undecodable_and_nul_only_rows_get_a_status_and_cost_no_other_row(tiny_llama_dir, tmp_path):
    texts = [b"A good first row of text.", b"\xff\xfe broken bytes", b"\x00\x00", b"Another row."]
    table = pa.table({"text": pa.array(texts, pa.binary()).cast(pa.string(), safe=False)})
    pq.write_table(table, tmp_path / "dirty.parquet")

    assert score(tiny_llama_dir, tmp_path / "dirty.parquet", tmp_path / "out") == 0

    result = scores(tmp_path / "out")
    assert result["status"].to_list() == ["ok", "bad_encoding", "empty", "ok"]
    assert result["mean_logprob"].is_null().to_list() == [False, True, True, False]


@pytest.mark.slow
def test_a_shard_with_corrupt_pages_is_skipped_whole_and_listed_or_fails_naming_it(
    tiny_llama_dir, tmp_path, capsys
):
    inputs = tmp_path / "in"
    inputs.mkdir()
    good = [f"Good document number {i}." for i in range(4)]
    pl.DataFrame({"text": good}).write_parquet(inputs / "good.parquet")
    bad = inputs / "bad.parquet"
    # Two row groups: the first readable, the second not, so a half-written shard is possible.
    pq.write_table(pa.table({"text": ["x " * 50] * 6}), bad, row_group_size=3, compression="none")
    raw = bytearray(bad.read_bytes())
    second = pq.ParquetFile(bad).metadata.row_group(1).column(0).data_page_offset
    raw[second : second + 32] = b"\xde\xad\xbe\xef" * 8
    bad.write_bytes(bytes(raw))
    pq.read_metadata(bad)  # the footer is intact: only reading the pages fails

    assert score(tiny_llama_dir, inputs, tmp_path / "out", "--set", "data.piece_rows=3") == 1
    assert "bad.parquet" in capsys.readouterr().err

    code = score(
        tiny_llama_dir, inputs, tmp_path / "out2", "--skip-bad-shards",
        "--set", "data.piece_rows=3",
    )  # fmt: skip
    assert code == 0
    out = capsys.readouterr().out
    assert "skipped shards: 1" in out and "bad.parquet" in out
    assert scores(tmp_path / "out2")["source"].unique().to_list() == ["good.parquet"]
    manifest = json.loads((tmp_path / "out2" / "_manifest.json").read_text())
    assert list(manifest["summary"]["skipped_shards"]) == [str(bad.resolve())]


def test_shards_whose_id_and_text_types_differ_are_unified(tiny_llama_dir, tmp_path):
    inputs = tmp_path / "in"
    inputs.mkdir()
    pl.DataFrame({"id": ["a", "b"], "text": ["First text.", "Second text."]}).write_parquet(
        inputs / "strings.parquet"
    )
    pl.DataFrame({"id": [1, 2], "text": [10, 20]}).write_parquet(inputs / "ints.parquet")

    assert score(tiny_llama_dir, inputs, tmp_path / "out") == 0

    result = scores(tmp_path / "out")
    assert result["id"].to_list() == ["1", "2", "a", "b"]
    assert result["status"].to_list() == ["not_text", "not_text", "ok", "ok"]


@pytest.mark.usefixtures("ids_counted")
@pytest.mark.slow
def test_repeated_and_null_ids_are_scored_once_each_reported_and_refusable(
    tiny_llama_dir, tmp_path, capsys
):
    inputs = tmp_path / "in"
    inputs.mkdir()
    pl.DataFrame({"id": ["a", "a", None], "text": ["One.", "Two.", "Three."]}).write_parquet(
        inputs / "1.parquet"
    )
    pl.DataFrame({"id": ["a", "b"], "text": ["Four.", "Five."]}).write_parquet(inputs / "2.parquet")
    base = ["--set", "data.check_ids=true"]

    assert score(tiny_llama_dir, inputs, tmp_path / "refused", *base, "--require-unique-ids") == 2
    assert "1 repeated ids (2 extra rows; e.g. a), 1 rows without an id" in capsys.readouterr().err
    assert not (tmp_path / "refused").exists()

    assert score(tiny_llama_dir, inputs, tmp_path / "out", *base) == 0
    assert "ids: 1 repeated ids (2 extra rows; e.g. a), 1 rows without an id" in (
        capsys.readouterr().out
    )
    result = scores(tmp_path / "out")
    assert sorted(zip(result["source"], result["row"], strict=True)) == [
        ("1.parquet", 0), ("1.parquet", 1), ("1.parquet", 2), ("2.parquet", 0), ("2.parquet", 1)
    ]  # fmt: skip
    manifest = json.loads((tmp_path / "out" / "_manifest.json").read_text())
    assert manifest["summary"]["ids"]["repeated_ids"] == 1
    assert manifest["summary"]["ids"]["null_ids"] == 1
    # A resume counts pieces, not ids: the repeated "a" in 2.parquet is not taken as done.
    assert score(tiny_llama_dir, inputs, tmp_path / "out", *base) == 0
    assert "nothing to do: all 5 documents already scored" in capsys.readouterr().out
    assert scores(tmp_path / "out").height == 5


def test_ids_of_a_small_input_are_counted_on_the_driver_and_of_a_large_one_by_ray_data():
    def pieces(files: int, size: int) -> list[Piece]:
        return [Piece(InputFile(f"/in/{i}.parquet", f"{i}.parquet", "parquet", size), 0, None)
                for i in range(files)]  # fmt: skip

    assert on_driver(pieces(2, 1 << 20))
    assert on_driver(pieces(1, DRIVER_BYTES)) and not on_driver(pieces(1, DRIVER_BYTES + 1))
    assert not on_driver(pieces(DRIVER_FILES + 1, 10))
    assert not on_driver(pieces(1, -1))  # size unknown


@pytest.mark.slow
def test_a_partly_committed_piece_is_completed_with_only_its_missing_rows(
    tiny_llama_dir, tmp_path, capsys
):
    texts = [f"Row {i} of a piece that was cut short." for i in range(8)]
    pl.DataFrame({"text": texts}).write_parquet(tmp_path / "in.parquet")
    assert score(tiny_llama_dir, tmp_path / "in.parquet", tmp_path / "out") == 0
    clean = scores(tmp_path / "out")
    # What a kill between two commits of one piece leaves: rows 0-3 committed, 4-7 not.
    output = ScoreOutput(pafs.LocalFileSystem(), str(tmp_path / "out"))
    (part,) = output.parts()
    table = pq.read_table(part.path)
    output.delete_parts([part])
    output.write_part(table.slice(0, 4), part.piece, 0)
    assert scores(tmp_path / "out").height == 0  # readers see complete pieces only
    capsys.readouterr()

    assert score(tiny_llama_dir, tmp_path / "in.parquet", tmp_path / "out") == 0

    assert "scored 4 documents" in capsys.readouterr().out
    resumed = scores(tmp_path / "out")
    assert resumed["row"].to_list() == list(range(8))
    assert resumed["mean_logprob"].to_list() == pytest.approx(
        clean["mean_logprob"].to_list(), abs=1e-6
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--set", "ray.num_actors=3", "--set", "ray.max_actors=2"], "'ray': "),
        (["--model", "/nonexistent/model"], "bundled models: smollm2-135m, gemma3-270m"),
        (["--set", "data.no_such_key=1"], "unknown key 'data.no_such_key'"),
    ],
)
def test_config_and_model_mistakes_fail_in_one_line_before_ray_work(
    tiny_llama_dir, tmp_path, capsys, args, message
):
    pl.DataFrame({"text": ["Some text."]}).write_parquet(tmp_path / "in.parquet")
    code = score(tiny_llama_dir, tmp_path / "in.parquet", tmp_path / "out", *args)
    err = capsys.readouterr().err
    assert code == 2 and message in err and err.count("\n") == 1, err
    assert "Traceback" not in err
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_a_rerun_over_a_complete_output_reads_no_input_row(tiny_llama_dir, tmp_path, capsys):
    path = tmp_path / "in.parquet"
    pq.write_table(pa.table({"text": ["One text.", "Two texts."]}), path, compression="none")
    assert score(tiny_llama_dir, path, tmp_path / "out") == 0
    # Break every data page but keep the footer, size and modification time: only a run that
    # reads rows would notice.
    stat = path.stat()
    raw = bytearray(path.read_bytes())
    start = pq.ParquetFile(path).metadata.row_group(0).column(0).data_page_offset
    raw[start : start + 24] = b"\xde\xad\xbe\xef" * 6
    path.write_bytes(bytes(raw))
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    capsys.readouterr()

    assert score(tiny_llama_dir, path, tmp_path / "out") == 0

    out = capsys.readouterr().out
    assert "nothing to do: all 2 documents already scored" in out


@pytest.mark.slow
def test_a_same_length_edit_of_a_parquet_file_without_statistics_is_scored_again(
    tiny_llama_dir, tmp_path, capsys
):
    """Its footer cannot tell the edit apart (no min/max to change), so the key also covers
    the data pages: the edited row is scored again, its old score gone."""
    path = tmp_path / "in.parquet"
    table = pa.table({"id": ["a", "b"], "text": ["One text here.", "Two texts."]})
    pq.write_table(table, path, compression="none", write_statistics=False)
    assert score(tiny_llama_dir, path, tmp_path / "out") == 0
    footer = content.parquet_footer(pa.OSFile(str(path)))
    stat = path.stat()
    path.write_bytes(path.read_bytes().replace(b"One text here.", b"One test here."))
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert content.parquet_footer(pa.OSFile(str(path))) == footer  # the footer cannot tell
    capsys.readouterr()
    assert score(tiny_llama_dir, path, tmp_path / "out") == 0
    assert "scored 2 documents" in capsys.readouterr().out
    rows = scores(tmp_path / "out")
    assert rows["id"].to_list() == ["a", "b"]
    expected = score_texts(["One test here."], model=str(tiny_llama_dir), device="cpu")
    assert rows["mean_logprob"][0] == pytest.approx(expected["mean_logprob"][0], rel=1e-5)


def test_a_shard_error_is_one_line_whatever_the_reader_said():
    """pyarrow's messages can span lines ("...don't know what type: \\nDeserializing page
    header failed."); the CLI's error, the summary and the bad-shard record show one line
    with all of it, also after the error crosses a Ray worker (pickled)."""
    error = ShardError("cannot read input shard x.parquet: bad type: \nDeserializing failed.\n")
    expected = "cannot read input shard x.parquet: bad type: Deserializing failed."
    assert str(error) == expected and str(pickle.loads(pickle.dumps(error))) == expected


def test_a_model_that_runs_its_own_code_is_refused_by_name_before_ray(
    tiny_llama_dir, tmp_path, capsys
):
    model = tmp_path / "custom-model"
    shutil.copytree(tiny_llama_dir, model)
    config = json.loads((model / "config.json").read_text())
    config["auto_map"] = {"AutoModelForCausalLM": "modeling_custom.CustomForCausalLM"}
    (model / "config.json").write_text(json.dumps(config))
    pl.DataFrame({"text": ["A text."]}).write_parquet(tmp_path / "in.parquet")
    assert score(model, tmp_path / "in.parquet", tmp_path / "out") == 2
    err = capsys.readouterr().err.strip()
    assert err == (
        f"minkscan score: model directory {model} runs its own code ('auto_map' in "
        "config.json): set model.trust_remote_code=true (--set) if you trust it"
    )
    assert not (tmp_path / "out").exists()
