"""Ray job entry point for the nightly scan: score new/changed shards, report, diff.

    ray job submit --working-dir . -- python jobs/nightly_scan.py --config configs/nightly.yaml \
        --calibration calibration.json --report-dir nightly-report

Exits 1 when --fail-above is given and any shard's estimated contamination exceeds it.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "pipeline"))

from minkscan.calibration import load_calibration  # noqa: E402
from minkscan.config import ConfigError, load_config  # noqa: E402
from minkscan.reporting.nightly import nightly_scan  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", required=True, help="YAML ScanConfig (data.input/output)")
    parser.add_argument("--calibration", required=True, help="JSON from `minkscan calibrate`")
    parser.add_argument("--report-dir", required=True, type=Path)
    parser.add_argument("--fail-above", type=float, help="contamination bound per shard")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO)
    try:
        config = load_config(args.config)
    except ConfigError as error:
        print(f"nightly scan: {error}", file=sys.stderr)
        return 2
    result = nightly_scan(config, load_calibration(args.calibration), args.report_dir)
    changes = result.changes
    print(
        f"nightly scan: {len(changes.new)} new, {len(changes.changed)} changed, "
        f"{len(changes.unchanged)} unchanged, {len(changes.removed)} removed shards; "
        f"report in {args.report_dir}"
    )
    if args.fail_above is None:
        return 0
    summary = json.loads((args.report_dir / "report.json").read_text())
    primary = summary["primary_method"]
    return int(
        any(
            row["contamination"] > args.fail_above
            for row in summary["results"]
            if row["method"] == primary
        )
    )


if __name__ == "__main__":
    sys.exit(main())
