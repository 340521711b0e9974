"""The blind baseline: a text-only classifier tells an audited group from the calibration
non-members when they come from different sources, and the verdict then carries a caution
(HTML, Markdown, JSON and the terminal); random halves of one set carry none. Benchmark
tables carry it as a row and mark the methods that do not beat it."""

from __future__ import annotations

import json

import numpy as np
import polars as pl
from helpers import WIKIMIA64
from minkscan.cli import main
from minkscan.evaluation.blind import BLIND, blind_auroc, with_blind_scores
from minkscan.evaluation.tables import BLIND_ROW, NOT_ABOVE_BLIND, metric_table, to_markdown

CAUTION = "may reflect distribution shift, not training"


def wikimia(label: int) -> list[str]:
    data = pl.read_parquet(WIKIMIA64)
    return data.filter(pl.col("label") == label)["text"].to_list()


def score_file(path, texts: list[str], seed: int) -> None:
    """Scores with no model signal: the same normal distribution whatever the text."""
    rng = np.random.default_rng(seed)
    pl.DataFrame(
        {"id": [f"{path.stem}-{i}" for i in range(len(texts))], "text": texts,
         "n_tokens": [64] * len(texts), "minkpp_k20": rng.normal(0, 1, len(texts))}
    ).write_parquet(path)  # fmt: skip


def test_the_blind_baseline_tells_sources_apart_and_not_random_halves() -> None:
    old, new = wikimia(1), wikimia(0)  # events before 2017, events of 2024
    across = blind_auroc(old[:300], new[:300], n_resamples=200)
    halves = blind_auroc(new[:300], new[300:600], n_resamples=200)
    assert across.auroc.low > 0.9 and across.n_positive == across.n_negative == 300
    assert halves.auroc.low < 0.6 < across.auroc.low
    assert blind_auroc(["too", "few"], new) is None


def test_a_group_from_another_source_gets_a_caution_everywhere(tmp_path, capsys) -> None:
    old, new = wikimia(1), wikimia(0)
    score_file(tmp_path / "calibration.parquet", new[:400], seed=0)
    score_file(tmp_path / "other-source.parquet", old[:300], seed=1)
    score_file(tmp_path / "same-source.parquet", new[400:698], seed=2)
    assert main(["calibrate", "--nonmembers", str(tmp_path / "calibration.parquet"),
                 "--output", str(tmp_path / "cal.json")]) == 0  # fmt: skip
    for name, cautioned in (("other-source", True), ("same-source", False)):
        capsys.readouterr()
        out = tmp_path / f"report-{name}"
        report = ["report", "--input", str(tmp_path / f"{name}.parquet"),
                  "--calibration", str(tmp_path / "cal.json"), "--output", str(out)]  # fmt: skip
        assert main(report) == 0
        terminal = capsys.readouterr().out
        summary = json.loads((out / "report.json").read_text())
        pages = {
            "terminal": terminal,
            "html": (out / "report.html").read_text(),
            "markdown": (out / "report.md").read_text(),
            "json": summary["groups"][0]["verdict"],
        }
        for page, text in pages.items():
            assert (CAUTION in text) == cautioned, (name, page)
        # The blind AUROC is shown beside the verdict either way.
        assert "Blind baseline (text only, no model)" in terminal
        blind = summary["blind_baseline"]["groups"]["all"]["auroc"]
        assert (blind["low"] > 0.6) == cautioned, blind


def test_without_texts_the_report_says_why_there_is_no_blind_baseline(tmp_path, capsys) -> None:
    new = wikimia(0)
    score_file(tmp_path / "calibration.parquet", new[:100], seed=0)
    pl.read_parquet(tmp_path / "calibration.parquet").drop("text").write_parquet(
        tmp_path / "audit.parquet"
    )
    main(["calibrate", "--nonmembers", str(tmp_path / "calibration.parquet"),
          "--output", str(tmp_path / "cal.json")])  # fmt: skip
    capsys.readouterr()
    assert main(["report", "--input", str(tmp_path / "audit.parquet"), "--calibration",
                 str(tmp_path / "cal.json"), "--output", str(tmp_path / "r")]) == 0  # fmt: skip
    assert "Blind baseline not run: the scores hold no text" in capsys.readouterr().out


def test_benchmark_tables_carry_the_blind_row_and_mark_methods_that_do_not_beat_it() -> None:
    # Labels drawn at random over texts of one source: the text alone tells nothing.
    rng = np.random.default_rng(0)
    data = pl.DataFrame({"text": wikimia(0)[:300], "group": "length64",
                         "label": rng.permutation([0, 1] * 150)})  # fmt: skip
    labelled = with_blind_scores(data, "text", "label", "group").with_columns(
        (pl.Series(rng.normal(0, 1, 300)) - pl.col("label")).alias("inverted"),
        (pl.Series(rng.normal(0, 1, 300)) + 3 * pl.col("label")).alias("oracle"),
    )
    table = metric_table(labelled, {"inverted": "inverted", "oracle": "oracle", BLIND_ROW: BLIND})
    marks = dict(zip(table["method"], table[NOT_ABOVE_BLIND], strict=True))
    assert marks == {"inverted": "length64", "oracle": "", BLIND_ROW: ""}
    assert 0.35 < table.filter(pl.col("method") == BLIND_ROW)["auroc_length64"][0] < 0.65
    assert f"| {BLIND_ROW} |" in to_markdown(table)
