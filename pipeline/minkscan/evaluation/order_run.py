"""`minkscan order-test` as a run: a benchmark file's examples (`minkscan.evaluation.
order_examples`), in published order, turned into orderings (`minkscan.evaluation.order_test`)
that the scoring pipeline scores, and the test's result.

Each shard's published order and its seeded shuffles become rows of ``orderings.parquet``
(one Parquet row group per shard): the examples in that order with `PART_SEPARATOR` between
them, which the scorer splits at and tokenises part by part (`scoring.part_separator`), so
an ordering is the concatenation of its examples' token lists, as the authors score it, and
every ordering of a shard holds the same tokens. They are scored by
`minkscan.distributed.run_scoring` into ``scores/`` like any corpus: the same Ray actor
pools and `DocumentScorer`, one forward pass per ordering (sliding windows where an ordering
is longer than the context), and the same resume, so a killed order test re-runs only the
shards it had not committed. The orderings' settings are kept in ``order_plan.json``; a
re-run with other settings, input or examples is refused, naming what differs. An
ordering's log-likelihood is its Loss (mean log p) times its scored tokens.

Settings that cannot reach the test level (`plan_problem`) are refused before anything is
written, and an output directory holding files the order test did not write is refused.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import asdict, replace

import numpy as np
import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from minkscan.config import S3Config, ScanConfig
from minkscan.errors import UserError
from minkscan.evaluation.exchangeability import exchangeability_check
from minkscan.evaluation.order_examples import PART_SEPARATOR, Examples, read_examples
from minkscan.evaluation.order_shards import (
    DEFAULT_PERMUTATIONS,
    default_permutations,
    plan_problem,
    shard_bounds,
    shuffled_orders,
)
from minkscan.evaluation.order_test import Cost, OrderSettings, OrderTestResult, order_statistics
from minkscan.io.inputs import InputError
from minkscan.io.ownership import check_apart, check_owned
from minkscan.io.paths import filesystem_for, fs_path, join, write_text
from minkscan.io.record import differences
from minkscan.methods import LOSS
from minkscan.models.identity import model_identity
from minkscan.schema import (
    CHARS_PER_TOKEN,
    ID,
    N_TOKENS,
    ORDER,
    ORDER_PLAN,
    ORDER_RESULT,
    ORDER_SCORES,
    ORDERINGS,
    SCORED_STATUSES,
    SHARD,
    STATUS,
    TEXT,
)
from minkscan.scoring.windows import plan_windows

# What an order test's output directory holds; anything else there is not its own.
ORDER_NAMES = frozenset({ORDERINGS, ORDER_PLAN, ORDER_SCORES, ORDER_RESULT})


def orderings_table(examples: Sequence[str], settings: OrderSettings) -> pa.Table:
    """One row per (shard, order): order 0 holds the shard's examples in published order,
    orders 1..P its seeded shuffles, examples apart by `PART_SEPARATOR`."""
    ids, texts, shards, orders = [], [], [], []
    for shard, (start, end) in enumerate(shard_bounds(len(examples), settings.shards)):
        part = list(examples[start:end])
        published = list(range(len(part)))
        shuffles = shuffled_orders(len(part), settings.permutations, settings.seed, shard)
        for order, indices in enumerate([published, *shuffles]):
            ids.append(f"shard-{shard:05d}-order-{order:05d}")
            texts.append(PART_SEPARATOR.join(part[i] for i in indices))
            shards.append(shard)
            orders.append(order)
    return pa.table({ID: ids, TEXT: texts, SHARD: shards, ORDER: orders})


def order_config(config: ScanConfig, output: str, settings: OrderSettings) -> ScanConfig:
    """The scoring run over the orderings: each example tokenised on its own, one piece,
    one block and one commit per shard (a killed run keeps every shard it finished),
    orderings over the context scored with sliding windows (stride: half the context
    unless set)."""
    per_shard = settings.permutations + 1
    data = config.data.model_copy(update={
        "input": [join(output, ORDERINGS)], "output": join(output, ORDER_SCORES),
        "format": None, "text_column": TEXT, "id_column": ID, "keep_columns": [SHARD, ORDER],
        "limit": None, "piece_rows": per_shard, "commit_rows": per_shard, "check_ids": False,
        "input_root": None,
    })  # fmt: skip
    scoring = config.scoring.model_copy(update={"part_separator": PART_SEPARATOR})
    if scoring.window_stride is None:
        scoring = scoring.model_copy(update={"window_stride": max(1, scoring.max_tokens // 2)})
    # A shard per Ray Data block too: each shard is committed as soon as it is scored.
    ray = config.ray.model_copy(update={"block_rows": per_shard})
    return config.model_copy(update={"data": data, "scoring": scoring, "ray": ray})


def _passes(ids: int, config: ScanConfig) -> int:
    """Forward passes over an ordering of ``ids`` token ids."""
    scoring = config.scoring
    if ids <= scoring.max_tokens:
        return 1
    return len(plan_windows(ids, scoring.max_tokens, scoring.window_stride))


def estimated_cost(table: pa.Table, config: ScanConfig) -> Cost:
    """The cost before scoring, from characters (`CHARS_PER_TOKEN` per token)."""
    tokens = [max(2, len(text) // CHARS_PER_TOKEN) for text in table[TEXT].to_pylist()]
    return Cost(table.num_rows, sum(_passes(n, config) for n in tokens), sum(tokens))


def check_output(fs: pafs.FileSystem, output: str, own: frozenset[str] = ORDER_NAMES) -> None:
    """Refuse an output directory holding anything but what the order test writes."""
    check_owned(output, own, "--output", fs)


def _write_orderings(
    fs: pafs.FileSystem, output: str, table: pa.Table, plan: dict, s3: S3Config
) -> None:
    """Write the orderings and their plan, or keep them when a run with the same plan wrote
    them (re-writing would change the scored input under a resumable output)."""
    check_output(fs, output)
    plan_path = fs_path(join(output, ORDER_PLAN))
    orderings = fs_path(join(output, ORDERINGS))
    if fs.get_file_info(plan_path).type == pafs.FileType.File:
        with fs.open_input_stream(plan_path) as stream:
            recorded = json.loads(stream.read())
        changed = differences(recorded, plan)
        if changed:
            raise UserError(
                f"{output} holds an order test with other settings or input "
                f"({'; '.join(changed[:4])}); give a new --output"
            )
        if fs.get_file_info(orderings).type == pafs.FileType.File:
            return
    elif fs.get_file_info(orderings).type != pafs.FileType.NotFound:
        raise UserError(f"{output} holds {ORDERINGS} without the plan the order test writes "
                        "with it: give a new --output")  # fmt: skip
    if isinstance(fs, pafs.LocalFileSystem):
        fs.create_dir(fs_path(output), recursive=True)
    per_shard = plan["permutations"] + 1
    with fs.open_output_stream(orderings) as stream:
        pq.write_table(table, stream, row_group_size=per_shard)
    write_text(join(output, ORDER_PLAN), json.dumps(plan, indent=2), s3)


def log_likelihoods(scores: pa.Table, shards: int, permutations: int) -> tuple[np.ndarray, ...]:
    """(published [shards], shuffled [shards, P]) log-likelihoods from the score rows."""
    rows = scores.select([SHARD, ORDER, LOSS, N_TOKENS, STATUS]).to_pylist()
    unscored = [row for row in rows if row[STATUS] not in SCORED_STATUSES]
    if unscored:
        raise UserError(f"{len(unscored)} orderings could not be scored (status "
                        f"{unscored[0][STATUS]}); the examples may be empty")  # fmt: skip
    grid = np.full((shards, permutations + 1), np.nan)
    for row in rows:
        grid[row[SHARD], row[ORDER]] = row[LOSS] * row[N_TOKENS]
    return grid[:, 0], grid[:, 1:]


def planned(
    config: ScanConfig, settings: OrderSettings, alpha: float
) -> tuple[OrderSettings, Examples]:
    """The settings (shuffles per shard resolved where left to `default_permutations`) and
    the examples, read and checked, once the settings are known to be able to answer at
    ``alpha`` (both refused in one line before anything is written or scored)."""
    examples = read_examples(config, settings.examples, settings.template, settings.separator)
    n = len(examples.texts)
    if settings.permutations is None:
        permutations = default_permutations(n, settings.shards, DEFAULT_PERMUTATIONS)
        settings = replace(settings, permutations=permutations)
    problem = plan_problem(n, settings.shards, settings.permutations, alpha)
    if problem:
        raise InputError(problem)
    return settings, examples


def run_order_test(
    config: ScanConfig, settings: OrderSettings, output: str, *, alpha: float = 0.05,
    resamples: int = 999, announce=print,
    prepared: tuple[OrderSettings, Examples] | None = None,
) -> OrderTestResult:  # fmt: skip
    """Read and check (unless ``prepared`` by `planned`), plan, score (resuming) and test;
    writes ``order_test.json`` in ``output``."""
    from minkscan.distributed.plan import plan_run
    from minkscan.distributed.runner import run_scoring
    from minkscan.io.score_reader import read_scores

    settings, examples = prepared or planned(config, settings, alpha)
    texts = examples.texts
    table = orderings_table(texts, settings)
    digest = hashlib.sha256("\x1e".join(table[TEXT].to_pylist()).encode()).hexdigest()[:16]
    plan = asdict(settings) | {"inputs": examples.files, "examples": len(texts),
                               "orderings": digest}  # fmt: skip
    fs = filesystem_for([output], config.data.s3)
    check_apart(fs_path(output), list(config.data.input), examples.files)
    _write_orderings(fs, output, table, plan, config.data.s3)
    scoring = order_config(config, output, settings)
    announce(f"order test: {len(texts)} examples ({settings.scored()}) in {settings.shards} "
             f"shards, the published order and {settings.permutations} shuffles of each; "
             f"{estimated_cost(table, scoring).line(estimate=True)}")  # fmt: skip
    if plan_run(scoring).to_score:
        announce(run_scoring(scoring).line())
    data = read_scores(scoring.data.output, scoring.data.s3)
    scored = data.table
    if scored.num_rows != table.num_rows:
        raise UserError(f"{scoring.data.output} holds {scored.num_rows} of "
                        f"{table.num_rows} orderings; re-run to finish")  # fmt: skip
    published, shuffled = log_likelihoods(scored, settings.shards, settings.permutations)
    ids = [n + 1 for n in scored[N_TOKENS].to_pylist()]  # scored tokens + the first
    cost = Cost(table.num_rows, sum(_passes(n, scoring) for n in ids), sum(ids))
    bounds = shard_bounds(len(texts), settings.shards)
    result = OrderTestResult(
        settings=settings,
        inputs=examples.files,
        examples=len(texts),
        model=config.model.name,
        alpha=alpha,
        cost=cost,
        statistics=order_statistics(published, shuffled),
        exchangeability=exchangeability_check(
            texts, resamples=resamples, seed=settings.seed, bounds=bounds, numeric=examples.numeric
        ),  # fmt: skip
        examples_read=examples.read,
        input_content=examples.content,
        weights=model_identity(config.model).get("weights"),
    )
    write_text(join(output, ORDER_RESULT), json.dumps(result.to_json(), indent=2), config.data.s3)
    return result
