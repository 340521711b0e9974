"""The report a person decides from: verdict first on a declared primary method, Holm-adjusted
exploratory methods, evidence excerpts with the lowest-k% tokens marked, warnings for a thin
calibration set and for a length confound, one flagging rule, escaped Markdown, and score
outputs read from S3 by calibrate and report."""

from __future__ import annotations

import html
import json
from pathlib import Path

import numpy as np
import polars as pl
import pyarrow.fs as pafs
import pytest
from minkscan.calibration import calibrate, load_calibration
from minkscan.cli import main
from minkscan.reporting import build_report, write_report
from minkscan.reporting.evidence import excerpt, lowest_k
from minkscan.reporting.render import markdown_cell
from minkscan.statistics import holm

REPORTS_PAGE = Path(__file__).resolve().parents[1] / "docs" / "reports.md"


def frame(rng, n_non: int, n_mem: int, group: str, lengths=None, shift: float = 2.0):
    """Rows of one group: non-members ~ N(0,1), members ~ N(shift,1); loss and zlib follow."""
    n = n_non + n_mem
    values = np.concatenate([rng.normal(0, 1, n_non), rng.normal(shift, 1, n_mem)])
    return pl.DataFrame(
        {
            "id": [f"{group}-{i}" for i in range(n)],
            "group": [group] * n,
            "status": ["ok"] * n,
            "n_tokens": lengths if lengths is not None else [64] * n,
            "minkpp_k20": values,
            "mean_logprob": values + rng.normal(0, 1, n),
            "zlib": rng.normal(0, 1, n),
            "label": [0] * n_non + [1] * n_mem,
        }
    )


@pytest.fixture(scope="module")
def calibrated():
    rng = np.random.default_rng(11)
    cal = frame(rng, 4000, 1000, "cal")
    return calibrate(
        cal.filter(pl.col("label") == 0), cal.filter(pl.col("label") == 1), n_resamples=50
    )


@pytest.fixture(scope="module")
def audited():
    rng = np.random.default_rng(12)
    return pl.concat([frame(rng, 1500, 0, "clean"), frame(rng, 1000, 500, "dirty")])


def test_holm_adjusts_step_down_and_keeps_input_order() -> None:
    assert holm([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])
    assert holm([0.5, 0.001]) == pytest.approx([0.5, 0.002])


def test_the_verdict_rests_on_the_primary_method_with_holm_across_groups(
    calibrated, audited
) -> None:
    report = build_report(audited.lazy(), calibrated, group_column="group", model="m")
    assert report.primary_method == "minkpp_k20"
    assert [row.group for row in report.primary] == ["clean", "dirty"]
    clean, dirty = report.primary
    assert dirty.significant(0.05) and not clean.significant(0.05)
    assert dirty.p_adjusted == pytest.approx(min(1.0, 2 * dirty.p_value))
    assert report.headline().startswith("Evidence of contamination at the 5% level in 1 of 2")
    assert "'dirty'" in report.headline()
    assert report.sentence(clean).startswith("No evidence of contamination in group 'clean'")
    assert "estimated contaminated fraction" in report.sentence(dirty)
    assert dirty.flagged_low < dirty.flagged_fraction < dirty.flagged_high


def test_other_methods_are_exploratory_with_holm_over_all_their_tests(calibrated, audited):
    report = build_report(audited.lazy(), calibrated, group_column="group")
    assert {row.method for row in report.exploratory} == {"mean_logprob", "zlib"}
    raw = [row.p_value for row in report.exploratory]
    assert [row.p_adjusted for row in report.exploratory] == pytest.approx(holm(raw))
    declared = build_report(
        audited.lazy(), calibrated, group_column="group", primary_method="mean_logprob"
    )
    assert declared.primary_method == "mean_logprob"
    assert {row.method for row in declared.exploratory} == {"minkpp_k20", "zlib"}


def test_a_score_equal_to_the_threshold_is_not_flagged_and_the_docs_say_so(calibrated) -> None:
    threshold = calibrated.methods["minkpp_k20"].threshold
    at = pl.DataFrame({"id": ["a", "b"], "status": ["ok"] * 2, "minkpp_k20": [threshold] * 2})
    report = build_report(at.lazy(), calibrated)
    assert report.primary[0].n_flagged == 0
    assert "score > threshold" in REPORTS_PAGE.read_text()
    assert ">=" not in REPORTS_PAGE.read_text()


def test_html_opens_with_the_verdict_and_hides_other_methods_in_a_fold(
    calibrated, audited, tmp_path
) -> None:
    report = build_report(audited.lazy(), calibrated, group_column="group", model="my-model")
    page = Path(write_report(report, tmp_path)[0]).read_text()
    body = page.split("<body>")[1]
    assert body.index('class="verdict yes"') < body.index("<table")
    assert "my-model" in body and "minkpp_k20" in body
    fold = body.split("<details>")[1]
    assert "mean_logprob" in fold and "zlib" in fold
    assert "mean_logprob" not in body.split("<details>")[0].split("ROC curves")[0]
    assert body.count("data:image/png;base64,") == 3  # histogram, flagged per group, ROC
    assert "e-0" not in body.split("<details>")[0] or "< 1e-10" in body  # rounded numbers


def test_too_few_nonmembers_are_warned_in_report_and_cli(audited, tmp_path, capsys) -> None:
    rng = np.random.default_rng(5)
    small = frame(rng, 100, 0, "cal")
    small.write_parquet(tmp_path / "nonmembers.parquet")
    audited.write_parquet(tmp_path / "scores.parquet")
    cal = tmp_path / "cal.json"
    assert main(["calibrate", "--nonmembers", str(tmp_path / "nonmembers.parquet"),
                 "--output", str(cal)]) == 0  # fmt: skip
    assert "too few calibration non-members" in capsys.readouterr().err
    assert main(["report", "--input", str(tmp_path / "scores.parquet"), "--calibration",
                 str(cal), "--output", str(tmp_path / "out")]) == 0  # fmt: skip
    captured = capsys.readouterr()
    assert "warning: too few calibration non-members for 'minkpp_k20': 100" in captured.err
    assert "at least 20, i.e. 400 non-members" in captured.err
    assert captured.out.startswith("No evidence") or captured.out.startswith("Evidence")
    page = (tmp_path / "out" / "report.html").read_text()
    assert "Warning: too few calibration non-members" in page
    summary = json.loads((tmp_path / "out" / "report.json").read_text())
    assert summary["flagged_when"] == "score > threshold" and summary["warnings"]


def test_a_length_confound_is_warned_and_a_length_matched_rate_removes_it() -> None:
    """Scores grow with length and nobody is a member: long audited documents exceed the
    overall chance rate, but not the length-matched one."""
    rng = np.random.default_rng(3)

    def by_length(lengths: np.ndarray, group: str) -> pl.DataFrame:
        values = 0.01 * lengths + rng.normal(0, 1, lengths.size)
        n = lengths.size
        ids = [f"{group}{i}" for i in range(n)]
        return pl.DataFrame({"id": ids, "group": [group] * n, "status": ["ok"] * n,
                             "n_tokens": lengths, "minkpp_k20": values})  # fmt: skip

    nonmembers = by_length(rng.integers(20, 400, 6000), "cal")
    calibration = calibrate(nonmembers, n_resamples=20)
    long_docs = by_length(rng.integers(300, 400, 3000), "long")
    report = build_report(long_docs.lazy(), calibration, group_column="group")
    assert report.primary[0].significant(0.05)  # length alone "finds" contamination
    assert any("longer than the calibration non-members" in w for w in report.warnings)
    assert "Kolmogorov-Smirnov" in report.lengths.warning
    matched = report.lengths.matched[0]
    assert matched.matched_chance > report.primary[0].expected_fraction
    assert matched.p_value > 0.01
    assert "document length may explain it" in report.sentence(report.primary[0])
    same = build_report(by_length(rng.integers(20, 400, 3000), "same").lazy(), calibration)
    assert same.lengths is not None and not same.lengths.differs
    assert not any("longer" in w or "shorter" in w for w in same.warnings)


def test_lowest_k_tokens_are_marked_in_a_window_holding_most_of_them() -> None:
    z = np.array([0.5, -3.0, 1.0, -2.0, 0.1, 2.0, 0.3, 0.2, 0.0, 1.5])
    assert lowest_k(z, 20).tolist() == [1, 3]
    assert lowest_k(z, 5).tolist() == [1]  # at least one token
    text = "aaaa " * 200 + "SUSPICIOUS tokens here " + "bbbb " * 200
    start = text.index("SUSPICIOUS")
    segments, before, after = excerpt(text, [(start, start + 10), (start + 11, start + 17)])
    assert before and after
    assert [s for s, marked in segments if marked] == ["SUSPICIOUS", "tokens"]
    assert sum(len(s) for s, _ in segments) == 600


def test_markdown_cells_escape_markdown_and_html(calibrated, tmp_path) -> None:
    assert markdown_cell("<script>|*x*") == "&lt;script&gt;\\|\\*x\\*"
    rows = pl.DataFrame({"id": ["a|b", "c"], "group": ["<b>g|1</b>", "[x](y)"],
                         "status": ["ok"] * 2, "minkpp_k20": [5.0, -5.0]})  # fmt: skip
    report = build_report(rows.lazy(), calibrated, group_column="group")
    markdown = Path(write_report(report, tmp_path)[1]).read_text()
    assert "<b>" not in markdown and "&lt;b&gt;g\\|1&lt;/b&gt;" in markdown
    tables: list[list[int]] = [[]]
    for line in markdown.splitlines():
        if line.startswith("|"):
            tables[-1].append(line.replace("\\|", "").count("|"))
        elif tables[-1]:
            tables.append([])
    assert len(tables) >= 2 and all(len(set(pipes)) <= 1 for pipes in tables)  # no cell split


def test_calibrate_and_report_read_scores_from_s3(calibrated, audited, s3_env, tmp_path,
                                                  capsys) -> None:  # fmt: skip
    endpoint, client = s3_env
    fs = pafs.S3FileSystem(endpoint_override=endpoint, scheme="http", access_key="testing",
                           secret_key="testing", region="us-east-1")  # fmt: skip
    for key, table in {"audit/scores.parquet": audited, "cal/scores.parquet": audited}.items():
        with fs.open_output_stream(f"corpus/{key}") as stream:
            table.write_parquet(stream)
    cal = tmp_path / "cal.json"
    assert main(["calibrate", "--input", "s3://corpus/cal/scores.parquet",
                 "--output", str(cal)]) == 0  # fmt: skip
    assert load_calibration(cal).methods["minkpp_k20"].n_members == 500
    out = str(tmp_path / "r")
    assert main(["report", "--input", "s3://corpus/audit/scores.parquet", "--calibration",
                 str(cal), "--group-column", "group", "--output", out]) == 0  # fmt: skip
    assert "group 'dirty'" in capsys.readouterr().out


def test_scores_and_calibration_of_different_models_are_warned(calibrated, audited) -> None:
    from dataclasses import replace

    other = replace(calibrated, model="model-b")
    report = build_report(audited.lazy(), other, group_column="group", model="model-a")
    assert any("'model-a' but the calibration from 'model-b'" in w for w in report.warnings)
    same = build_report(audited.lazy(), other, group_column="group", model="model-b")
    assert not any("thresholds do not transfer" in w for w in same.warnings)


def test_an_at_least_note_sits_with_the_rows_it_speaks_of(audited, tmp_path) -> None:
    """zlib, inverted here, has a calibration TPR below its FPR: its exploratory estimates are
    lower bounds and say so beside them; the primary method's are not, so its table has no
    note."""
    rng = np.random.default_rng(13)
    cal = frame(rng, 4000, 1000, "cal").with_columns((-pl.col("minkpp_k20")).alias("zlib"))
    calibrated = calibrate(
        cal.filter(pl.col("label") == 0), cal.filter(pl.col("label") == 1), n_resamples=50
    )
    report = build_report(audited.lazy(), calibrated, group_column="group")
    assert not report.at_least and report.exploratory_at_least
    page = html.unescape(Path(write_report(report, tmp_path)[0]).read_text())
    before, fold = page.split("<details>")
    assert "'at least'" not in before
    assert "'at least': where a method's calibration TPR is unknown" in fold
