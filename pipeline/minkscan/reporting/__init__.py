"""Contamination reports over a whole scored dataset at calibrated thresholds."""

from minkscan.reporting.build import build_report
from minkscan.reporting.groups import GroupResult
from minkscan.reporting.render import write_report
from minkscan.reporting.summary import Report

__all__ = ["GroupResult", "Report", "build_report", "write_report"]
