"""Building a `ScanConfig` from YAML and dotted-key overrides, with errors that name the
file, key, line and column."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from minkscan.config.base import ConfigError
from minkscan.config.run import ScanConfig


def _format_validation_error(error: ValidationError) -> str:
    lines = []
    for item in error.errors():
        key = ".".join(str(part) for part in item["loc"]) or "<root>"
        if item["type"] == "extra_forbidden":
            lines.append(f"unknown key '{key}'")
        else:
            lines.append(f"'{key}': {item['msg']}")
    return "invalid configuration: " + "; ".join(lines)


def _set_dotted(tree: dict[str, Any], dotted_key: str, value: Any) -> None:
    parts = dotted_key.split(".")
    node = tree
    for part in parts[:-1]:
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            raise ConfigError(f"'{dotted_key}': '{part}' is not a section")
        node = child
    node[parts[-1]] = value


def build_config(
    raw: dict[str, Any] | None = None, overrides: dict[str, Any] | None = None
) -> ScanConfig:
    """Validate a nested dict plus dotted-key overrides (``{"model.name": ...}``) into a ScanConfig.

    Overrides whose value is None are ignored, so unset CLI flags keep the YAML value.
    """
    tree: dict[str, Any] = dict(raw or {})
    for key, value in (overrides or {}).items():
        if value is not None:
            _set_dotted(tree, key, value)
    try:
        return ScanConfig.model_validate(tree)
    except ValidationError as error:
        raise ConfigError(_format_validation_error(error)) from None


class _UniqueKeys(yaml.SafeLoader):
    """YAML's safe loader, refusing a key given twice in one mapping (YAML keeps the last
    silently: a section written twice would lose the first)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            line = key_node.start_mark.line + 1
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None,
                    f"key '{key}' is given twice (lines {seen[key]} and {line}); keep one",
                    key_node.start_mark,
                )  # fmt: skip
            seen[key] = line
        return super().construct_mapping(node, deep)


def read_yaml(text: str) -> Any:
    """YAML text as Python values, a key given twice in one mapping refused."""
    return yaml.load(text, Loader=_UniqueKeys)  # noqa: S506 -- a SafeLoader subclass


def yaml_problem(error: yaml.YAMLError) -> str:
    """A YAML error as 'invalid YAML at line L, column C: problem' (1-based)."""
    mark = getattr(error, "problem_mark", None)
    problem = getattr(error, "problem", None) or str(error).splitlines()[0]
    where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
    return f"invalid YAML{where}: {problem}"


def load_config(
    path: str | Path | None = None, overrides: dict[str, Any] | None = None
) -> ScanConfig:
    """Read a YAML file (optional) and apply dotted-key overrides; fail early on any bad key."""
    raw: dict[str, Any] = {}
    if path is not None:
        path = Path(path)
        if not path.is_file():
            raise ConfigError(f"config file not found: {path}")
        try:
            loaded = read_yaml(path.read_text()) or {}
        except yaml.YAMLError as error:
            raise ConfigError(f"{path}: {yaml_problem(error)}") from None
        if not isinstance(loaded, dict):
            raise ConfigError(f"{path}: top level must be a mapping of sections")
        raw = loaded
    return build_config(raw, overrides)
