"""Contamination reports over a whole scored dataset at calibrated thresholds."""

from minkscan.reporting.render import write_report
from minkscan.reporting.summary import GroupResult, Report, build_report

__all__ = ["GroupResult", "Report", "build_report", "write_report"]
