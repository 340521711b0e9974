"""Ray job entry point for corpus scoring: `minkscan score` with the same flags.

    ray job submit --working-dir . -- python jobs/score.py --config configs/cluster-gpu.yaml

Inside a Ray job, RAY_ADDRESS points at the cluster, so the pipeline joins it instead of
starting an embedded Ray. The package is imported from this checkout's pipeline/ folder
when it is not installed in the job's Python.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "pipeline"))

from minkscan.cli import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main(["score", *sys.argv[1:]]))
