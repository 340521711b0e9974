"""A row's identity is what its input file holds, not where the file is: renaming, moving or
reaching the inputs from another root never scores a row again; an edit under the same size
and modification time is scored again and never mixed with the old rows; a deleted input's
rows are refused by name or dropped; byte-identical files are scored once; an output written
before content keys is adopted without scoring again. Each case runs `minkscan score` as a
user would and checks the rows by id."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest
from helpers import score, scores, write_parquet
from minkscan import score_texts
from minkscan.io.inputs import InputFile, ShardError, discover
from minkscan.io.planning import plan_pieces
from minkscan.io.reading import read_piece
from minkscan.io.scores import ScoreOutput
from minkscan.schema import MARKER, parse_part_name, part_name

pytestmark = pytest.mark.usefixtures("local_ray")

TEXTS = [f"Document number {i} says something of its own." for i in range(6)]


def jsonl(path, texts, **extra):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps({"text": t, **extra}) + "\n" for t in texts))
    return path


def losses(output) -> dict[str, float]:
    frame = scores(output)
    return dict(zip(frame["id"].to_list(), frame["mean_logprob"].to_list(), strict=True))


_SCORED: dict[str, Path] = {}


@pytest.fixture
def scored(tiny_llama_dir, tmp_path_factory, tmp_path, local_ray) -> Path:
    """A corpus -- ``data/in/a.parquet`` and ``data/in/b.jsonl``, two texts each, ids
    derived -- and its score output ``out``, scored once per module: each test gets its own
    copy in ``tmp_path``."""
    if "root" not in _SCORED:
        root = tmp_path_factory.mktemp("scored")
        (root / "data" / "in").mkdir(parents=True)
        write_parquet(root / "data" / "in" / "a.parquet", text=TEXTS[:2])
        jsonl(root / "data" / "in" / "b.jsonl", TEXTS[2:4])
        assert score(tiny_llama_dir, root / "data" / "in", root / "out") == 0
        _SCORED["root"] = root
    shutil.copytree(_SCORED["root"], tmp_path, dirs_exist_ok=True)
    return tmp_path


IDS = ["a.parquet:0", "a.parquet:1", "b.jsonl:0", "b.jsonl:1"]


def test_renamed_moved_or_rerooted_inputs_keep_their_rows_under_their_new_paths(
    tiny_llama_dir, scored, capsys
):
    inputs, out = scored / "data" / "in", scored / "out"
    before = losses(out)
    assert sorted(before) == IDS
    (inputs / "a.parquet").rename(inputs / "c.parquet")
    (inputs / "sub").mkdir()
    (inputs / "b.jsonl").rename(inputs / "sub" / "b.jsonl")
    capsys.readouterr()

    assert score(tiny_llama_dir, inputs, out, "-v") == 0

    printed = capsys.readouterr().out
    assert "scored 0 documents" in printed and "2 moved (rows kept)" in printed
    assert "moved a.parquet -> c.parquet: rows kept" in printed
    moved = scores(out)
    assert moved["id"].to_list() == ["c.parquet:0", "c.parquet:1", "sub/b.jsonl:0", "sub/b.jsonl:1"]
    assert moved["source"].to_list() == ["c.parquet"] * 2 + ["sub/b.jsonl"] * 2
    assert moved["mean_logprob"].to_list() == [before[i] for i in IDS]
    # The same files reached from their parent: their relative paths change, their rows stay.
    assert score(tiny_llama_dir, scored / "data", out) == 0
    assert "scored 0 documents" in capsys.readouterr().out
    assert scores(out)["id"].to_list() == [
        "in/c.parquet:0", "in/c.parquet:1", "in/sub/b.jsonl:0", "in/sub/b.jsonl:1"
    ]  # fmt: skip
    assert len(list(out.glob("part-*.parquet"))) == 2  # no second copy of any row


@pytest.mark.slow
def test_an_edit_under_the_same_size_and_mtime_is_scored_again_and_never_mixed(
    tiny_llama_dir, scored, capsys
):
    inputs, out = scored / "data" / "in", scored / "out"
    before = losses(out)
    # Other text of the same byte length, the modification time put back.
    edited = [t.upper() for t in TEXTS[:2]] + [t.replace("says", "owns") for t in TEXTS[2:4]]
    sizes = {}
    for path, write in [
        (inputs / "a.parquet", lambda p: write_parquet(p, text=edited[:2])),
        (inputs / "b.jsonl", lambda p: jsonl(p, edited[2:])),
    ]:
        stat = path.stat()
        write(path)
        os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
        sizes[path.name] = (stat.st_size, path.stat().st_size)
    assert sizes["b.jsonl"][0] == sizes["b.jsonl"][1]
    capsys.readouterr()

    assert score(tiny_llama_dir, inputs, out) == 0

    printed = capsys.readouterr().out
    assert "scored 4 documents" in printed and "2 changed (scored again)" in printed
    after = losses(out)
    assert sorted(after) == IDS  # each id once: no old row beside a new one
    assert len(list(out.glob("part-*.parquet"))) == 2  # the old content's files are gone
    fresh = score_texts(edited, str(tiny_llama_dir), device="cpu")["mean_logprob"].to_list()
    assert [after[i] for i in IDS] == pytest.approx(fresh, abs=1e-5)  # the new text's
    assert after != pytest.approx(before, abs=1e-6)


@pytest.mark.slow
def test_a_deleted_input_is_refused_by_name_or_its_rows_dropped_with_drop_missing(
    tiny_llama_dir, scored, capsys
):
    inputs, out = scored / "data" / "in", scored / "out"
    kept = scored / "b.jsonl"
    shutil.move(inputs / "b.jsonl", kept)
    files = sorted(path.name for path in out.iterdir())
    capsys.readouterr()

    assert score(tiny_llama_dir, inputs, out) == 2

    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "holds the rows of 1 input(s) this run does not name" in err
    assert "(b.jsonl): name them again, or --drop-missing" in err
    assert sorted(path.name for path in out.iterdir()) == files  # untouched
    assert score(tiny_llama_dir, inputs, out, "--drop-missing") == 0
    printed = capsys.readouterr().out
    assert "scored 0 documents" in printed and "1 missing (rows dropped)" in printed
    assert scores(out)["id"].to_list() == IDS[:2]
    assert len(list(out.glob("part-*.parquet"))) == 1  # b's score files are gone
    assert calibrated_nonmembers(out, scored) == 2  # what every reader sees
    capsys.readouterr()
    # Given again, twice byte for byte: scored once, under the first path.
    shutil.copy(kept, inputs / "b.jsonl")
    shutil.copy(kept, inputs / "b-copy.jsonl")
    assert score(tiny_llama_dir, inputs, out, "-v") == 0
    printed = capsys.readouterr().out
    assert "scored 2 documents" in printed
    assert "files not read: 1 (1 same content as another input (scored once)" in printed
    assert "b.jsonl: same content as another input" in printed
    assert scores(out)["id"].to_list() == [*IDS[:2], "b-copy.jsonl:0", "b-copy.jsonl:1"]


def calibrated_nonmembers(out, tmp_path) -> int:
    """How many non-members `minkscan calibrate` counts in ``out``."""
    from minkscan.cli import main

    calibration = tmp_path / "calibration.json"
    assert main(["calibrate", "--nonmembers", str(out), "--output", str(calibration)]) == 0
    return json.loads(calibration.read_text())["methods"]["mean_logprob"]["n_nonmembers"]


@pytest.mark.slow
def test_an_output_written_before_content_keys_is_adopted_without_scoring_again_or_renaming(
    tiny_llama_dir, scored, capsys
):
    inputs, out = scored / "data" / "in", scored / "out"
    before = losses(out)
    downgrade_to_format_2(out, inputs)
    jsonl(inputs / "b.jsonl", TEXTS[2:5])  # changed since: its old rows must go
    capsys.readouterr()
    # Its recorded run still binds: another score-changing setting is refused.
    assert score(tiny_llama_dir, inputs, out, "--set", "scoring.max_tokens=16") == 2
    assert "holds scores of another run" in capsys.readouterr().err

    assert score(tiny_llama_dir, inputs, out) == 0

    assert "scored 3 documents" in capsys.readouterr().out
    after = scores(out)
    assert after["id"].to_list() == [*IDS, "b.jsonl:2"]
    assert after["mean_logprob"].to_list()[:2] == [before[i] for i in IDS[:2]]
    assert json.loads((out / MARKER).read_text())["format"] == 3


@pytest.mark.slow
def test_an_older_outputs_input_swapped_under_its_size_and_mtime_is_scored_again(
    tiny_llama_dir, scored, capsys, caplog
):
    """Format 2 recorded only size and time: before its scores are kept, a sample of each
    input's rows is read and tokenised again, and a file whose rows no longer match them
    (ids, statuses, token counts) is scored again, with a warning naming it."""
    inputs, out = scored / "data" / "in", scored / "out"
    before = losses(out)
    downgrade_to_format_2(out, inputs)
    path = inputs / "b.jsonl"
    stat = path.stat()
    swapped = [TEXTS[2] + " and more", TEXTS[3][: -len(" and more")]]  # the same bytes in all
    jsonl(path, swapped)
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert path.stat().st_size == stat.st_size
    capsys.readouterr()

    assert score(tiny_llama_dir, inputs, out) == 0

    assert "scored 2 documents" in capsys.readouterr().out
    assert "b.jsonl is scored again: its size and time are as recorded, but 2 of 2" in caplog.text
    after = losses(out)
    assert sorted(after) == IDS
    assert [after[i] for i in IDS[:2]] == [before[i] for i in IDS[:2]]  # a.parquet's kept
    fresh = score_texts(swapped, str(tiny_llama_dir), device="cpu")["mean_logprob"].to_list()
    assert [after[i] for i in IDS[2:]] == pytest.approx(fresh, abs=1e-5)


FORMER = {"mean_logprob": "loss"}


def downgrade_to_format_2(out, inputs) -> None:
    """What minkscan wrote before content keys: score files keyed by a hash of the input's
    relative path, each input's size and modification time in the marker, and the mean
    log p under its former name, `loss`."""
    marker = json.loads((out / MARKER).read_text())
    paths = {key: entry["path"] for key, entry in marker["inputs"].items()}
    for part in out.glob("part-*.parquet"):
        piece, first, rows = parse_part_name(part.name)
        old = hashlib.sha1(paths[piece.file].encode()).hexdigest()[:16]
        renamed = type(piece)(old, piece.start, piece.end)
        table = pq.read_table(part)
        pq.write_table(table.rename_columns([FORMER.get(c, c) for c in table.column_names]),
                       out / part_name(renamed, first, rows))  # fmt: skip
        part.unlink()
    marker["columns"] = [FORMER.get(c, c) for c in marker["columns"]]
    stats = {p: (inputs / p).stat() for p in paths.values()}
    marker["inputs"] = {p: {"size": s.st_size, "mtime_ns": s.st_mtime_ns} for p, s in stats.items()}
    marker["format"] = 2
    (out / MARKER).write_text(json.dumps(marker))


def test_a_file_changed_after_planning_fails_its_read_naming_it(tmp_path):
    fs = pafs.LocalFileSystem()
    path = jsonl(tmp_path / "a.jsonl", TEXTS[:2])
    found = discover([str(path)], fs).files
    (piece,) = plan_pieces(fs, found, piece_rows=10, text_column="text", id_column="id").pieces
    jsonl(path, TEXTS[2:4])  # same size: only the bytes tell

    with pytest.raises(ShardError, match=r"a\.jsonl changed since the run planned it"):
        list(read_piece(fs, piece, text_column="text", id_column=None))


def test_the_key_is_the_content_wherever_the_file_lies(tmp_path):
    fs = pafs.LocalFileSystem()

    def key(path) -> str:
        (file,) = plan_pieces(fs, discover([str(path)], fs).files, piece_rows=10,
                              text_column="text", id_column="id").pieces  # fmt: skip
        return file.file.key

    first = write_parquet(tmp_path / "x.parquet", text=TEXTS[:2])
    same = shutil.copy(first, tmp_path / "y.parquet")
    assert key(first) == key(same)
    write_parquet(same, text=TEXTS[1:3])
    assert key(first) != key(same)
    with pytest.raises(ValueError, match="no content fingerprint"):
        _ = InputFile(str(first), "x.parquet", "parquet").key
    assert ScoreOutput(fs, str(tmp_path / "none")).recorded_inputs() == {}
