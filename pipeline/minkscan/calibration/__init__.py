"""Decision thresholds per scoring method, calibrated on known non-members (and members)."""

from minkscan.calibration.threshold import (
    Calibration,
    MethodCalibration,
    calibrate,
    is_flagged,
    load_calibration,
)

__all__ = ["Calibration", "MethodCalibration", "calibrate", "is_flagged", "load_calibration"]
