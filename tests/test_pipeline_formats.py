"""Every input format `minkscan score` reads gives the same rows, statuses and derived ids:
JSON lines (plain and gzip), CSV, a Hugging Face `save_to_disk` directory, and JSONL on S3."""

from __future__ import annotations

import gzip
import json
import logging
import re
from pathlib import Path

import polars as pl
import pyarrow.fs as pafs
import pytest
from minkscan.cli import main
from minkscan.io.inputs import discover
from minkscan.io.score_reader import read_output
from minkscan.io.scores import ScoreOutput

TEXTS = ["The first document of the set.", "", "A third one, a little longer than that."]


pytestmark = pytest.mark.usefixtures("local_ray")


def write_jsonl(directory: Path) -> str:
    with gzip.open(directory / "docs.jsonl.gz", "wt") as stream:
        for text in TEXTS:
            stream.write(json.dumps({"text": text, "url": "https://example.org"}) + "\n")
    return "docs.jsonl.gz"


def write_csv(directory: Path) -> str:
    pl.DataFrame({"text": TEXTS}).write_csv(directory / "docs.csv")
    return "docs.csv"


def write_hf_dataset(directory: Path) -> str:
    import datasets

    datasets.Dataset.from_dict({"text": TEXTS}).save_to_disk(str(directory / "hf"))
    (arrow,) = (directory / "hf").glob("*.arrow")
    return arrow.name


@pytest.mark.parametrize(
    "write", [write_jsonl, write_csv, write_hf_dataset], ids=lambda f: f.__name__
)
def test_each_format_is_scored_row_for_row_with_ids_from_its_relative_path(
    write, tiny_llama_dir, tmp_path, capsys
):
    name = write(tmp_path)
    source = tmp_path / "hf" if write is write_hf_dataset else tmp_path / name
    code = main(["score", "--input", str(source), "--output", str(tmp_path / "out"),
                 "--model", str(tiny_llama_dir)])  # fmt: skip
    assert code == 0, capsys.readouterr().err

    scores = read_output(ScoreOutput(pafs.LocalFileSystem(), str(tmp_path / "out")))
    frame = pl.from_arrow(scores).sort("row")
    assert frame["id"].to_list() == [f"{name}:{row}" for row in range(3)]
    assert frame["status"].to_list() == ["ok", "empty", "ok"]
    assert not (tmp_path / "out" / "_tmp").exists()  # a finished output keeps no _tmp/
    # The summary gives the scoring seconds and, beside them, all the seconds waited.
    assert re.search(r"in \d+\.\d s \(\d+\.\d s in all\):", capsys.readouterr().out)


@pytest.mark.slow
def test_jsonl_on_s3_is_read_and_scored_and_a_renamed_object_keeps_its_rows(
    tiny_llama_dir, tmp_path, capsys, s3_server
):
    endpoint, client = s3_server
    client.upload_file(str(tmp_path / write_jsonl(tmp_path)), "corpus", "raw/docs.jsonl.gz")
    s3 = ["--set", f"data.s3={{endpoint_url: '{endpoint}', region: us-east-1, "
          "access_key_id: testing, secret_access_key: testing}"]  # fmt: skip
    command = ["score", "--input", "s3://corpus/raw/", "--output", "s3://corpus/scores",
               "--model", str(tiny_llama_dir), *s3]  # fmt: skip
    assert main(command) == 0, capsys.readouterr().err
    assert "scored 3 documents" in capsys.readouterr().out
    # S3 has no rename: a copy and a delete. The object's ETag names its content.
    client.copy_object(Bucket="corpus", Key="raw/renamed.jsonl.gz",
                       CopySource={"Bucket": "corpus", "Key": "raw/docs.jsonl.gz"})  # fmt: skip
    client.delete_object(Bucket="corpus", Key="raw/docs.jsonl.gz")

    assert main(command) == 0, capsys.readouterr().err

    printed = capsys.readouterr().out
    assert "scored 0 documents" in printed and "1 moved (rows kept)" in printed


def test_limit_scores_the_first_n_rows_across_files(tiny_llama_dir, tmp_path, capsys):
    inputs = tmp_path / "in"
    inputs.mkdir()
    for name, texts in {"a.parquet": ["One.", "Two."], "b.parquet": ["Three.", "Four."]}.items():
        pl.DataFrame({"text": texts}).write_parquet(inputs / name)
    code = main(["score", "--input", str(inputs), "--output", str(tmp_path / "out"),
                 "--model", str(tiny_llama_dir), "--limit", "3"])  # fmt: skip
    assert code == 0, capsys.readouterr().err
    scores = pl.from_arrow(read_output(ScoreOutput(pafs.LocalFileSystem(), str(tmp_path / "out"))))
    assert sorted(scores["id"].to_list()) == ["a.parquet:0", "a.parquet:1", "b.parquet:0"]


@pytest.mark.slow
def test_ids_are_kept_as_written_whatever_they_look_like(tiny_llama_dir, tmp_path, capsys):
    """CSV ids with leading zeros, dates and 30 digits, JSON string ids that look like dates,
    and JSON ids 7 and "7" (one a number): each id as its text, none merged, none crashing."""
    (tmp_path / "in").mkdir()
    csv_ids = ["007", "7", "2024-01-05", "123456789012345678901234567890"]
    lines = ["id,text"] + [f"{i},The text of document {n}." for n, i in enumerate(csv_ids)]
    (tmp_path / "in" / "a.csv").write_text("\n".join(lines) + "\n")
    records = [{"id": "0042", "text": "One."}, {"id": "2024-02-01", "text": "Two words."}]
    (tmp_path / "in" / "b.jsonl").write_text("\n".join(json.dumps(r) for r in records) + "\n")
    mixed = [{"id": 7, "text": "A number id."}, {"id": "x7", "text": "A text id."}]
    (tmp_path / "in" / "c.jsonl").write_text("\n".join(json.dumps(r) for r in mixed) + "\n")
    code = main(["score", "--input", str(tmp_path / "in"), "--output", str(tmp_path / "out"),
                 "--model", str(tiny_llama_dir), "--id-column", "id"])  # fmt: skip
    assert code == 0, capsys.readouterr().err
    frame = pl.from_arrow(read_output(ScoreOutput(pafs.LocalFileSystem(), str(tmp_path / "out"))))
    assert sorted(frame["id"].to_list()) == sorted([*csv_ids, "0042", "2024-02-01", "7", "x7"])


@pytest.mark.slow
def test_each_real_file_is_read_once_and_globs_follow_shell_rules(tiny_llama_dir, tmp_path, capsys):
    """A symlink loop inside the input reaches each file once (scored through the CLI); `*`
    stays in its directory and `**` goes to any depth (what discovery finds)."""
    root = tmp_path / "in"
    (root / "sub").mkdir(parents=True)
    pl.DataFrame({"text": ["A first text.", "A second."]}).write_csv(root / "a.csv")
    pl.DataFrame({"text": ["Deeper down."]}).write_csv(root / "sub" / "b.csv")
    (root / "loop").symlink_to(root, target_is_directory=True)
    code = main(["score", "--input", str(root), "--output", str(tmp_path / "out"),
                 "--model", str(tiny_llama_dir)])  # fmt: skip
    assert code == 0, capsys.readouterr().err
    frame = pl.from_arrow(read_output(ScoreOutput(pafs.LocalFileSystem(), str(tmp_path / "out"))))
    assert sorted(frame["id"].to_list()) == ["a.csv:0", "a.csv:1", "sub/b.csv:0"]

    def found(spec: str) -> list[str]:
        return [file.relpath for file in discover([spec], pafs.LocalFileSystem()).files]

    assert found(f"{root}/*.csv") == ["a.csv"]
    assert found(f"{root}/**/*.csv") == ["a.csv", "sub/b.csv"]


def test_a_broken_jsonl_line_is_named_by_its_line_in_the_file_in_one_line(
    tiny_llama_dir, tmp_path, capsys
):
    lines = [json.dumps({"text": f"Document {i} is fine."}) for i in range(3000)]
    lines[2500] = '{"text": "a broken record'
    (tmp_path / "docs.jsonl").write_text("\n".join(lines) + "\n")
    code = main(["score", "--input", str(tmp_path / "docs.jsonl"), "--output",
                 str(tmp_path / "out"), "--model", str(tiny_llama_dir)])  # fmt: skip
    err = capsys.readouterr().err.splitlines()
    assert code == 1
    assert err == [  # the cause alone: no traceback of Ray's, no retry advice
        f"minkscan score: cannot read input shard {tmp_path / 'docs.jsonl'}: line 2501 is not "
        "JSON (Unterminated string starting at)"
    ]


def test_scoring_a_score_output_says_what_it_is(tiny_llama_dir, tmp_path, capsys):
    pl.DataFrame({"text": ["A text."]}).write_parquet(tmp_path / "in.parquet")
    out = tmp_path / "out"
    assert main(["score", "--input", str(tmp_path / "in.parquet"), "--output", str(out),
                 "--model", str(tiny_llama_dir)]) == 0  # fmt: skip
    capsys.readouterr()
    code = main(["score", "--input", str(out), "--output", str(tmp_path / "again"),
                 "--model", str(tiny_llama_dir)])  # fmt: skip
    assert code == 2
    assert f"input {out} is a minkscan score output, not documents" in capsys.readouterr().err


@pytest.mark.slow
def test_files_an_input_directory_holds_but_does_not_read_are_counted_and_listed_with_v(
    tiny_llama_dir, tmp_path, capsys
):
    """Skipped files are never silent: the summary counts them by reason, `-v` lists each."""
    root = tmp_path / "in"
    (root / ".cache").mkdir(parents=True)
    pl.DataFrame({"text": ["A first text.", "A second."]}).write_csv(root / "a.csv")
    (root / "notes.txt").write_text("not an input")
    pl.DataFrame({"text": ["A draft."]}).write_csv(root / "_draft.csv")
    pl.DataFrame({"text": ["Cached."]}).write_csv(root / ".cache" / "x.csv")
    (root / "link.csv").symlink_to(root / "a.csv")
    args = ["score", "--input", str(root), "--output", str(tmp_path / "out"), "--model",
            str(tiny_llama_dir)]  # fmt: skip
    assert main(args) == 0
    summary = capsys.readouterr().out
    assert ("; files not read: 4 (2 hidden (_ or . name), 1 second path to a file (symlink), "
            "1 unknown format; -v lists them)") in summary  # fmt: skip
    frame = pl.from_arrow(read_output(ScoreOutput(pafs.LocalFileSystem(), str(tmp_path / "out"))))
    assert sorted(frame["id"].to_list()) == ["a.csv:0", "a.csv:1"]

    assert main(["-v", *args]) == 0  # nothing to do now, and it says what it did not read
    logging.getLogger("minkscan").setLevel(logging.INFO)  # -v stays with this test
    listed = [line for line in capsys.readouterr().out.splitlines() if line.startswith("not ")]
    assert listed == [
        f"not read {root / '.cache' / 'x.csv'}: hidden (_ or . name)",
        f"not read {root / '_draft.csv'}: hidden (_ or . name)",
        f"not read {root / 'link.csv'}: second path to a file (symlink)",
        f"not read {root / 'notes.txt'}: unknown format",
    ]
