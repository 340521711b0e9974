"""The pipeline is a list of stage specs built from the config: every stage finds the
columns it reads, the score files' columns come from the specs, and an extra-pass method's
stage and columns come from the registry."""

from __future__ import annotations

import subprocess
import sys

import pyarrow.fs as pafs
import pytest
from minkscan.config import build_config
from minkscan.distributed.pipeline import Destination, output_columns, score_stages
from minkscan.distributed.spec import StageSpec, deferred, unwired
from minkscan.io.inputs import DESCRIPTOR
from minkscan.schema import TEXT

WHERE = Destination(pafs.LocalFileSystem(), "/out")
CONFIGS = {
    "defaults": {},
    "token scores": {"scoring.token_scores": True},
    "every extra pass": {"baselines.lowercase": True, "baselines.neighbors": 2,
                         "baselines.reference_model": "gpt2", "baselines.gradnorm": True,
                         "baselines.recall_prefix": ["a known non-member"],
                         "baselines.conrecall_member_prefix": ["a known member"]},
    "kept text and a reference": {"data.keep_columns": ["text"],
                                  "baselines.reference_model": "gpt2"},
}  # fmt: skip


@pytest.mark.parametrize("overrides", CONFIGS.values(), ids=CONFIGS.keys())
def test_every_stage_reads_only_columns_an_earlier_stage_gives(overrides):
    stages = score_stages(build_config({}, overrides), WHERE)
    assert unwired(stages, [DESCRIPTOR]) == []


def test_a_stage_reading_a_column_nobody_gives_is_named():
    stages = score_stages(build_config({}, {}), WHERE)
    orphan = StageSpec("orphan", print, {}, cpus=0.25, takes=("nowhere",))
    assert unwired([*stages[:-1], orphan, stages[-1]], [DESCRIPTOR]) == ["orphan: nowhere"]


def test_extra_pass_stages_and_columns_come_from_the_registry():
    config = build_config({}, CONFIGS["every extra pass"])
    stages = score_stages(config, WHERE)
    assert [spec.name for spec in stages] == [
        "read", "tokenize", "score", "gradnorm", "reference", "commit"
    ]  # fmt: skip
    adds = {spec.name: spec.adds for spec in stages}
    assert adds["score"][-6:] == (
        "lowercase", "lowercase_n_tokens", "neighbor", "neighbor_source", "recall", "conrecall"
    )  # fmt: skip
    assert adds["gradnorm"] == ("gradnorm",) and adds["reference"] == ("ref", "ref_n_tokens")
    columns = output_columns(config, stages)
    for column in ("lowercase", "neighbor", "recall", "conrecall", "gradnorm", "ref"):
        assert columns.count(column) == 1
    assert TEXT not in columns  # read by the model stages, not kept


def test_the_driver_wires_model_stages_without_importing_model_code():
    """Stages named "module:name" reach Ray Data as stand-ins bearing the target's name; the
    target (torch, transformers) is imported where the stand-in runs, not by the driver,
    whose runner and commands import neither (seconds of every run's start-up)."""
    code = (
        "import sys\n"
        "import minkscan.commands.score, minkscan.commands.nightly, minkscan.distributed.runner\n"
        "from minkscan.config import build_config\n"
        "from minkscan.distributed.pipeline import Destination, score_stages\n"
        "import pyarrow.fs as pafs\n"
        "config = build_config({}, {'baselines.gradnorm': True})\n"
        "stages = score_stages(config, Destination(pafs.LocalFileSystem(), '/out'))\n"
        "names = [spec.callable().__name__ for spec in stages]\n"
        "assert 'torch' not in sys.modules and 'transformers' not in sys.modules\n"
        "print(names)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == [
        "['read_pieces',", "'tokenize',", "'ScoreStage',", "'PassStage',", "'CommitStage']"
    ]  # fmt: skip


def test_a_deferred_function_imports_its_target_on_its_first_call():
    wrapped = deferred("json:dumps", is_class=False)
    assert wrapped.__name__ == "dumps" and wrapped([1], indent=None) == "[1]"


@pytest.mark.parametrize(
    ("overrides", "rows"),
    [
        ({}, {"score": 256}),
        ({"baselines.lowercase": True}, {"score": 128}),
        ({"baselines.pac": True}, {"score": 42}),  # its 5 copies and the main pass
        ({"baselines.gradnorm": True, "baselines.reference_model": "gpt2"},
         {"score": 256, "gradnorm": 128, "reference": 256}),
        ({"ray.block_rows": 4, "baselines.pac": True}, {"score": 1}),
    ],
)  # fmt: skip
def test_a_model_stage_with_extra_passes_takes_fewer_rows_per_call(overrides, rows):
    """About a block's worth of forward passes per call, at least one row."""
    stages = {spec.name: spec for spec in score_stages(build_config({}, overrides), WHERE)}
    assert {name: stages[name].batch_rows for name in rows} == rows
