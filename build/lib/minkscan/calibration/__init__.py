"""Decision thresholds per scoring method, calibrated on known non-members (and members)."""

from minkscan.calibration.threshold import (
    Calibration,
    MethodCalibration,
    calibrate,
    load_calibration,
    scan_scores,
)

__all__ = ["Calibration", "MethodCalibration", "calibrate", "load_calibration", "scan_scores"]
