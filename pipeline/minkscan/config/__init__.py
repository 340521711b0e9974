"""The one typed configuration object that flows from YAML / CLI flags to every stage.

Every section rejects unknown keys, so a typo in a YAML file fails before any work
starts, with the dotted path of the offending key in the message. `base` holds what the
sections share and the defaults named once, `compute` the sections that decide what is
computed (model, scoring, baselines), `run` where a run reads and writes and how Ray runs
it, `loading` YAML and overrides. This package's public names are importable from it.
"""

from minkscan.config.base import DEFAULT_MODEL, ConfigError
from minkscan.config.compute import BaselinesConfig, ModelConfig, ScoringConfig
from minkscan.config.loading import build_config, load_config, yaml_problem
from minkscan.config.run import DataConfig, RayConfig, S3Config, ScanConfig, score_settings

__all__ = [
    "DEFAULT_MODEL",
    "BaselinesConfig",
    "ConfigError",
    "DataConfig",
    "ModelConfig",
    "RayConfig",
    "S3Config",
    "ScanConfig",
    "ScoringConfig",
    "build_config",
    "load_config",
    "score_settings",
    "yaml_problem",
]
