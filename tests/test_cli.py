"""The command line as a user meets it: help without heavy imports, --version, one line per
error, and the same flag names in every sub-command."""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys

import pytest
from minkscan.cli import build_parser, main

COMMANDS = ["score", "benchmark", "calibrate", "report", "nightly", "frequencies"]


def test_help_of_every_command_imports_neither_torch_nor_ray_nor_transformers() -> None:
    code = (
        "import sys; from minkscan.cli import build_parser; build_parser(); "
        "print(sorted(m for m in ('torch', 'ray', 'transformers', 'polars') if m in sys.modules))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.stdout.strip() == "[]", result.stderr


def test_version_prints_the_installed_version(capsys) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["--version"])
    assert exit_info.value.code == 0
    assert capsys.readouterr().out.strip() == f"minkscan {importlib.metadata.version('minkscan')}"


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_names_input_output_and_config_the_same_way(command: str) -> None:
    subparsers = next(a for a in build_parser()._actions if a.dest == "command")
    flags = {
        flag for action in subparsers.choices[command]._actions for flag in action.option_strings
    }
    assert {"--input", "--output"} <= flags
    if command in ("score", "benchmark", "nightly", "frequencies"):
        assert {"--config", "--model", "--set", "--dtype", "--device", "--k", "--limit"} <= flags


def test_a_failing_command_prints_one_line_and_v_adds_the_traceback(tmp_path, capsys) -> None:
    args = ["report", "--input", str(tmp_path / "missing"), "--calibration", "x.json",
            "--output", str(tmp_path / "out")]  # fmt: skip
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("minkscan report: ")
    assert main(["-v", *args]) == 2
    assert "Traceback" in capsys.readouterr().err
