"""README's examples run as written, in order, in an empty directory holding only the
repository's pipeline/ (as a user's clone): the quick start, then the walkthrough, each step
reading only what the steps before it wrote. The bundled SmolLM2 scores the sample."""

from __future__ import annotations

import json
import re

import pytest
from doc_examples import examples, run_page
from helpers import REPO

pytestmark = pytest.mark.slow
README = REPO / "README.md"


@pytest.fixture
def clone(tmp_path, monkeypatch):
    """An empty working directory with the repository's pipeline/ in it, and nothing else."""
    work = tmp_path / "clone"
    work.mkdir()
    (work / "pipeline").symlink_to(REPO / "pipeline")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.chdir(work)
    return work


@pytest.mark.usefixtures("local_ray")
def test_readme_runs_from_the_sample_to_a_decision_in_an_empty_directory(clone, capsys):
    found = examples(README.read_text())
    assert [kind for kind, _ in found].count("python") == 1  # the walkthrough's two files
    assert run_page(README.read_text(), {}) >= 9
    printed = capsys.readouterr()
    # What the walkthrough says each step shows.
    assert "scored 32 documents" in printed.out
    assert "too few calibration non-members" in printed.err
    assert "Inconclusive at the 5% level (minkpp_k20)" in printed.out
    auroc = re.search(r"blind AUROC (\d\.\d+)", printed.out)
    assert auroc and round(float(auroc.group(1)), 2) == 0.96  # "about 0.96"
    lines = printed.out.splitlines()
    top = next(i for i, line in enumerate(lines) if line.startswith("Most member-like"))
    ranks = [re.match(r"^  (\d+)\. ", line) for line in lines[top + 1 : top + 7]]
    assert [m.group(1) for m in ranks if m] == ["1", "2", "3", "4", "5"]  # "printed the five"
    report = json.loads((clone / "out" / "report" / "report.json").read_text())
    assert report["decision"] == "inconclusive"  # the sample's two sets differ by text alone
    assert (clone / "out" / "report" / "decisions.parquet").is_file()
    tables = json.loads((clone / "out" / "benchmark" / "tables.json").read_text())
    blind = [row for row in tables["main"] if row["method"].startswith("Blind")]
    assert blind and tables["forward_passes"] == {}  # read, not scored again
    order = json.loads((clone / "out" / "order-test" / "order_test.json").read_text())
    assert order["decision"] in {"evidence", "no evidence"}
    assert "0 new, 0 changed, 1 unchanged" in printed.out  # the second nightly scan
