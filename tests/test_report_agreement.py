"""One contamination story in every output: what `minkscan report` prints on the terminal,
report.md, report.html and report.json say the same sentences with the same numbers, each
rounded the same way (`minkscan.reporting.numbers`)."""

from __future__ import annotations

import html
import json
import re
from html.parser import HTMLParser

import numpy as np
import polars as pl
from minkscan.calibration import calibrate
from minkscan.cli import main
from minkscan.reporting.numbers import significant_digits

NUMBER = r"(-?[0-9][0-9.e+-]*)"
NUMBERED = (  # the numbers of each kind of phrase, which must read alike wherever shown
    rf"p ([=<]) {NUMBER}",
    rf"(score >|threshold) {NUMBER}",
    rf"(D =) {NUMBER}",
    rf"(AUROC) {NUMBER}",
)


def numbers(pattern: str, text: str) -> set[tuple[str, str]]:
    return {(word, value.rstrip(".")) for word, value in re.findall(pattern, text)}


class _Text(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.parts: list[str] = []
        self.skip = 0

    def handle_starttag(self, tag, attrs) -> None:
        self.skip += tag in ("style", "svg", "script")

    def handle_endtag(self, tag) -> None:
        self.skip -= tag in ("style", "svg", "script")

    def handle_data(self, data) -> None:
        if not self.skip:
            self.parts.append(data)


def page_text(page: str) -> str:
    parser = _Text()
    parser.feed(page)
    return " ".join(" ".join(parser.parts).split())


def markdown_text(markdown: str) -> str:
    return " ".join(html.unescape(re.sub(r"\\([\\`*_\[\]|~])", r"\1", markdown)).split())


def frame(values, group: str, lengths) -> pl.DataFrame:
    n = len(values)
    return pl.DataFrame({
        "id": [f"{group}-{i}" for i in range(n)], "group": [group] * n, "status": ["ok"] * n,
        "n_tokens": lengths, "minkpp_k20": np.asarray(values, dtype=np.float64),
    })  # fmt: skip


def test_terminal_markdown_html_and_json_tell_one_story_with_the_same_numbers(tmp_path, capsys):
    rng = np.random.default_rng(0)
    calibrate(
        frame(rng.normal(0, 1, 2000), "cal", rng.integers(10, 80, 2000).tolist()),
        frame(rng.normal(2, 1, 60), "members", [40] * 60),
        n_resamples=50,
    ).write(str(tmp_path / "cal.json"))
    pl.concat([
        frame(np.concatenate([rng.normal(0, 1, 300), rng.normal(3, 1, 300)]), "long",
              rng.integers(40, 79, 600).tolist()),  # longer than the non-members: a warning
        frame(rng.normal(0, 1, 300), "clean", rng.integers(10, 80, 300).tolist()),
    ]).write_parquet(tmp_path / "scores.parquet")  # fmt: skip
    out = tmp_path / "report"
    assert main(["report", "--input", str(tmp_path / "scores.parquet"), "--calibration",
                 str(tmp_path / "cal.json"), "--group-column", "group", "--output",
                 str(out)]) == 0  # fmt: skip
    terminal, errors = capsys.readouterr()
    said = [" ".join(line.split()) for line in terminal.splitlines()
            if line.strip() and not line.startswith("wrote ")]  # fmt: skip
    warnings = [line.removeprefix("warning: ") for line in errors.splitlines()]
    markdown = markdown_text((out / "report.md").read_text())
    page = page_text((out / "report.html").read_text())
    summary = json.loads((out / "report.json").read_text())

    assert len(said) >= 3 and warnings, (terminal, errors)
    for sentence in said + warnings:
        assert sentence in markdown, sentence
        assert sentence in page, sentence
    assert summary["verdict"] == said[0]
    assert [g["verdict"] for g in summary["groups"]] == said[1 : 1 + len(summary["groups"])]
    assert summary["warnings"] == warnings
    # The page shows all the summary shows (and more), the terminal a part of it: every
    # number of each kind reads there as it reads here.
    for pattern in NUMBERED:
        shown = {value for _, value in numbers(pattern, markdown)}
        assert shown <= {value for _, value in numbers(pattern, page)}, pattern
        assert {v for _, v in numbers(pattern, " ".join(said + warnings))} <= shown, pattern
    assert numbers(NUMBERED[0], markdown)
    threshold = significant_digits(summary["threshold"])  # JSON keeps the exact value
    assert ("score >", threshold) in numbers(NUMBERED[1], markdown)
    assert ("threshold", threshold) in numbers(NUMBERED[1], page)
