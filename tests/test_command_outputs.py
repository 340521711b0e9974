"""One output rule for every command (`minkscan.io.ownership`): `report`, `benchmark`
(--output and --work-dir), `order-test` and `nightly --report` refuse, in one line and before
any work, a directory holding files they did not write or another command's output, and
leave it as it was; a directory holding only their own files is theirs to rewrite."""

from __future__ import annotations

import json

import numpy as np
import polars as pl
import pytest
from minkscan.cli import main
from minkscan.schema import MARKER


@pytest.fixture
def audit(tmp_path):
    """A calibration and a score file to report on (no model needed)."""
    rng = np.random.default_rng(0)
    for name, n in (("cal", 400), ("scores", 40)):
        pl.DataFrame({"id": [f"{name}{i}" for i in range(n)], "minkpp_k20": rng.normal(size=n)}
                     ).write_parquet(tmp_path / f"{name}.parquet")  # fmt: skip
    assert main(["calibrate", "--nonmembers", str(tmp_path / "cal.parquet"), "--output",
                 str(tmp_path / "cal.json")]) == 0  # fmt: skip
    return tmp_path


def _report(audit, out) -> list[str]:
    return ["report", "--input", str(audit / "scores.parquet"), "--calibration",
            str(audit / "cal.json"), "--output", str(out)]  # fmt: skip


@pytest.mark.parametrize(
    ("present", "message"),
    [
        ({"notes.txt": "mine"}, "holds files this command did not write (notes.txt)"),
        ({MARKER: "{}", "part-x.parquet": ""}, "is a `minkscan score` output"),
    ],
)
def test_report_refuses_an_output_it_did_not_write_and_leaves_it_alone(
    audit, capsys, present, message
):
    out = audit / "out"
    out.mkdir()
    for name, text in present.items():
        (out / name).write_text(text)
    capsys.readouterr()
    assert main(_report(audit, out)) == 2
    err = capsys.readouterr().err.strip()
    assert f"--output {out} {message}" in err and len(err.splitlines()) == 1
    assert {p.name: p.read_text() for p in out.iterdir()} == present


def test_report_rewrites_its_own_output(audit, capsys):
    out = audit / "out"
    assert main(_report(audit, out)) == 0
    assert main(_report(audit, out)) == 0
    assert json.loads((out / "report.json").read_text())["decision"]


def test_benchmark_refuses_an_output_or_work_dir_it_did_not_write(tmp_path, capsys):
    data = tmp_path / "labelled.parquet"
    pl.DataFrame({"text": ["a b c", "d e f"], "label": [0, 1]}).write_parquet(data)
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "thesis.md").write_text("mine")
    for flag in ("--output", "--work-dir"):
        other = "--work-dir" if flag == "--output" else "--output"
        args = ["benchmark", "--input", str(data), flag, str(mine), other, str(tmp_path / "x")]
        assert main(args) == 2
        err = capsys.readouterr().err.strip()
        assert f"{flag} {mine} holds files this command did not write (thesis.md)" in err
    assert [p.name for p in mine.iterdir()] == ["thesis.md"]
    assert not (tmp_path / "x").exists()


def test_nightly_refuses_a_report_directory_it_did_not_write(tmp_path, capsys):
    inputs, report = tmp_path / "in", tmp_path / "report"
    inputs.mkdir()
    report.mkdir()
    (report / "index.html").write_text("a site")
    pl.DataFrame({"id": ["a"], "minkpp_k20": [0.0]}).write_parquet(tmp_path / "cal.parquet")
    pl.DataFrame({"id": ["a"], "text": ["some text"]}).write_parquet(inputs / "a.parquet")
    rng = np.random.default_rng(0)
    pl.DataFrame({"minkpp_k20": rng.normal(size=50)}).write_parquet(tmp_path / "cal.parquet")
    assert main(["calibrate", "--nonmembers", str(tmp_path / "cal.parquet"), "--output",
                 str(tmp_path / "cal.json")]) == 0  # fmt: skip
    capsys.readouterr()
    args = ["nightly", "--input", str(inputs), "--output", str(tmp_path / "scores"),
            "--calibration", str(tmp_path / "cal.json"), "--report", str(report)]  # fmt: skip
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert f"--report {report} holds files this command did not write (index.html)" in err
    assert not (tmp_path / "scores").exists() and [p.name for p in report.iterdir()] == [
        "index.html"
    ]
