"""Ray job entry point for the nightly scan: `minkscan nightly` with the same flags.

    ray job submit --working-dir . -- python jobs/nightly_scan.py --config configs/nightly.yaml \
        --calibration calibration.json --report nightly-report
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "pipeline"))

from minkscan.cli import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main(["nightly", *sys.argv[1:]]))
