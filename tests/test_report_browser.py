"""The HTML report renders in headless Chromium (screenshot on disk) with no console messages,
and its first screen shows the verdict."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from minkscan.calibration import calibrate
from minkscan.reporting import build_report, write_report

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = pytest.mark.skipif(
    CHROMIUM is None, reason="no chromium binary (`apt-get install -y chromium`, see .ci/setup)"
)


def render(page: Path, screenshot: Path, size: str = "1200,2400") -> list[str]:
    """Screenshot ``page`` headlessly; return the console lines Chromium logged for it."""
    completed = subprocess.run(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--enable-logging=stderr",
         "--v=0", "--allow-file-access-from-files", "--virtual-time-budget=5000",
         f"--window-size={size}", f"--screenshot={screenshot}", page.as_uri()],
        capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    return [line for line in completed.stderr.splitlines() if ":CONSOLE" in line]


# A page of the test's own that frames the report at a laptop's first screen (1200 x 800)
# and logs where the verdict box lies; the report itself runs no script.
PROBE = """<html><body style="margin:0"><iframe id="f" src="report.html"
style="width:1200px;height:800px;border:0"></iframe><script>
document.getElementById("f").onload = function () {
  var box = this.contentDocument.querySelector(".verdict").getBoundingClientRect();
  console.log("VERDICT " + Math.round(box.top) + " " + Math.round(box.bottom) + " "
              + this.contentDocument.querySelector(".verdict").textContent);
};</script></body></html>"""


def test_console_errors_of_a_broken_page_are_detected(tmp_path: Path) -> None:
    page = tmp_path / "broken.html"
    page.write_text("<html><body><script>missingFunction();</script></body></html>")
    assert any("missingFunction" in line for line in render(page, tmp_path / "broken.png"))


def test_report_renders_with_no_console_messages_and_a_screenshot(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    frame = pl.DataFrame(
        {
            "id": [str(i) for i in range(400)],
            "text": ["<script>alert(1)</script>"] + ["text"] * 399,
            "status": ["ok"] * 400,
            "n_tokens": [32] * 400,
            "minkpp_k20": np.concatenate([rng.normal(0, 1, 300), rng.normal(2, 1, 100)]),
            "label": [0] * 300 + [1] * 100,
        }
    )
    calibration = calibrate(
        frame.filter(pl.col("label") == 0), frame.filter(pl.col("label") == 1), n_resamples=50
    )
    report = build_report(frame.lazy(), calibration, model="tiny-model")
    html_path = Path(write_report(report, tmp_path)[0])
    screenshot = tmp_path / "report.png"
    assert render(html_path, screenshot) == []
    assert screenshot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert screenshot.stat().st_size > 10_000  # tables and plots, not a blank page

    probe = tmp_path / "probe.html"
    probe.write_text(PROBE)
    lines = render(probe, tmp_path / "first-screen.png", size="1200,800")
    verdict = next(line for line in lines if "VERDICT" in line)
    top, bottom = (int(n) for n in verdict.split("VERDICT ")[1].split()[:2])
    assert 0 <= top < bottom <= 800  # the verdict is on the first screen
    assert report.headline() in verdict
