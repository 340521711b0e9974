"""The package's layers never import upward and its modules import no cycle: the
import-linter contracts in pyproject.toml are kept, an upward import (math importing
reporting) breaks the first and a cycle between sibling modules the second."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
LINT_IMPORTS = str(Path(sys.executable).parent / "lint-imports")


def lint(source_root: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [LINT_IMPORTS, "--config", str(REPO / "pyproject.toml"), "--no-cache"],
        cwd=source_root, env={**os.environ, "PYTHONPATH": str(source_root)},
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def test_the_layer_contract_is_kept() -> None:
    result = lint(REPO / "pipeline")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Contracts: 2 kept, 0 broken." in result.stdout


def test_an_upward_import_breaks_the_contract(tmp_path: Path) -> None:
    shutil.copytree(REPO / "pipeline" / "minkscan", tmp_path / "minkscan")
    with (tmp_path / "minkscan" / "scoring" / "aggregate.py").open("a") as module:
        module.write("\nimport minkscan.reporting.summary  # noqa\n")
    result = lint(tmp_path)
    assert result.returncode != 0
    assert "BROKEN" in result.stdout and "minkscan.scoring.aggregate" in result.stdout


def test_an_import_cycle_between_siblings_breaks_the_contract(tmp_path: Path) -> None:
    shutil.copytree(REPO / "pipeline" / "minkscan", tmp_path / "minkscan")
    with (tmp_path / "minkscan" / "io" / "inputs.py").open("a") as module:
        module.write("\nimport minkscan.io.reading  # noqa\n")  # reading imports inputs
    result = lint(tmp_path)
    assert result.returncode != 0
    assert "No import cycles" in result.stdout and "BROKEN" in result.stdout
