"""The command line as a user meets it: help without heavy imports, --version, one line per
error, and the same flag names in every sub-command."""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys

import polars as pl
import pytest
from helpers import score
from minkscan.cli import build_parser, main

COMMANDS = ["score", "benchmark", "calibrate", "report", "nightly", "frequencies", "order-test"]


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
    if command in ("score", "benchmark", "nightly", "frequencies", "order-test"):
        assert {"--config", "--model", "--set", "--limit"} <= flags
    if command in ("score", "benchmark", "nightly", "order-test"):
        assert {"--dtype", "--device", "--k", "--batch-tokens", "--max-tokens"} <= flags
        assert {"--num-actors", "--limit", "--address"} <= flags


@pytest.mark.parametrize("command", COMMANDS)
def test_every_commands_help_ends_with_an_example_of_it(command: str, capsys) -> None:
    with pytest.raises(SystemExit):
        main([command, "--help"])
    example = capsys.readouterr().out.split("example:\n")[1]
    assert example.lstrip().startswith(f"minkscan {command} --")


def test_a_misspelt_flag_gets_its_commands_usage_and_the_closest_flag(capsys) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["score", "--input", "x.parquet", "--outptu", "out"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: minkscan score ")
    assert "unrecognized arguments: --outptu out (did you mean --output?)" in err


def test_a_failing_command_prints_one_line_and_v_adds_the_traceback(tmp_path, capsys) -> None:
    args = ["report", "--input", str(tmp_path / "missing"), "--calibration", "x.json",
            "--output", str(tmp_path / "out")]  # fmt: skip
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("minkscan report: ")
    assert main(["-v", *args]) == 2
    assert "Traceback" in capsys.readouterr().err


def test_a_yaml_error_names_the_file_or_the_set_key_with_line_and_column(tmp_path, capsys):
    config = tmp_path / "bad.yaml"
    config.write_text("scoring:\n  k_percentages: [10, 20\n")
    assert main(["score", "--config", str(config), "--output", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{config}: invalid YAML at line 3, column 1" in err
    assert main(["score", "--set", "scoring.k_percentages=[10,", "--output", "o"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "--set scoring.k_percentages=[10,: invalid YAML at line 1, column 5" in err


def test_a_yaml_section_given_twice_is_refused_naming_both_lines(tmp_path, capsys):
    """YAML itself keeps the last silently: the first section's settings would be lost."""
    config = tmp_path / "twice.yaml"
    config.write_text("data:\n  limit: 3\nscoring:\n  max_tokens: 64\ndata:\n  limit: 5\n")
    assert main(["score", "--config", str(config), "--output", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert f"{config}: invalid YAML at line 5, column 1: key 'data' is given twice (lines 1 " \
        "and 5); keep one" in err  # fmt: skip
    assert not (tmp_path / "o").exists()


def test_an_empty_set_value_is_refused_not_ignored(capsys):
    assert main(["score", "--set", "scoring.max_tokens=", "--output", "o"]) == 2
    assert "--set scoring.max_tokens= has no value" in capsys.readouterr().err


def test_device_cuda_without_cuda_fails_in_one_line_before_ray_starts(
    tiny_llama_dir, tmp_path, capsys
):
    import ray
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    if ray.is_initialized():
        ray.shutdown()  # the session's Ray (started again by the next test needing it)
    pl.DataFrame({"text": ["Some text."]}).write_parquet(tmp_path / "in.parquet")
    code = score(tiny_llama_dir, tmp_path / "in.parquet", tmp_path / "out", "--device", "cuda")
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1, err
    assert "model.device is 'cuda' but this machine has no CUDA device" in err
    assert not ray.is_initialized() and not (tmp_path / "out").exists()


@pytest.mark.parametrize("command", COMMANDS)
def test_every_flag_says_what_it_does_and_its_default(command: str) -> None:
    subparsers = next(a for a in build_parser()._actions if a.dest == "command")
    silent = [
        action.option_strings
        for action in subparsers.choices[command]._actions
        if action.option_strings and action.dest not in ("help", "verbose")
        and not action.required and "default" not in (action.help or "")
    ]  # fmt: skip
    assert silent == []


def test_frequencies_offers_only_the_flags_it_uses() -> None:
    subparsers = next(a for a in build_parser()._actions if a.dest == "command")
    flags = {f for a in subparsers.choices["frequencies"]._actions for f in a.option_strings}
    assert not flags & {"--k", "--batch-tokens", "--dtype", "--device"}
