"""What README's and docs/' examples tests share: finding every example of a Markdown page in
order (shell commands with continuation lines joined, fenced Python and YAML blocks) and
running one as a user would (`minkscan` in this process through `minkscan.cli.main`, `export`
into the examples' environment, `ray job submit` against a loopback head), checking its exit
status."""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Callable
from pathlib import Path

import yaml
from helpers import BIN, REPO, submit_job
from minkscan.cli import main
from minkscan.config import build_config

# Commands the pages show that the examples tests do not run, and why.
NOT_RUN = {
    "bash .ci/setup": "it is what CI runs before these tests",
    ".venv/bin/python -m pytest": "it is this very suite",
    "pip install": "the install recipe is .ci/wheel-smoke's test",
    "pip wheel": "the install recipe is .ci/wheel-smoke's test",
}
# Documented exit codes other than 0: a gate may fail (1) or be inconclusive (3) on the
# sample's data.
MAY_FAIL = ("--fail-above",)


def examples(text: str) -> list[tuple[str, str]]:
    """(kind, code) of every example in order: 'shell' for a command (continuation lines
    joined), 'python' and 'yaml' for fenced blocks of those."""
    found: list[tuple[str, str]] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        fence = re.match(r"^```(\w+)", line)
        if fence:
            end = lines.index("```", i + 1)
            body = lines[i + 1 : end]
            if fence.group(1) == "bash":
                found += [("shell", c) for c in _commands(body)]
            else:
                found.append((fence.group(1), "\n".join(body)))
            i = end + 1
            continue
        if line.startswith("    ") and (i == 0 or not lines[i - 1].strip()):
            block = []
            while i < len(lines) and (lines[i].startswith("    ") or not lines[i].strip()):
                block.append(lines[i][4:])
                i += 1
            found += [("shell", c) for c in _commands(block)]
            continue
        i += 1
    return found


def _commands(lines: list[str]) -> list[str]:
    joined, current = [], ""
    for line in lines:
        line = line.rstrip()
        if current:
            current += " " + line.strip()
        elif line.strip() and not line.lstrip().startswith("#"):
            current = line.strip()
        if current and not current.endswith("\\"):
            joined.append(re.sub(r"\s+#\s.*$", "", current))
            current = ""
        elif current:
            current = current[:-1].rstrip()
    return joined


Head = Callable[[], tuple[str, str]]  # starts (once) a loopback Ray head: address, token


def run_page(text: str, env: dict[str, str], head: Head | None = None) -> int:
    """Run every example of a page in order in the current directory, asserting each one's
    exit status; returns how many shell commands ran. ``head`` is called where a command
    needs a Ray head (an `export` of its token, a `ray job submit`)."""
    ran = 0
    for kind, code in examples(text):
        if kind == "yaml":
            build_config(yaml.safe_load(code))  # a config section: it must validate
            continue
        if kind == "python":
            exec(compile(code, "<example>", "exec"), {})
            continue
        for command in code.split(" && "):
            if any(command.startswith(prefix) for prefix in NOT_RUN):
                continue
            status, printed = run_shell(command, env, head)
            allowed = (0, 1, 3) if any(flag in command for flag in MAY_FAIL) else (0,)
            assert status in allowed, f"{command} exited {status}\n{printed}"
            if command.startswith("ray job submit"):
                assert "scored 16 documents" in printed, printed[-3000:]
            ran += 1
    return ran


def run_shell(command: str, env: dict[str, str], head: Head | None) -> tuple[int, str]:
    """Run one command; returns its exit code and what it printed (for a job)."""
    if command.startswith("export "):
        assert head is not None, f"an export needs the loopback head: {command}"
        command = command.replace("<the token the head was started with>", head()[1])
        for assignment in shlex.split(command)[1:]:
            name, _, value = assignment.partition("=")
            env[name] = value
        return 0, ""
    if command.startswith("ray job submit"):
        assert head is not None, f"a job needs the loopback head: {command}"
        command = command.replace("http://HEAD:8265", f"http://{head()[0]}")
        environment = os.environ | env | {"PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"}
        result = submit_job(shlex.split(command), environment, REPO)
        return result.returncode, result.stdout + result.stderr
    words = shlex.split(command)
    program = Path(words[0]).name
    assert program == "minkscan", f"example not understood by the examples tests: {command}"
    try:
        return main(words[1:]), ""
    except SystemExit as exit_:  # --version, --help
        return int(exit_.code or 0), ""
