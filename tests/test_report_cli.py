"""Through the CLI, as a user audits a test set: `score --keep-columns --token-scores`, then
`calibrate` on the kept label and `report` on the kept group, with no manual join; kept columns
and token scores that cannot work fail in one line before any work."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from helpers import SAMPLE
from minkscan.cli import main
from minkscan.io.score_reader import read_scores


@pytest.fixture(scope="module")
def labelled(tmp_path_factory) -> Path:
    """60 texts of the bundled sample with a label and a source group, as a user's test set."""
    path = tmp_path_factory.mktemp("audit") / "testset.parquet"
    frame = pl.read_parquet(SAMPLE).head(60)
    frame.with_columns(
        pl.when(pl.int_range(pl.len()) % 2 == 0).then(pl.lit("arxiv")).otherwise(pl.lit("wiki"))
        .alias("source_name"),
        (pl.int_range(pl.len()) % 3 == 0).cast(pl.Int8).alias("label"),
    ).write_parquet(path)  # fmt: skip
    return path


@pytest.mark.usefixtures("local_ray")
@pytest.mark.slow
def test_kept_columns_and_token_scores_feed_calibrate_and_report_without_a_join(
    labelled, tiny_llama_dir, tmp_path, capsys
) -> None:
    out = tmp_path / "scores"
    code = main(["score", "--input", str(labelled), "--output", str(out), "--model",
                 str(tiny_llama_dir), "--keep-columns", "source_name,label", "--token-scores",
                 "--k", "20"])  # fmt: skip
    assert code == 0, capsys.readouterr().err
    scores = pl.from_arrow(read_scores(str(out)).table).sort("row")
    original = pl.read_parquet(labelled)
    assert scores["label"].to_list() == original["label"].to_list()
    assert scores["source_name"].to_list() == original["source_name"].to_list()
    assert scores["text"].to_list() == original["text"].to_list()
    for row in scores.head(5).iter_rows(named=True):  # the same pass: tokens give the score
        z = np.sort(np.asarray(row["token_z"], dtype=np.float64))
        k = max(1, len(z) * 20 // 100)
        assert z[:k].mean() == pytest.approx(row["minkpp_k20"], abs=1e-5)
        assert len(row["token_start"]) == len(z) == row["n_tokens"]
        assert all(0 <= s <= e <= len(row["text"]) for s, e in
                   zip(row["token_start"], row["token_end"], strict=True))  # fmt: skip

    cal = tmp_path / "cal.json"
    assert main(["calibrate", "--input", str(out), "--output", str(cal)]) == 0
    calibration = json.loads(cal.read_text())
    assert calibration["model"] == str(tiny_llama_dir)
    assert calibration["methods"]["minkpp_k20"]["n_members"] == int(original["label"].sum())
    capsys.readouterr()
    report_dir = tmp_path / "report"
    assert main(["report", "--input", str(out), "--calibration", str(cal), "--group-column",
                 "source_name", "--output", str(report_dir), "--top", "5"]) == 0  # fmt: skip
    printed = capsys.readouterr()
    assert "group 'arxiv'" in printed.out and "group 'wiki'" in printed.out
    # --top given: the top documents in the terminal too, with the words behind each score.
    top = printed.out.split("Most member-like documents (minkpp_k20; flagged when score > ")[1]
    assert [line.split(".")[0].strip() for line in top.splitlines()[1:6]] == list("12345")
    assert "lowest-z words: " in top.splitlines()[1]
    assert "too few calibration non-members" in printed.err  # 40 non-members at 5%
    page = (report_dir / "report.html").read_text()
    assert page.count("<mark>") >= 5  # lowest-k% tokens of each top document
    assert str(tiny_llama_dir) in page

    # The same scores make the detection tables: read as they are, nothing scored again.
    tables_dir = tmp_path / "tables"
    assert main(["benchmark", "--input", str(out), "--group-column", "source_name",
                 "--output", str(tables_dir)]) == 0  # fmt: skip
    printed = capsys.readouterr()
    assert "Scores read as they are (no forward pass)" in printed.out
    tables = json.loads((tables_dir / "tables.json").read_text())
    (minkpp,) = [row for row in tables["main"] if row["method"] == "Min-K%++"]
    members = original.filter(pl.col("source_name") == "arxiv")["label"].sum()
    assert minkpp["n_arxiv"] == f"{members}/{30 - members}"
    assert minkpp["n_all"] == f"{original['label'].sum()}/{60 - original['label'].sum()}"
    assert "group arxiv has 10 members and 20 non-members" in printed.err  # under 30 each
    assert tables["main"][-1]["method"].startswith("Blind baseline")  # trained on kept texts
    assert tables["forward_passes"] == {}


def test_kept_columns_that_are_missing_or_clash_fail_in_one_line_before_work(
    labelled, tmp_path, capsys
) -> None:
    base = ["score", "--input", str(labelled), "--output", str(tmp_path / "out")]
    assert main([*base, "--keep-columns", "label,nope"]) == 2
    assert "has no column(s) ['nope']" in capsys.readouterr().err
    assert main([*base, "--keep-columns", "mean_logprob"]) == 2
    assert "would overwrite the score file's own column" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_report_on_scores_without_the_group_column_says_how_to_keep_it(tmp_path, capsys):
    scores = pl.DataFrame({"id": ["a", "b", "c"], "status": ["ok"] * 3, "n_tokens": [9] * 3,
                           "minkpp_k20": [0.1, 0.2, 0.3], "label": [0, 0, 1]})  # fmt: skip
    scores.write_parquet(tmp_path / "s.parquet")
    assert main(["calibrate", "--nonmembers", str(tmp_path / "s.parquet"),
                 "--output", str(tmp_path / "c.json")]) == 0  # fmt: skip
    code = main(["report", "--input", str(tmp_path / "s.parquet"), "--calibration",
                 str(tmp_path / "c.json"), "--group-column", "dataset", "--output",
                 str(tmp_path / "r")])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2 and "--keep-columns dataset" in err and "Traceback" not in err


def test_calibrate_and_report_write_to_s3_where_asked(tmp_path, capsys, s3_env):
    endpoint, client = s3_env
    rng = np.random.default_rng(0)
    pl.DataFrame({"id": [f"d{i}" for i in range(40)], "status": ["ok"] * 40,
                  "n_tokens": [9] * 40, "minkpp_k20": rng.normal(size=40),
                  "label": [0] * 30 + [1] * 10}).write_parquet(tmp_path / "s.parquet")  # fmt: skip
    assert main(["calibrate", "--input", str(tmp_path / "s.parquet"),
                 "--output", "s3://corpus/audit/cal.json"]) == 0  # fmt: skip
    assert "wrote s3://corpus/audit/cal.json" in capsys.readouterr().out
    assert (
        main(
            [
                "report",
                "--input",
                str(tmp_path / "s.parquet"),
                "--calibration",
                "s3://corpus/audit/cal.json",
                "--output",
                "s3://corpus/audit/report",
            ]
        )
        == 0
    )
    assert "wrote s3://corpus/audit/report/report.html" in capsys.readouterr().out
    keys = {o["Key"] for o in client.list_objects_v2(Bucket="corpus")["Contents"]}
    assert {"audit/cal.json", "audit/report/report.html", "audit/report/report.md",
            "audit/report/report.json"} <= keys  # fmt: skip
    assert not any(Path.cwd().glob("s3:*"))  # nothing landed in a local folder named s3:


def test_a_misspelt_group_column_or_method_gets_a_did_you_mean_and_the_valid_names(
    tmp_path, capsys
):
    scores = pl.DataFrame({"id": ["a", "b", "c"], "status": ["ok"] * 3, "n_tokens": [9] * 3,
                           "minkpp_k20": [0.1, 0.2, 0.3], "mean_logprob": [-1.0, -2.0, -3.0],
                           "dataset": ["x", "y", "x"]})  # fmt: skip
    scores.write_parquet(tmp_path / "s.parquet")
    assert main(["calibrate", "--nonmembers", str(tmp_path / "s.parquet"),
                 "--output", str(tmp_path / "c.json")]) == 0  # fmt: skip
    base = ["report", "--input", str(tmp_path / "s.parquet"), "--calibration",
            str(tmp_path / "c.json"), "--output", str(tmp_path / "r")]  # fmt: skip
    capsys.readouterr()
    assert main([*base, "--group-column", "datset"]) == 2
    assert "did you mean 'dataset'?" in capsys.readouterr().err
    assert main([*base, "--method", "minkpp_k25"]) == 2
    err = capsys.readouterr().err
    assert "did you mean 'minkpp_k20'?" in err and "both have: minkpp_k20, mean_logprob" in err
