"""Cluster manifests under infra/ parse, ask for one GPU per worker, and name real files."""

from __future__ import annotations

import importlib.metadata
import re
from pathlib import Path

import pytest
import yaml
from minkscan.config import load_config

ROOT = Path(__file__).resolve().parents[1]
INFRA = ROOT / "infra"
MANIFESTS = sorted(INFRA.rglob("*.yaml"))
REPO_PATH = re.compile(r"\b((?:jobs|configs|pipeline)/[\w./-]+\.(?:py|yaml))\b")


def test_every_manifest_parses_as_yaml() -> None:
    assert len(MANIFESTS) >= 3
    for manifest in MANIFESTS:
        documents = [doc for doc in yaml.safe_load_all(manifest.read_text()) if doc]
        assert documents, f"{manifest} is empty"


@pytest.mark.parametrize("manifest", MANIFESTS + [INFRA / "Dockerfile", INFRA / "README.md"],
                         ids=lambda path: path.name)  # fmt: skip
def test_every_entry_point_and_config_a_manifest_names_exists(manifest: Path) -> None:
    for named in REPO_PATH.findall(manifest.read_text()):
        assert (ROOT / named).exists(), f"{manifest.name} names missing {named}"
        if named.startswith("configs/"):
            load_config(ROOT / named)


def test_dockerfile_copies_only_paths_that_exist() -> None:
    for line in (INFRA / "Dockerfile").read_text().splitlines():
        if line.startswith("COPY "):
            for source in line.split()[1:-1]:
                assert (ROOT / source).exists(), source


def test_kuberay_gpu_workers_get_one_gpu_each_matching_ray_resources() -> None:
    for name in ("raycluster.yaml", "rayjob-score.yaml"):
        spec = yaml.safe_load((INFRA / "kuberay" / name).read_text())["spec"]
        spec = spec.get("rayClusterSpec", spec)
        (group,) = spec["workerGroupSpecs"]
        (container,) = group["template"]["spec"]["containers"]
        assert container["resources"]["limits"]["nvidia.com/gpu"] == "1"
        assert group["rayStartParams"]["num-gpus"] == "1"


def test_rayjob_entry_point_is_the_score_job_with_a_one_gpu_per_actor_config() -> None:
    job = yaml.safe_load((INFRA / "kuberay" / "rayjob-score.yaml").read_text())
    script, flag, config_path = job["spec"]["entrypoint"].split()[1:4]
    assert script == "jobs/score.py" and flag == "--config"
    assert load_config(ROOT / config_path).ray.gpus_per_actor == 1


def test_every_ray_pin_is_the_tested_ray_version() -> None:
    """pyproject's floor, the image's base tag and every manifest's rayVersion agree, and are
    the Ray this suite runs on: the shipped cluster setup runs the code as tested."""
    floor = re.search(r'"ray\[[^\]]*\]>=([\d.]+)"', (ROOT / "pyproject.toml").read_text())
    base = re.search(r"rayproject/ray:([\d.]+)-", (INFRA / "Dockerfile").read_text())
    assert floor and base
    pins = {"pyproject": floor.group(1) + ".0", "Dockerfile": base.group(1)}
    for manifest in MANIFESTS:
        for document in yaml.safe_load_all(manifest.read_text()):
            spec = (document or {}).get("spec", {})
            for holder in (spec, spec.get("rayClusterSpec", {})):
                if "rayVersion" in holder:
                    pins[manifest.name] = holder["rayVersion"]
    assert len(pins) >= 4
    assert set(pins.values()) == {importlib.metadata.version("ray")}, pins
