"""`minkscan report` with the audits that distribution shift cannot fool: documents selected
at a controlled false discovery rate (their ids written for downstream filtering), dataset
inference against an i.i.d. held-out set, and an order test's verdict; the same numbers in
the terminal, report.json, report.md and report.html; bad input refused in one line."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from helpers import SAMPLE, score
from minkscan.calibration.conformal import conformal_p_values
from minkscan.cli import main
from minkscan.commands import report as report_command
from minkscan.evaluation import dataset_inference
from minkscan.evaluation.exchangeability import ExchangeabilityCheck
from minkscan.evaluation.order_test import Cost, OrderSettings, OrderTestResult, order_statistics
from minkscan.reporting import audits
from minkscan.schema import MARKER

pytestmark = pytest.mark.usefixtures("local_ray")


@pytest.fixture(scope="module")
def scored(tmp_path_factory, tiny_llama_dir) -> dict[str, Path]:
    """40 audited texts in two groups and 24 other held-out texts; the calibration non-members
    are the 20 least member-like held-out rows (so some audited documents stand out); a copy of
    the held-out output recorded as scored with other settings; an order test's result."""
    root = tmp_path_factory.mktemp("audits")
    texts = pl.read_parquet(SAMPLE)
    sets = {
        "audited": texts.slice(0, 40).with_columns(
            pl.when(pl.int_range(pl.len()) < 20).then(pl.lit("a")).otherwise(pl.lit("b"))
            .alias("dataset")),
        "heldout": texts.slice(40, 24),
    }  # fmt: skip
    paths = {}
    for name, frame in sets.items():
        frame.write_parquet(root / f"{name}.parquet")
        extra = ["--keep-columns", "text,dataset"] if name == "audited" else []
        assert score(tiny_llama_dir, root / f"{name}.parquet", root / name, *extra) == 0
        paths[name] = root / name
    lowest = pl.read_parquet(root / "heldout" / "*.parquet").sort("minkpp_k20").head(20)
    lowest.write_parquet(root / "nonmembers.parquet")
    # What another run's output records: scored with k = 30 only.
    shutil.copytree(root / "heldout", root / "heldout-k30")
    marker = json.loads((root / "heldout-k30" / MARKER).read_text())
    marker["identity"]["scoring"]["k_percentages"] = [30]
    (root / "heldout-k30" / MARKER).write_text(json.dumps(marker))
    paths["heldout-k30"] = root / "heldout-k30"
    paths["calibration.json"] = root / "calibration.json"
    assert main(["calibrate", "--nonmembers", str(root / "nonmembers.parquet"), "--output",
                 str(paths["calibration.json"])]) == 0  # fmt: skip
    rng = np.random.default_rng(0)
    result = OrderTestResult(
        OrderSettings("lines", None, None, "\n", 5, 4, 0), ["bench.jsonl"], 40, "tiny", 0.05,
        Cost(25, 25, 999),
        order_statistics(rng.normal(size=5) + 3, rng.normal(size=(5, 4))),
        ExchangeabilityCheck(0.1, 0.1, 0.5, 40, 999),
    )  # fmt: skip
    paths["order_test.json"] = root / "order_test.json"
    paths["order_test.json"].write_text(json.dumps(result.to_json()))
    return paths


def _report(scored, out: Path, *extra: str) -> list[str]:
    return ["report", "--input", str(scored["audited"]), "--calibration",
            str(scored["calibration.json"]), "--output", str(out), "--group-column", "dataset",
            *extra]  # fmt: skip


@pytest.mark.slow
def test_documents_are_selected_at_the_fdr_level_and_every_output_tells_the_same_story(
    scored, tmp_path, capsys
):
    out = tmp_path / "report"
    assert main(_report(scored, out, "--fdr", "0.2", "--heldout", str(scored["heldout"]),
                        "--order-test", str(scored["order_test.json"]))) == 0  # fmt: skip
    printed = capsys.readouterr().out
    summary = json.loads((out / "report.json").read_text())
    fdr = summary["fdr"]
    assert fdr["q"] == 0.2 and fdr["method"] == "minkpp_k20"

    calibration = json.loads(scored["calibration.json"].read_text())
    nonmembers = np.array(calibration["methods"]["minkpp_k20"]["nonmember_sample"])
    audited = pl.read_parquet(scored["audited"] / "*.parquet")
    p = conformal_p_values(audited["minkpp_k20"].to_numpy(), nonmembers)
    selected = pl.read_csv(out / "selected.csv", schema_overrides={"id": pl.Utf8})
    assert sorted(selected["id"]) == sorted(audited["id"].filter(pl.Series(p <= fdr["p_cutoff"])))
    assert len(selected) > 0 and (selected["q_value"] <= 0.2).all()
    for group, counts in fdr["groups"].items():
        assert counts["selected"] == (selected["group"] == group).sum()
        assert counts["scored"] == 20
        assert f"FDR flags: {counts['selected']} of 20 documents in group '{group}'" in printed
        assert any(line.startswith("Selected by Benjamini-Hochberg") for line in fdr["lines"])
    for doc in summary["evidence"]:
        assert doc["p_value"] == pytest.approx(float(conformal_p_values(
            np.array([doc["score"]]), nonmembers)[0]))  # fmt: skip
        assert doc["selected"] == (doc["id"] in set(selected["id"]))

    inference = summary["dataset_inference"]["results"]
    assert [r["group"] for r in inference] == ["a", "b"]
    assert all(r["heldout"] == str(scored["heldout"]) for r in inference)
    assert all(len(r["p_values"]) == dataset_inference.DEFAULT_SPLITS for r in inference)
    order = json.loads(scored["order_test.json"].read_text())
    assert summary["order_test"]["verdict"] == order["verdict"]

    markdown = (out / "report.md").read_text()
    page = (out / "report.html").read_text()
    for result in inference:
        assert result["verdict"] in printed
    for line in [
        *fdr["lines"],
        *order["verdict"][1:],
        f"Order test of bench.jsonl: {order['verdict'][0]}",
    ]:
        assert line in printed and line in markdown.replace("\\", "")
        assert line.replace("'", "&#39;") in page
    assert "## Audits with a stated guarantee" in markdown
    assert "p (conformal)" in markdown and "p (conformal)" in page


@pytest.mark.slow
def test_a_heldout_set_scored_with_other_settings_is_refused_naming_the_difference(
    scored, tmp_path, capsys
):
    assert main(_report(scored, tmp_path / "r", "--heldout", str(scored["heldout-k30"]))) == 2
    err = capsys.readouterr().err.strip()
    assert "scored with other settings" in err and "k_percentages" in err
    assert len(err.splitlines()) == 1 and not (tmp_path / "r").exists()


@pytest.mark.slow
def test_a_plain_heldout_score_file_is_used_with_a_warning_that_its_scoring_is_unchecked(
    scored, tmp_path, capsys
):
    (part,) = scored["heldout"].glob("part-*.parquet")
    out = tmp_path / "r"
    assert main(_report(scored, out, "--heldout", str(part))) == 0
    assert f"cannot check that --heldout {part} was scored like" in capsys.readouterr().err
    assert len(json.loads((out / "report.json").read_text())["dataset_inference"]["results"]) == 2


@pytest.mark.parametrize("level", ["0", "1", "1.5", "-0.1"])
@pytest.mark.slow
def test_an_fdr_level_outside_zero_one_is_refused(scored, tmp_path, capsys, level):
    assert main(_report(scored, tmp_path / "r", "--fdr", level)) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"minkscan report: --fdr must be in (0, 1), got {float(level)}"


def test_the_cli_defaults_are_the_libraries():
    assert report_command.DEFAULT_FDR == audits.DEFAULT_FDR
    assert report_command.DEFAULT_SPLITS == dataset_inference.DEFAULT_SPLITS


@pytest.mark.parametrize(
    ("heldout", "shared"),
    [("audited", "40 with the same id"), ("audited-renamed", "40 with the same text")],
)
@pytest.mark.slow
def test_a_heldout_set_sharing_documents_with_the_audited_set_is_refused_by_name(
    scored, tmp_path, capsys, heldout, shared
):
    """The audited scores given again as held out, and again with every id changed."""
    if heldout == "audited-renamed":
        frame = pl.read_parquet(scored["audited"] / "*.parquet")
        frame.with_columns((pl.lit("copy-") + pl.col("id")).alias("id")).write_parquet(
            tmp_path / "copy.parquet"
        )
        path = tmp_path / "copy.parquet"
    else:
        path = scored["audited"]
    assert main(_report(scored, tmp_path / "r", "--heldout", str(path))) == 2
    err = capsys.readouterr().err.strip()
    assert f"--heldout {path} shares documents with the audited scores ({shared}" in err
    assert "disjoint from the audited set" in err and len(err.splitlines()) == 1
    assert not (tmp_path / "r").exists()
