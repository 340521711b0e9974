"""Labels are 1/0 or true/false and nothing else: `calibrate` (--labels or a label column)
and `benchmark` refuse 0.5, other strings, missing labels and ids labelled both ways in one
line that counts them and shows some, before any work; repeats of an id with one label
count once."""

from __future__ import annotations

import json

import numpy as np
import polars as pl
import pytest
from minkscan.cli import main


def scores_file(tmp_path, n: int = 40):
    rng = np.random.default_rng(0)
    path = tmp_path / "scores.parquet"
    pl.DataFrame({"id": [f"d{i}" for i in range(n)], "status": ["ok"] * n, "n_tokens": [9] * n,
                  "minkpp_k20": rng.normal(size=n)}).write_parquet(path)  # fmt: skip
    return path


def calibrate(tmp_path, labels: pl.DataFrame) -> int:
    labels.write_parquet(tmp_path / "labels.parquet")
    labelled = ["--input", str(scores_file(tmp_path)), "--labels", str(tmp_path / "labels.parquet")]
    return main(["calibrate", *labelled, "--output", str(tmp_path / "c.json")])


IDS = [f"d{i}" for i in range(40)]


@pytest.mark.parametrize(
    ("labels", "message"),
    [
        ([0.0] * 30 + [1.0] * 9 + [0.5], "1 are not (e.g. 0.5)"),
        (["0"] * 30 + ["1"] * 8 + ["member", "yes"], "2 are not (e.g. 'member', 'yes')"),
        ([0] * 30 + [1] * 8 + [None, None], "2 are not (e.g. None)"),
        ([2] + [0] * 29 + [1] * 10, "1 are not (e.g. 2)"),
    ],
)
def test_calibrate_refuses_labels_that_are_not_0_1_in_one_line(tmp_path, capsys, labels, message):
    assert calibrate(tmp_path, pl.DataFrame({"id": IDS, "label": labels})) == 2
    err = capsys.readouterr().err.strip()
    assert "labels must be 0/1 or true/false" in err and message in err
    assert len(err.splitlines()) == 1 and not (tmp_path / "c.json").exists()


def test_calibrate_takes_true_false_and_their_text_forms(tmp_path):
    as_bool = pl.DataFrame({"id": IDS, "label": [False] * 30 + [True] * 10})
    assert calibrate(tmp_path, as_bool) == 0
    as_text = pl.DataFrame({"id": IDS, "label": ["false"] * 30 + ["True"] * 5 + ["1"] * 5})
    assert calibrate(tmp_path, as_text) == 0


def test_an_id_labelled_both_ways_is_refused_and_a_repeated_one_counts_once(tmp_path, capsys):
    conflicting = pl.DataFrame({"id": [*IDS, "d0", "d1"], "label": [0] * 30 + [1] * 10 + [1, 1]})
    assert calibrate(tmp_path, conflicting) == 2
    err = capsys.readouterr().err
    assert "2 ids are labelled both member and non-member (e.g. 'd0', 'd1')" in err
    repeated = pl.DataFrame({"id": [*IDS, "d0", "d39"], "label": [0] * 30 + [1] * 10 + [0, 1]})
    assert calibrate(tmp_path, repeated) == 0
    (method,) = json.loads((tmp_path / "c.json").read_text())["methods"].values()
    assert (method["n_nonmembers"], method["n_members"]) == (30, 10)


def test_benchmark_refuses_a_label_of_one_half_before_scoring(tmp_path, capsys):
    path = tmp_path / "data.parquet"
    pl.DataFrame({"text": ["a b c", "d e f"], "label": [0.5, 1.0]}).write_parquet(path)
    assert main(["benchmark", "--input", str(path), "--model", "no-such-model-needed"]) == 2
    err = capsys.readouterr().err
    assert "labels must be 0/1 or true/false; 1 are not (e.g. 0.5)" in err


def test_benchmark_refuses_a_missing_input_in_one_line_before_anything_heavy(tmp_path, capsys):
    code = main(["benchmark", "--input", str(tmp_path / "nope.parquet"), "--output",
                 str(tmp_path / "out")])  # fmt: skip
    assert code == 2
    assert (
        capsys.readouterr().err == f"minkscan benchmark: input not found: {tmp_path}/nope.parquet\n"
    )


def test_integer_ids_in_a_labels_file_match_the_scores_text_ids(tmp_path, capsys):
    scores = tmp_path / "scores.parquet"
    rng = np.random.default_rng(1)
    pl.DataFrame({"id": [str(i) for i in range(40)], "minkpp_k20": rng.normal(size=40)}
                 ).write_parquet(scores)  # fmt: skip
    pl.DataFrame({"id": list(range(40)), "label": [0] * 30 + [1] * 10}).write_parquet(
        tmp_path / "labels.parquet"
    )
    assert main(["calibrate", "--input", str(scores), "--labels", str(tmp_path / "labels.parquet"),
                 "--output", str(tmp_path / "c.json")]) == 0  # fmt: skip
    methods = json.loads((tmp_path / "c.json").read_text())["methods"]
    assert methods["minkpp_k20"]["n_nonmembers"] == 30 and methods["minkpp_k20"]["n_members"] == 10


def test_a_labels_file_covering_some_ids_is_counted_and_named(tmp_path, capsys):
    assert calibrate(tmp_path, pl.DataFrame({"id": IDS[:30], "label": [0] * 25 + [1] * 5})) == 0
    err = capsys.readouterr().err
    assert "labels 30 of 40 scored documents; the other 10 (e.g. 'd30', 'd31', 'd32') are " \
        "left out" in err  # fmt: skip


def test_a_label_column_and_a_labels_file_that_disagree_are_refused_by_count(tmp_path, capsys):
    scores = tmp_path / "scores.parquet"
    rng = np.random.default_rng(2)
    pl.DataFrame({"id": IDS, "label": [0] * 30 + [1] * 10, "minkpp_k20": rng.normal(size=40)}
                 ).write_parquet(scores)  # fmt: skip
    pl.DataFrame({"id": IDS, "label": [1] * 3 + [0] * 27 + [1] * 10}).write_parquet(
        tmp_path / "labels.parquet"
    )
    assert main(["calibrate", "--input", str(scores), "--labels", str(tmp_path / "labels.parquet"),
                 "--output", str(tmp_path / "c.json")]) == 2  # fmt: skip
    err = capsys.readouterr().err.strip()
    assert "and the scores' 'label' column disagree on 3 ids (e.g. 'd0', 'd1', 'd2')" in err
    assert len(err.splitlines()) == 1 and not (tmp_path / "c.json").exists()


def test_conflicting_labels_inside_a_score_files_own_column_are_refused(tmp_path, capsys):
    scores = tmp_path / "scores.parquet"
    rng = np.random.default_rng(3)
    ids = IDS + ["d0", "d1", "d2"]  # three ids scored twice, labelled both ways
    pl.DataFrame({"id": ids, "label": [0] * 30 + [1] * 13, "minkpp_k20": rng.normal(size=43)}
                 ).write_parquet(scores)  # fmt: skip
    assert main(["calibrate", "--input", str(scores), "--output", str(tmp_path / "c.json")]) == 2
    err = capsys.readouterr().err.strip()
    assert "the scores' 'label' column: 3 ids are labelled both member and non-member" in err
    assert len(err.splitlines()) == 1 and not (tmp_path / "c.json").exists()


def test_an_empty_labels_file_is_refused_in_one_line(tmp_path, capsys):
    (tmp_path / "labels.parquet").write_bytes(b"")
    labelled = ["--labels", str(tmp_path / "labels.parquet")]
    assert main(["calibrate", "--input", str(scores_file(tmp_path)), *labelled,
                 "--output", str(tmp_path / "c.json")]) == 2  # fmt: skip
    err = capsys.readouterr().err.strip()
    assert "is not a Parquet score file (0 bytes" in err and len(err.splitlines()) == 1
