"""Ray job entry point for corpus scoring.

    ray job submit --working-dir . -- python jobs/score.py --config configs/cluster-gpu.yaml

Inside a Ray job, RAY_ADDRESS points at the cluster, so the pipeline joins it instead of
starting an embedded Ray. Same flags as `minkscan score`.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pipeline.commands.score import add_score_arguments, run  # noqa: E402
from pipeline.config import ConfigError  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_score_arguments(parser)
    logging.basicConfig(level=logging.INFO)
    try:
        return run(parser.parse_args(argv))
    except ConfigError as error:
        print(f"score job: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
