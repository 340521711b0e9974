"""One output rule for every command (`minkscan.io.ownership`): `report`, `benchmark`
(--output and --work-dir), `order-test` and `nightly --report` refuse, in one line and before
any work, a directory holding files they did not write or another command's output, and
leave it as it was; a directory holding only their own files is theirs to rewrite; and a
directory another live run is writing (its writer lease held) is refused the same way."""

from __future__ import annotations

import json

import numpy as np
import polars as pl
import pytest
from minkscan.cli import main
from minkscan.io.lease import WriterLease
from minkscan.schema import LEASE, MARKER


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


def busy(directory) -> WriterLease:
    """A live run's lease on ``directory``: what another `minkscan` writing it holds."""
    directory.mkdir(parents=True, exist_ok=True)
    lease = WriterLease(str(directory), s3=None)
    lease.acquire()
    return lease


def refused_as_busy(capsys, directory) -> None:
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert f"output {directory} is being written by another run" in err
    assert "wait for it" in err


def test_report_on_a_directory_another_run_is_writing_is_refused_then_runs_once_it_ends(
    audit, capsys
):
    out = audit / "out"
    lease = busy(out)
    capsys.readouterr()
    assert main(_report(audit, out)) == 2
    refused_as_busy(capsys, out)
    assert [p.name for p in out.iterdir()] == [LEASE]  # nothing of the report written
    lease.release()
    assert main(_report(audit, out)) == 0
    assert (out / "report.json").is_file() and not (out / LEASE).exists()


def test_benchmark_on_an_output_another_run_is_writing_is_refused_before_scoring(tmp_path, capsys):
    data = tmp_path / "labelled.parquet"
    pl.DataFrame({"text": ["a b c", "d e f"], "label": [0, 1]}).write_parquet(data)
    out = tmp_path / "bench"
    busy(out)
    capsys.readouterr()
    args = ["benchmark", "--input", str(data), "--output", str(out), "--model", "no-such-model"]
    assert main(args) == 2  # refused before the model is looked for
    refused_as_busy(capsys, out)
    assert [p.name for p in out.iterdir()] == [LEASE]


def test_nightly_on_a_scan_another_run_is_writing_is_refused_before_scoring(tmp_path, capsys):
    inputs, scans = tmp_path / "in", tmp_path / "scores"
    inputs.mkdir()
    pl.DataFrame({"id": ["a"], "text": ["some text"]}).write_parquet(inputs / "a.parquet")
    rng = np.random.default_rng(0)
    pl.DataFrame({"minkpp_k20": rng.normal(size=50)}).write_parquet(tmp_path / "cal.parquet")
    assert main(["calibrate", "--nonmembers", str(tmp_path / "cal.parquet"), "--output",
                 str(tmp_path / "cal.json")]) == 0  # fmt: skip
    busy(scans)
    capsys.readouterr()
    args = ["nightly", "--input", str(inputs), "--output", str(scans), "--calibration",
            str(tmp_path / "cal.json"), "--report", str(tmp_path / "r")]  # fmt: skip
    assert main(args) == 2
    refused_as_busy(capsys, scans)
    assert [p.name for p in scans.iterdir()] == [LEASE]


def test_a_refused_report_leaves_no_directory_it_created(audit, capsys):
    out = audit / "new" / "report"
    args = [*_report(audit, out), "--method", "no_such_column"]
    assert main(args) == 2
    assert not (audit / "new").exists()
