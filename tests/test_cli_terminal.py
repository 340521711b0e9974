"""What a user sees from `minkscan score`: one line per mistake, before anything heavy is
imported; a quiet run (a progress bar in a terminal, progress lines in a log); and a finished
output answered without Ray."""

from __future__ import annotations

import fcntl
import os
import pty
import re
import select
import struct
import subprocess
import sys
import termios
from pathlib import Path

import pytest
from helpers import write_parquet
from minkscan.cli import main

MINKSCAN = str(Path(sys.executable).parent / "minkscan")
HEAVY = ("torch", "transformers", "ray")
TEXTS = [f"Document number {i}, with a few words of its own." for i in range(40)]


def error_and_heavy_modules(args: list[str]) -> tuple[int, str, list[str]]:
    """Exit code and stderr of `minkscan <args>`, and the heavy modules it had imported when
    it answered."""
    code = (
        "import sys; from minkscan.cli import main; code = main(sys.argv[1:]); "
        f"print(sorted(m for m in {HEAVY!r} if m in sys.modules)); sys.exit(code)"
    )
    result = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True)
    return result.returncode, result.stderr, eval(result.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def jsonl(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("in") / "docs.jsonl"
    path.write_text('{"content": "Some text to score.", "key": 1}\n')
    return path


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--input", "missing.parquet", "--output", "o"], "input not found: missing.parquet"),
        (["--output", "{file}", "--text-column", "content"], "is a file; give a directory"),
        (["--text-column", "content"], "no output given (data.output / --output)"),
        (
            ["--output", "o"],
            "no input has the text column 'text' (columns found: content, "
            "key): name it with --text-column",
        ),  # fmt: skip
        (
            ["--output", "o", "--text-column", "content", "--id-column", "idx"],
            "no input has the id column 'idx' (columns found: content, key): name it with "
            "--id-column",
        ),  # fmt: skip
        (
            ["--output", "o", "--text-column", "content", "--model", "smollm2-135"],
            "did you mean 'smollm2-135m'?",
        ),  # fmt: skip
    ],
)
def test_mistakes_fail_in_one_line_before_torch_transformers_or_ray_is_imported(
    args, message, jsonl, tmp_path, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # no hub to ask: no retries, no wait
    (tmp_path / "a-file").write_text("")
    args = [a.replace("{file}", str(tmp_path / "a-file")) for a in args]
    inputs = [] if "--input" in args else ["--input", str(jsonl)]
    code, err, heavy = error_and_heavy_modules(["score", *inputs, *args])
    assert code == 2 and err.count("\n") == 1 and message in err, err
    assert heavy == []


def test_verbose_is_accepted_after_the_sub_command_too(capsys):
    assert main(["score", "-v", "--output", "o", "--input", "missing.parquet"]) == 2
    assert main(["score", "--verbose", "--output", "o", "--input", "missing.parquet"]) == 2
    assert "Traceback" in capsys.readouterr().err


def terminal_run(command: list[str], columns: int = 120) -> str:
    """``command`` in a pseudo-terminal ``columns`` wide; all it printed."""
    parent, child = pty.openpty()
    fcntl.ioctl(child, termios.TIOCSWINSZ, struct.pack("HHHH", 40, columns, 0, 0))
    process = subprocess.Popen(command, stdin=child, stdout=child, stderr=child, close_fds=True)
    os.close(child)
    output = b""
    while True:
        ready, _, _ = select.select([parent], [], [], 1.0)
        if ready:
            try:
                chunk = os.read(parent, 65536)
            except OSError:  # the child side closed
                break
            if not chunk:
                break
            output += chunk
        elif process.poll() is not None:
            break
    process.wait()
    os.close(parent)
    return re.sub(r"\x1b\[[0-9;]*m", "", output.decode("utf-8", "replace"))  # colours: unseen


@pytest.mark.slow
def test_a_run_shows_only_a_progress_bar_and_its_summary_in_a_terminal(tiny_llama_dir, tmp_path):
    """(Without a terminal, progress lines: see test_pipeline_cluster's run beside a Ray.)"""
    write_parquet(tmp_path / "in.parquet", text=TEXTS)
    small = ["--set", "ray.block_rows=4", "--set", "data.commit_rows=4", "--model",
             str(tiny_llama_dir)]  # fmt: skip
    shown = terminal_run([MINKSCAN, "score", "--input", str(tmp_path / "in.parquet"),
                          "--output", str(tmp_path / "tty"), *small])  # fmt: skip
    screen = [line.strip() for line in shown.replace("\r", "\n").splitlines() if line.strip()]
    assert any(line.startswith("scoring:") and "40/40" in line for line in screen), shown
    assert any(line.startswith("scored 40 documents") for line in screen), shown
    # Each wait is named: Ray's start-up, then the bar's phase until the first rows arrive.
    assert screen[0] == "starting Ray on this machine (40 documents to score)", shown
    phases = ("starting Ray", "loading the model:", "scoring:", "scored 40 documents")
    others = [line for line in screen if not line.startswith(phases)]
    assert others == [], others  # no Ray notice, plan, hint, warning or error line


@pytest.mark.slow
def test_a_finished_output_is_answered_without_starting_ray(
    tiny_llama_dir, tmp_path, capsys, monkeypatch
):
    import ray

    write_parquet(tmp_path / "in.parquet", text=TEXTS[:3])
    args = ["score", "--input", str(tmp_path / "in.parquet"), "--output", str(tmp_path / "out"),
            "--model", str(tiny_llama_dir)]  # fmt: skip
    assert main(args) == 0
    capsys.readouterr()

    def no_ray(*_, **__):
        raise AssertionError("a finished output started Ray")

    monkeypatch.setattr(ray, "init", no_ray)
    assert main(args) == 0
    out = capsys.readouterr().out
    assert out == f"nothing to do: all 3 documents already scored in {tmp_path / 'out'}\n"
