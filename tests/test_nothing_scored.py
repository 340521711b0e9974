"""Nothing scored, nothing concluded: `report` and `calibrate` on scores with no scored
document refuse in one line; a group with none is named as having no scored document (never
"no evidence"), in the terminal, report.json and the report's warnings, and fails
--fail-above whatever its bound."""

from __future__ import annotations

import json

import numpy as np
import polars as pl
import pytest
from minkscan.cli import main


@pytest.fixture
def calibration(tmp_path):
    n = 400
    rng = np.random.default_rng(0)
    pl.DataFrame(
        {
            "id": [f"c{i}" for i in range(n)],
            "status": ["ok"] * n,
            "n_tokens": [9] * n,
            "minkpp_k20": rng.normal(size=n),
        }
    ).write_parquet(tmp_path / "cal.parquet")
    out = tmp_path / "cal.json"
    assert (
        main(["calibrate", "--nonmembers", str(tmp_path / "cal.parquet"), "--output", str(out)])
        == 0
    )
    return out


def report(tmp_path, calibration, *more: str) -> int:
    """`minkscan report` of tmp_path/s.parquet against ``calibration`` into tmp_path/r."""
    return main(["report", "--input", str(tmp_path / "s.parquet"), "--calibration",
                 str(calibration), "--output", str(tmp_path / "r"), *more])  # fmt: skip


def test_report_on_scores_with_no_scored_document_refuses_in_one_line(
    tmp_path, calibration, capsys
):
    pl.DataFrame(
        {
            "id": ["a", "b", "c"],
            "status": ["empty", "ok", "too_short"],
            "n_tokens": [0, 5, 0],
            "minkpp_k20": [None, float("nan"), None],
        }
    ).write_parquet(tmp_path / "s.parquet")
    capsys.readouterr()
    code = report(tmp_path, calibration, "--fail-above", "0")
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1
    assert "no scored document" in err and "empty 1, ok 1, too_short 1" in err
    assert "No evidence" not in err and not (tmp_path / "r").exists()


def test_calibrate_on_scores_with_no_scored_document_refuses_in_one_line(tmp_path, capsys):
    pl.DataFrame(
        {
            "id": ["a", "b"],
            "status": ["empty", "ok"],
            "n_tokens": [0, 5],
            "minkpp_k20": [None, float("nan")],
        }
    ).write_parquet(tmp_path / "s.parquet")
    code = main(
        [
            "calibrate",
            "--nonmembers",
            str(tmp_path / "s.parquet"),
            "--output",
            str(tmp_path / "c.json"),
        ]
    )
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and "got 0" in err


def test_a_group_with_no_scored_document_is_named_and_fails_the_gate(tmp_path, calibration, capsys):
    rng = np.random.default_rng(1)
    scored = rng.normal(size=50).tolist()
    pl.DataFrame(
        {
            "id": [f"d{i}" for i in range(53)],
            "status": ["ok"] * 50 + ["empty"] * 3,
            "n_tokens": [9] * 50 + [0] * 3,
            "minkpp_k20": scored + [None] * 3,
            "dataset": ["wiki"] * 50 + ["blank"] * 3,
        }
    ).write_parquet(tmp_path / "s.parquet")
    capsys.readouterr()
    code = report(tmp_path, calibration, "--group-column", "dataset", "--fail-above", "1")
    out, err = capsys.readouterr()
    assert code == 1
    assert "No evidence of contamination in the 1 scored group(s)" in out
    assert "no scored documents in 'blank', so nothing is concluded there" in out
    assert "group 'blank' has no scored document" in err
    assert "No evidence of contamination in any group" not in out
    summary = json.loads((tmp_path / "r" / "report.json").read_text())
    assert summary["unscored_groups"] == ["blank"]
    assert any("'blank' has no scored document" in w for w in summary["warnings"])
    assert "no scored document" in (tmp_path / "r" / "report.md").read_text()


@pytest.mark.usefixtures("local_ray")
@pytest.mark.slow
def test_benchmark_with_no_scored_member_refuses_in_one_line(tiny_llama_dir, tmp_path, capsys):
    path = tmp_path / "set.parquet"
    texts = ["", "A river rose over its banks in May.", "  ", "The harbour froze."]
    pl.DataFrame({"text": texts, "label": [1, 0, 1, 0]}).write_parquet(path)
    code = main(["benchmark", "--input", str(path), "--model", str(tiny_llama_dir), "--output",
                 str(tmp_path / "out")])  # fmt: skip
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and not (tmp_path / "out").exists()
    assert err[-1] == ("minkscan benchmark: group 'set' has no scored member document (empty 2): "
                       "no detection metric exists without both")  # fmt: skip


def test_nan_and_infinite_scores_are_counted_by_status_and_plus_inf_is_flagged(
    tmp_path, calibration, capsys
):
    """+inf is the most member-like score there is, not a missing one; NaN is no score."""
    n = 40
    scores = [0.0] * (n - 4) + [float("inf"), float("inf"), float("-inf"), float("nan")]
    pl.DataFrame(
        {"id": [f"d{i}" for i in range(n)], "status": ["ok"] * n, "n_tokens": [9] * n,
         "minkpp_k20": scores}
    ).write_parquet(tmp_path / "s.parquet")  # fmt: skip
    capsys.readouterr()
    assert report(tmp_path, calibration) == 0
    captured = capsys.readouterr()
    summary = json.loads((tmp_path / "r" / "report.json").read_text())
    (group,) = summary["groups"]
    assert group["n_scored"] == n - 1 and group["n_flagged"] == 2  # the two +inf
    warning = ("'minkpp_k20' is not finite on 4 rows (1 -inf with status 'ok', 2 +inf with "
               "status 'ok', 1 NaN with status 'ok')")  # fmt: skip
    assert any(w.startswith(warning) for w in summary["warnings"])
    assert warning in captured.err
    selected = pl.read_csv(tmp_path / "r" / "selected.csv", schema_overrides={"id": pl.Utf8})
    assert {"d36", "d37"} <= set(summary["top_ids"][:2]) and "d39" not in summary["top_ids"]
    assert selected.is_empty() or set(selected["id"]) <= {"d36", "d37"}


def test_every_audited_document_has_its_decision_in_one_file(tmp_path, calibration, capsys):
    """decisions.parquet (and decisions.csv with --csv): one row per audited row, in order,
    unscored rows with their status and null decisions, the rest as the report decided."""
    n = 30
    rng = np.random.default_rng(5)
    values = rng.normal(1.0, 1, n).tolist() + [None, float("nan")]
    pl.DataFrame(
        {"id": [f"d{i}" for i in range(n + 2)], "status": ["ok"] * n + ["empty", "ok"],
         "n_tokens": [9] * (n + 2), "minkpp_k20": values}
    ).write_parquet(tmp_path / "s.parquet")  # fmt: skip
    assert report(tmp_path, calibration, "--csv", "--fdr", "0.5") == 0
    decisions = pl.read_parquet(tmp_path / "r" / "decisions.parquet")
    assert decisions.columns == ["id", "group", "status", "minkpp_k20", "flagged", "p_value",
                                 "q_value", "selected", "group_decision"]  # fmt: skip
    assert decisions["id"].to_list() == [f"d{i}" for i in range(n + 2)]
    threshold = json.loads(calibration.read_text())["methods"]["minkpp_k20"]["threshold"]
    scored = decisions.head(n)
    assert scored["flagged"].to_list() == [v > threshold for v in values[:n]]
    unscored = decisions.tail(2)
    assert unscored["status"].to_list() == ["empty", "ok"]
    assert unscored.select("flagged", "p_value", "selected").null_count().row(0) == (2, 2, 2)
    summary = json.loads((tmp_path / "r" / "report.json").read_text())
    assert set(decisions["group_decision"]) == {summary["groups"][0]["decision"]}
    selected = pl.read_csv(tmp_path / "r" / "selected.csv", schema_overrides={"id": pl.Utf8})
    assert sorted(decisions.filter(pl.col("selected"))["id"]) == sorted(selected["id"])
    assert len(selected) > 0
    as_csv = pl.read_csv(tmp_path / "r" / "decisions.csv", schema_overrides={"id": pl.Utf8})
    assert as_csv["id"].to_list() == decisions["id"].to_list()
