"""A report whose numbers agree with its verdict: the gate fails only on the verdict's own
evidence, an interval that says nothing says so, 'at least' is explained once, every warning
points at something shown, flagged documents are marked with digits that tell score and
threshold apart, and highlights are whole words."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from minkscan.calibration import calibrate
from minkscan.cli import main
from minkscan.reporting import build_report, write_report
from minkscan.reporting.evidence import whole_words
from minkscan.reporting.groups import NOT_ESTIMABLE
from minkscan.reporting.render import distinct_digits


def frame(values, group: str, lengths=None) -> pl.DataFrame:
    n = len(values)
    return pl.DataFrame({
        "id": [f"{group}-{i}" for i in range(n)], "group": [group] * n,
        "status": ["ok"] * n, "n_tokens": lengths if lengths is not None else [40] * n,
        "minkpp_k20": np.asarray(values, dtype=np.float64),
    })  # fmt: skip


@pytest.fixture(scope="module")
def nonmembers() -> pl.DataFrame:
    return frame(np.random.default_rng(0).normal(0, 1, 2000), "cal")


def test_the_gate_fails_only_groups_that_are_significant_with_a_high_lower_bound(
    nonmembers, tmp_path
):
    rng = np.random.default_rng(1)
    scored = pl.concat([
        frame(rng.normal(0, 1, 400), "clean"),
        frame([3.0, 2.9, -1.0, 0.2, -0.5, 0.1, -0.3, 0.4], "tiny"),  # 2 of 8 flagged: p ~ 0.06
        frame(np.concatenate([rng.normal(0, 1, 1500), rng.normal(4, 1, 500)]), "dirty"),
    ])  # fmt: skip
    scored.write_parquet(tmp_path / "scores.parquet")
    calibrate(nonmembers, n_resamples=50).write(str(tmp_path / "cal.json"))
    args = ["report", "--input", str(tmp_path / "scores.parquet"), "--calibration",
            str(tmp_path / "cal.json"), "--group-column", "group", "--output",
            str(tmp_path / "r")]  # fmt: skip
    report = build_report(
        pl.scan_parquet(tmp_path / "scores.parquet"),
        calibrate(nonmembers, n_resamples=50),
        group_column="group",
    )
    rows = {row.group: row for row in report.primary}
    assert rows["tiny"].contamination > 0.15 and not rows["tiny"].significant(0.05)
    assert [row.group for row in report.exceeding(0.05)] == ["dirty"]
    assert main([*args, "--fail-above", "0.05"]) == 1
    assert main([*args, "--fail-above", "0.9"]) == 0  # dirty's lower bound is below 90%


def test_an_interval_spanning_nearly_everything_reads_not_estimable(nonmembers, tmp_path):
    members = frame(np.random.default_rng(2).normal(0.3, 1, 12), "members")  # TPR ~ FPR
    calibration = calibrate(nonmembers, members, n_resamples=50)
    report = build_report(
        pl.LazyFrame(frame([2.5, 0.0, -0.3, 0.1], "few")), calibration, group_column="group"
    )
    (row,) = report.primary
    assert not row.estimable and row.estimate() == NOT_ESTIMABLE
    page, markdown, summary, *_ = (Path(p).read_text() for p in write_report(report, tmp_path)[:3])
    assert NOT_ESTIMABLE in page and NOT_ESTIMABLE.replace("/", "/") in markdown
    assert "100.0% [0.0%, 100.0%]" not in page + markdown
    # One story in every output: JSON says null with the reason, never 1.0 [0, 1].
    (group,) = json.loads(summary)["groups"]
    assert (group["contamination"], group["contamination_low"], group["contamination_high"]) == (
        None, None, None)  # fmt: skip
    assert group["contamination_note"] == NOT_ESTIMABLE


def test_at_least_is_explained_once_where_it_appears(nonmembers, tmp_path):
    rng = np.random.default_rng(3)
    scored = frame(np.concatenate([rng.normal(0, 1, 1500), rng.normal(4, 1, 500)]), "dirty")
    report = build_report(
        pl.LazyFrame(scored), calibrate(nonmembers, n_resamples=50), group_column="group"
    )
    assert report.primary[0].estimate().startswith("at least ")
    page, markdown, *_ = (Path(p).read_text() for p in write_report(report, tmp_path)[:3])
    assert page.count("the TPR is unknown") == 1 and markdown.count("the TPR is unknown") == 1
    assert "the calibration has no members, so the TPR is unknown" in page


def test_the_at_least_note_says_what_is_true_of_a_calibration_with_members(nonmembers, tmp_path):
    members = frame(np.random.default_rng(5).normal(-1, 1, 40), "members")  # TPR below FPR
    calibration = calibrate(nonmembers, members, n_resamples=50)
    rng = np.random.default_rng(6)
    scored = frame(np.concatenate([rng.normal(0, 1, 1500), rng.normal(4, 1, 500)]), "dirty")
    report = build_report(pl.LazyFrame(scored), calibration, group_column="group")
    assert report.at_least
    note = report.at_least_note
    assert "from 40 members) is no higher than its FPR" in note and "no members" not in note
    markdown = Path(write_report(report, tmp_path)[1]).read_text()
    assert markdown.count("from 40 members) is no higher than its FPR") == 1


def test_a_length_warning_points_at_a_comparison_the_report_shows(nonmembers, tmp_path):
    rng = np.random.default_rng(4)
    lengths = rng.integers(10, 80, 2000).tolist()
    calibration = calibrate(nonmembers.with_columns(pl.Series("n_tokens", lengths)),
                            n_resamples=50)  # fmt: skip
    longer = frame(rng.normal(0.5, 1, 600), "long", lengths=rng.integers(40, 79, 600).tolist())
    report = build_report(pl.LazyFrame(longer), calibration, group_column="group")
    assert report.lengths.differs and report.lengths.matched
    page, markdown, *_ = (Path(p).read_text() for p in write_report(report, tmp_path)[:3])
    assert "see the length-matched comparison in the document-length section" in markdown
    for shown in (page, markdown):
        assert "Document length" in shown and "length-matched chance" in shown

    far = frame(rng.normal(0, 1, 300), "far", lengths=[500] * 300)  # outside the range
    report = build_report(pl.LazyFrame(far), calibration, group_column="group")
    assert not report.lengths.matched
    assert report.lengths.matched_note in report.lengths.warning  # says why there is none


def test_flagged_documents_are_marked_with_digits_that_tell_score_and_threshold_apart(
    nonmembers, tmp_path
):
    calibration = calibrate(nonmembers, n_resamples=50)
    threshold = calibration.methods["minkpp_k20"].threshold
    just_above, equal = threshold + 1e-7, threshold
    report = build_report(pl.LazyFrame(frame([just_above, equal, 5.0], "g")), calibration,
                          group_column="group")  # fmt: skip
    digits = distinct_digits([d.score for d in report.top_documents], threshold)
    assert f"{just_above:.{digits}g}" != f"{threshold:.{digits}g}"
    markdown = Path(write_report(report, tmp_path)[1]).read_text()
    assert f"Flagged when score > {threshold:.{digits}g}." in markdown
    assert f"| g-0 | g | {just_above:.{digits}g} | yes |" in markdown
    assert f"| g-1 | g | {equal:.{digits}g} | no |" in markdown  # equal: not flagged


def test_highlights_are_whole_words_without_leading_whitespace():
    text = "In 2024 the price rose, said Smith."
    # Byte-level tokens: " 2" "0" "24" carry a leading space and split the number; " pri".
    spans = [(2, 4), (4, 5), (5, 7), (11, 15)]
    assert [text[s:e] for s, e in whole_words(text, spans)] == ["2024", "price"]
