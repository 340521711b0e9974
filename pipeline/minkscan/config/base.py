"""What every config section shares: strict sections (unknown keys fail), the defaults
named once, the config error, and local paths made absolute for actors."""

from __future__ import annotations

import os

from pydantic import BaseModel, ConfigDict

from minkscan.errors import UserError

# The model a run scores with unless told (a bundled name, `minkscan.models.names`).
DEFAULT_MODEL = "smollm2-135m"
DEFAULT_K_PERCENTAGES = [10, 20, 30, 40, 50, 60, 70, 80, 90, 100]


class ConfigError(UserError, ValueError):
    """A configuration value is missing, unknown or invalid; the message names the key."""


class Section(BaseModel):
    """A config section: unknown keys fail, assignments are validated."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)


def gpu_share(gpus: float) -> float:
    """GPUs of one actor: a share of one GPU, or whole GPUs that one replica is split over."""
    if gpus > 1 and not float(gpus).is_integer():
        raise ValueError(f"more than one GPU per actor must be a whole number, got {gpus}")
    return gpus


def local_path(value: str) -> str:
    """A relative local path made absolute (actors and jobs do not share the driver's working
    directory); URIs such as ``s3://`` are kept as they are."""
    if "://" in value:
        return value
    return os.path.abspath(os.path.expanduser(value))
