"""The Ray Data scoring pipeline; `run_scoring(config)` is the entry point for other layers."""

from pipeline.distributed.runner import RunSummary, run_scoring

__all__ = ["RunSummary", "run_scoring"]
