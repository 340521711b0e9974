"""Reports: flagged fractions vs chance, binomial test, contamination estimates, HTML/MD/JSON,
escaping of document text, and the `--fail-above` CI gate of the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from minkscan.calibration import calibrate
from minkscan.cli import main
from minkscan.reporting import build_report, write_report

SCRIPT_TEXT = "<script>alert('x')</script> suspicious"


def scores(rng: np.random.Generator, n_non: int, n_mem: int, group: str) -> pl.DataFrame:
    """Score rows of one group: non-members ~ N(0,1), members ~ N(2,1); label kept."""
    n = n_non + n_mem
    values = np.concatenate([rng.normal(0.0, 1.0, n_non), rng.normal(2.0, 1.0, n_mem)])
    return pl.DataFrame(
        {
            "id": [f"{group}-{i}" for i in range(n)],
            "group": [group] * n,
            # Texts of one kind on every side: the blind baseline finds no shift.
            "text": [f"document {i}" for i in rng.integers(0, 10**6, n)],
            "status": ["ok"] * n,
            "n_tokens": [32] * n,
            "minkpp_k20": values,
            "mean_logprob": values + rng.normal(0.0, 0.5, n),
            "label": [0] * n_non + [1] * n_mem,
        }
    )


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A calibration set (5000 non-members, so the threshold's own error is small next to a
    group's sampling error, + 1000 members) and a scored dataset with a clean
    group and a group where 30% of 2000 documents are members; one document holds a script."""
    rng = np.random.default_rng(7)
    root = tmp_path_factory.mktemp("report")
    calibration_set = scores(rng, 5000, 1000, "cal")
    dataset = pl.concat([scores(rng, 2000, 0, "clean"), scores(rng, 1400, 600, "dirty")])
    top = dataset["minkpp_k20"].arg_max()
    dataset = dataset.with_columns(
        pl.when(pl.int_range(pl.len()) == top)
        .then(pl.lit(SCRIPT_TEXT))
        .otherwise(pl.col("text"))
        .alias("text")
    )
    paths = {
        "nonmembers": root / "nonmembers.parquet",
        "labels": root / "labels.parquet",
        "calset": root / "calset.parquet",
        "scores": root / "scores.parquet",
    }
    calibration_set.filter(pl.col("label") == 0).drop("label").write_parquet(paths["nonmembers"])
    calibration_set.select("id", "label").write_parquet(paths["labels"])
    calibration_set.drop("label").write_parquet(paths["calset"])
    dataset.write_parquet(paths["scores"])
    return paths


@pytest.fixture(scope="module")
def report(files: dict[str, Path]):
    frame = pl.read_parquet(files["calset"]).join(pl.read_parquet(files["labels"]), on="id")
    calibration = calibrate(
        frame.filter(pl.col("label") == 0), frame.filter(pl.col("label") == 1), n_resamples=100
    )
    return build_report(pl.scan_parquet(files["scores"]), calibration, group_column="group")


def primary(report, group: str):
    return next(r for r in report.primary if r.group == group)


@pytest.mark.slow
def test_clean_group_is_flagged_at_about_the_fpr_and_not_significant(report) -> None:
    clean = primary(report, "clean")
    assert clean.n_scored == 2000
    assert clean.flagged_fraction == pytest.approx(clean.expected_fraction, abs=0.02)
    assert clean.p_value > 0.01
    assert clean.contamination_low == 0.0 and clean.contamination < 0.05


@pytest.mark.slow
def test_contaminated_group_is_significant_and_its_fraction_is_estimated(report) -> None:
    dirty = primary(report, "dirty")
    assert dirty.p_value < 1e-10
    assert not dirty.contamination_is_lower_bound
    assert dirty.contamination_low < 0.3 < dirty.contamination_high
    assert dirty.contamination == pytest.approx(0.3, abs=0.06)
    assert report.exceeding(0.2) == [dirty]


@pytest.mark.slow
def test_without_a_known_tpr_the_estimate_is_a_lower_bound(files: dict[str, Path]) -> None:
    calibration = calibrate(pl.read_parquet(files["nonmembers"]), n_resamples=50)
    report = build_report(pl.scan_parquet(files["scores"]), calibration, group_column="group")
    dirty = primary(report, "dirty")
    assert dirty.contamination_is_lower_bound
    assert 0.1 < dirty.contamination < 0.3


@pytest.mark.slow
def test_html_is_self_contained_and_escapes_document_text(report, tmp_path: Path) -> None:
    html_path, md_path, json_path, *_ = map(Path, write_report(report, tmp_path))
    page = html_path.read_text()
    assert "<script" not in page
    assert "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;" in page
    assert page.count("data:image/png;base64,") == 3  # histogram, flagged fractions, ROC
    assert "http:" not in page and "https:" not in page  # no external resource
    assert "| dirty | 2000 |" in md_path.read_text()
    summary = json.loads(json_path.read_text())
    assert summary["top_ids"][0] == report.top_documents[0].id
    assert {row["group"] for row in summary["results"]} == {"clean", "dirty"}


@pytest.mark.slow
def test_cli_calibrates_then_fails_the_gate_only_above_the_bound(
    files: dict[str, Path], tmp_path: Path
) -> None:
    cal = tmp_path / "cal.json"
    assert main(["calibrate", "--input", str(files["calset"]), "--labels",
                 str(files["labels"]), "--output", str(cal)]) == 0  # fmt: skip
    args = ["report", "--input", str(files["scores"]), "--calibration", str(cal),
            "--group-column", "group", "--output", str(tmp_path / "out")]  # fmt: skip
    assert main([*args, "--fail-above", "0.2"]) == 1
    assert main([*args, "--fail-above", "0.5"]) == 0
    assert (tmp_path / "out" / "report.html").exists()
