"""The blind baseline: a text-only classifier tells an audited group from the calibration
non-members when they come from different sources, and the group's verdict is then
inconclusive wherever a verdict appears (headline, terminal, HTML, Markdown, JSON,
`--fail-above`'s own exit status); random halves of one set keep their verdict; without
texts the verdict says the shift was not checked; the calibration's own documents audited
are called out. Benchmark
tables carry it as a row and mark the methods that do not beat it."""

from __future__ import annotations

import html
import json

import numpy as np
import polars as pl
import pytest
from helpers import WIKIMIA64
from minkscan.cli import main
from minkscan.evaluation.blind import BLIND, blind_auroc, with_blind_scores
from minkscan.evaluation.tables import BLIND_ROW, NOT_ABOVE_BLIND, metric_table, to_markdown

CAUTION = "may reflect distribution shift, not training"


def wikimia(label: int) -> list[str]:
    """WikiMIA-24's texts of one label, each once (the file repeats some)."""
    data = pl.read_parquet(WIKIMIA64)
    return list(dict.fromkeys(data.filter(pl.col("label") == label)["text"].to_list()))


@pytest.mark.slow
def test_the_blind_baseline_tells_sources_apart_and_not_random_halves() -> None:
    old, new = wikimia(1), wikimia(0)  # events before 2017, events of 2024
    across = blind_auroc(old[:300], new[:300], n_resamples=200)
    halves = blind_auroc(new[:300], new[300:600], n_resamples=200)
    assert across.auroc.low > 0.9 and across.n_positive == across.n_negative == 300
    assert halves.auroc.low < 0.6 < across.auroc.low
    assert blind_auroc(["too", "few"], new) is None


def score_file(path, texts: list[str], seed: int, signal: float = 0.0) -> None:
    """Scores with no model signal (the same normal distribution whatever the text), moved
    up by ``signal``: a flagged fraction far above chance."""
    rng = np.random.default_rng(seed)
    pl.DataFrame(
        {"id": [f"{path.stem}-{i}" for i in range(len(texts))], "text": texts,
         "n_tokens": [64] * len(texts), "minkpp_k20": rng.normal(signal, 1, len(texts))}
    ).write_parquet(path)  # fmt: skip


def _report(tmp_path, name: str, *extra: str) -> list[str]:
    return ["report", "--input", str(tmp_path / f"{name}.parquet"), "--calibration",
            str(tmp_path / "cal.json"), "--output", str(tmp_path / f"report-{name}"),
            *extra]  # fmt: skip


@pytest.fixture
def shifted_sets(tmp_path):
    """Calibration non-members from 2024; an audited set of pre-2017 events and one of other
    2024 events, both scored far above chance (so a verdict would say contaminated)."""
    old, new = wikimia(1), wikimia(0)
    score_file(tmp_path / "calibration.parquet", new[:400], seed=0)
    score_file(tmp_path / "other-source.parquet", old[:300], seed=1, signal=1.0)
    score_file(tmp_path / "same-source.parquet", new[400:], seed=2, signal=1.0)
    assert main(["calibrate", "--nonmembers", str(tmp_path / "calibration.parquet"),
                 "--output", str(tmp_path / "cal.json")]) == 0  # fmt: skip
    return tmp_path


@pytest.mark.slow
def test_a_group_the_text_alone_tells_apart_is_inconclusive_everywhere_a_verdict_appears(
    shifted_sets, capsys
) -> None:
    tmp_path = shifted_sets
    capsys.readouterr()
    assert main(_report(tmp_path, "other-source", "--fail-above", "0.05")) == 3
    captured = capsys.readouterr()
    out = tmp_path / "report-other-source"
    summary = json.loads((out / "report.json").read_text())
    group = summary["groups"][0]
    assert summary["decision"] == group["decision"] == "inconclusive"
    headline = "Inconclusive at the 5% level (minkpp_k20); inconclusive in 'all': the text alone"
    assert summary["verdict"].startswith(headline)
    assert group["verdict"].startswith("Inconclusive for group 'all' at the 5% level")
    assert group["p_adjusted"] < 1e-10  # the flagged fraction alone would have said contaminated
    shift = group["shift"]
    assert shift["checked"] and shift["fired"] and shift["auroc_low"] > 0.6
    assert shift["auroc"] == summary["blind_baseline"]["groups"]["all"]["auroc"]["value"]
    assert group["contamination"] is None and "by text alone" in group["contamination_note"]
    assert "Evidence of contamination" not in captured.out
    assert captured.out.startswith(summary["verdict"])
    assert f"  {group['verdict']}" in captured.out
    assert "group 'all' is inconclusive" in captured.err and "exit 3" in captured.err
    markdown = (out / "report.md").read_text()
    assert f"**{summary['verdict']}**" in html.unescape(markdown.replace("\\", ""))
    row = next(line for line in markdown.splitlines() if line.startswith("| all |"))
    assert row.endswith("| inconclusive |") and "not estimated" in row
    page = (out / "report.html").read_text()
    assert '<div class="verdict unsure">Inconclusive at the 5% level' in page
    assert "<td>inconclusive</td>" in page and "contaminated" not in page.split("<dl>")[0]


def test_a_group_of_the_calibrations_kind_keeps_its_verdict_and_fails_the_gate(
    shifted_sets, capsys
) -> None:
    tmp_path = shifted_sets
    capsys.readouterr()
    assert main(_report(tmp_path, "same-source", "--fail-above", "0.05")) == 1
    summary = json.loads((tmp_path / "report-same-source" / "report.json").read_text())
    group = summary["groups"][0]
    assert summary["decision"] == group["decision"] == "contaminated"
    assert summary["verdict"].startswith("Evidence of contamination at the 5% level in 1 of 1")
    assert group["shift"]["checked"] and not group["shift"]["fired"]
    assert group["contamination"] is not None
    assert "is contaminated" in capsys.readouterr().err


def test_without_texts_every_verdict_says_the_shift_was_not_checked(shifted_sets, capsys) -> None:
    tmp_path = shifted_sets
    pl.read_parquet(tmp_path / "other-source.parquet").drop("text").write_parquet(
        tmp_path / "no-text.parquet"
    )
    capsys.readouterr()
    assert main(_report(tmp_path, "no-text", "--fail-above", "0.05")) == 1
    summary = json.loads((tmp_path / "report-no-text" / "report.json").read_text())
    not_checked = "distribution shift not checked (the scores hold no text"
    assert summary["verdict"].startswith("Evidence of contamination")
    assert not_checked in summary["verdict"]
    assert (
        "Distribution shift not checked: the scores hold no text" in summary["groups"][0]["verdict"]
    )
    assert summary["groups"][0]["shift"] == summary["groups"][0]["shift"] | {
        "checked": False, "fired": False, "auroc": None}  # fmt: skip
    assert not_checked in capsys.readouterr().out


def test_auditing_the_calibrations_own_documents_is_called_out(shifted_sets, capsys) -> None:
    tmp_path = shifted_sets
    capsys.readouterr()
    assert main(_report(tmp_path, "calibration")) == 0
    summary = json.loads((tmp_path / "report-calibration" / "report.json").read_text())
    group = summary["groups"][0]
    assert group["shift"]["texts_in_calibration"] == 400 and group["shift"]["same_texts"]
    assert group["shift"]["auroc_high"] < 0.4  # far below chance: the same texts on both sides
    assert "looks like (part of) the calibration set: 400 of its texts" in group["verdict"]
    assert "far below chance" in group["verdict"]
    assert "looks like (part of) the calibration set" in capsys.readouterr().out


@pytest.mark.slow
def test_dataset_inference_against_a_heldout_set_told_apart_by_text_is_not_valid(
    shifted_sets, capsys
) -> None:
    """Held out: 2024 events; audited: pre-2017 events, scored higher (DI would find them)."""
    tmp_path = shifted_sets
    old, new = wikimia(1), wikimia(0)
    score_file(tmp_path / "heldout-other.parquet", new[400:], seed=3)
    score_file(tmp_path / "heldout-same.parquet", old[300:600], seed=3)
    capsys.readouterr()
    assert main(_report(tmp_path, "other-source", "--heldout",
                        str(tmp_path / "heldout-other.parquet"))) == 0  # fmt: skip
    printed = capsys.readouterr().out
    summary = json.loads((tmp_path / "report-other-source" / "report.json").read_text())
    (result,) = summary["dataset_inference"]["results"]
    assert result["median_p"] < 1e-10 and not result["significant"]
    assert result["decision"] == "not valid" and result["blind"]["auroc"]["low"] > 0.6
    assert result["verdict"].startswith("Dataset inference for group 'all' is not valid: the "
                                        "held-out set is distinguishable from the audited set "
                                        "by text alone")  # fmt: skip
    assert result["verdict"] in printed
    # A held-out set of the same kind of text: the check passes and the result stands.
    assert main(_report(tmp_path, "other-source", "--heldout",
                        str(tmp_path / "heldout-same.parquet"))) == 0  # fmt: skip
    summary = json.loads((tmp_path / "report-other-source" / "report.json").read_text())
    (result,) = summary["dataset_inference"]["results"]
    assert result["decision"] == "evidence" and result["blind"]["auroc"]["low"] < 0.6
    assert "the text alone does not tell them apart" in result["verdict"]


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
