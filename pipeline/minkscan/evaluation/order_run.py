"""`minkscan order-test` as a run: a benchmark file's examples, in published order, turned
into orderings (`minkscan.evaluation.order_test`) that the scoring pipeline scores, and the
test's result.

Each shard's published order and its seeded shuffles become rows of ``orderings.parquet``
(one Parquet row group per shard), scored by `minkscan.distributed.run_scoring` into
``scores/`` like any corpus: the same Ray actor pools and `DocumentScorer`, one forward
pass per ordering (sliding windows where an ordering is longer than the context), and the
same resume, so a killed order test re-runs only the shards it had not committed. The
orderings' settings are kept in ``order_plan.json``; a re-run with other settings, input or
examples is refused, naming what differs. An ordering's log-likelihood is its Loss (mean
log p) times its scored tokens.
"""

from __future__ import annotations

import hashlib
import json
import string
from collections.abc import Sequence
from dataclasses import asdict

import numpy as np
import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from minkscan.config import S3Config, ScanConfig
from minkscan.errors import UserError
from minkscan.evaluation.exchangeability import exchangeability_check
from minkscan.evaluation.order_test import (
    Cost,
    OrderSettings,
    OrderTestResult,
    order_statistics,
    shard_bounds,
    shuffled_orders,
)
from minkscan.io.inputs import InputError, InputFile, column_names, discover
from minkscan.io.paths import filesystem_for, fs_path, join, write_text
from minkscan.io.reading import read_file
from minkscan.io.record import differences
from minkscan.methods import LOSS
from minkscan.schema import (
    CHARS_PER_TOKEN,
    ID,
    N_TOKENS,
    ORDER,
    ORDER_PLAN,
    ORDER_RESULT,
    ORDER_SCORES,
    ORDERINGS,
    PARQUET,
    SCORED_STATUSES,
    SHARD,
    STATUS,
    TEXT,
)
from minkscan.scoring.windows import plan_windows


def template_fields(template: str) -> list[str]:
    """The column names a ``str.format`` template reads, in order, once each."""
    try:
        fields = [name for _, name, _, _ in string.Formatter().parse(template) if name]
    except ValueError as error:
        raise InputError(f"--template {template!r}: {error}") from None
    if any(not name.isidentifier() for name in fields):
        raise InputError(f"--template {template!r}: fields must be plain column names")
    return list(dict.fromkeys(fields))


def _cell(value: object) -> str:
    """A column value as example text: lists (choices) one per line, None as ''."""
    if value is None:
        return ""
    if isinstance(value, list):
        return "\n".join(_cell(item) for item in value)
    return str(value)


def read_examples(config: ScanConfig, template: str | None) -> tuple[list[str], list[str]]:
    """Each example's text, in published order (files in path order, rows in file order,
    the first ``data.limit`` only), and the files read. A template naming a column no
    file has is refused before anything is scored."""
    data = config.data
    fs = filesystem_for(list(data.input), data.s3)
    files = discover(list(data.input), fs, format=data.format, root=data.input_root).files
    columns = template_fields(template) if template else [data.text_column]
    rows: list[str] = []
    for index, file in enumerate(files):
        table = read_file(fs, file, columns)
        missing = [c for c in columns if c not in table.column_names]
        if missing:
            flag = "--template" if template else "--text-column"
            raise InputError(f"{flag}: {file.path} has no column(s) {missing} (it has "
                             f"{', '.join(_all_columns(fs, file)[:12])})")  # fmt: skip
        values = table.select(columns).to_pylist()
        if template:
            rows += [template.format(**{k: _cell(v) for k, v in row.items()}) for row in values]
        else:
            rows += [_cell(row[columns[0]]) for row in values]
        if data.limit is not None and len(rows) >= data.limit:
            return rows[: data.limit], [file.path for file in files[: index + 1]]
    return rows, [file.path for file in files]


def _all_columns(fs: pafs.FileSystem, file: InputFile) -> list[str]:
    """The columns a file has (for the message that names a missing one)."""
    if file.format == PARQUET:
        with fs.open_input_file(file.path) as handle:
            return pq.ParquetFile(handle).schema_arrow.names
    return column_names(fs, file) or ["none"]


def orderings_table(examples: Sequence[str], settings: OrderSettings) -> pa.Table:
    """One row per (shard, order): order 0 joins the shard's examples in published order,
    orders 1..P in the shard's seeded shuffles."""
    ids, texts, shards, orders = [], [], [], []
    bounds = shard_bounds(len(examples), settings.shards)
    for shard, (start, end) in enumerate(bounds):
        part = list(examples[start:end])
        published = list(range(len(part)))
        shuffles = shuffled_orders(len(part), settings.permutations, settings.seed, shard)
        for order, indices in enumerate([published, *shuffles]):
            ids.append(f"shard-{shard:05d}-order-{order:05d}")
            texts.append(settings.separator.join(part[i] for i in indices))
            shards.append(shard)
            orders.append(order)
    return pa.table({ID: ids, TEXT: texts, SHARD: shards, ORDER: orders})


def order_config(config: ScanConfig, output: str, settings: OrderSettings) -> ScanConfig:
    """The scoring run over the orderings: one piece, one block and one commit per shard
    (a killed run keeps every shard it finished), orderings over the context scored with
    sliding windows (stride: half the context unless set)."""
    per_shard = settings.permutations + 1
    data = config.data.model_copy(update={
        "input": [join(output, ORDERINGS)], "output": join(output, ORDER_SCORES),
        "format": None, "text_column": TEXT, "id_column": ID, "keep_columns": [SHARD, ORDER],
        "limit": None, "piece_rows": per_shard, "commit_rows": per_shard, "check_ids": False,
        "input_root": None,
    })  # fmt: skip
    scoring = config.scoring
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


def _write_orderings(
    fs: pafs.FileSystem, output: str, table: pa.Table, plan: dict, s3: S3Config
) -> None:
    """Write the orderings and their plan, or keep them when a run with the same plan wrote
    them (re-writing would change the scored input under a resumable output)."""
    plan_path = fs_path(join(output, ORDER_PLAN))
    if fs.get_file_info(plan_path).type == pafs.FileType.File:
        with fs.open_input_stream(plan_path) as stream:
            recorded = json.loads(stream.read())
        changed = differences(recorded, plan)
        if changed:
            raise UserError(
                f"{output} holds an order test with other settings or input "
                f"({'; '.join(changed[:4])}); give a new --output"
            )
        if fs.get_file_info(fs_path(join(output, ORDERINGS))).type == pafs.FileType.File:
            return
    if isinstance(fs, pafs.LocalFileSystem):
        fs.create_dir(fs_path(output), recursive=True)
    per_shard = plan["permutations"] + 1
    with fs.open_output_stream(fs_path(join(output, ORDERINGS))) as stream:
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


def run_order_test(
    config: ScanConfig, settings: OrderSettings, output: str, *, alpha: float = 0.05,
    resamples: int = 999, announce=print,
) -> OrderTestResult:  # fmt: skip
    """Read, plan, score (resuming) and test; writes ``order_test.json`` in ``output``."""
    from minkscan.distributed.plan import plan_run
    from minkscan.distributed.runner import run_scoring
    from minkscan.io.scores import read_scores

    examples, inputs = read_examples(config, settings.template)
    try:
        table = orderings_table(examples, settings)
    except ValueError as error:
        raise InputError(str(error)) from None
    digest = hashlib.sha256("\x1e".join(table[TEXT].to_pylist()).encode()).hexdigest()[:16]
    plan = asdict(settings) | {"inputs": inputs, "examples": len(examples), "orderings": digest}
    fs = filesystem_for([output], config.data.s3)
    _write_orderings(fs, output, table, plan, config.data.s3)
    scoring = order_config(config, output, settings)
    announce(f"order test: {len(examples)} examples in {settings.shards} shards, the "
             f"published order and {settings.permutations} shuffles of each; "
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
    result = OrderTestResult(
        settings=settings,
        inputs=inputs,
        examples=len(examples),
        model=config.model.name,
        alpha=alpha,
        cost=cost,
        statistics=order_statistics(published, shuffled),
        exchangeability=exchangeability_check(examples, resamples=resamples, seed=settings.seed),
    )
    write_text(join(output, ORDER_RESULT), json.dumps(result.to_json(), indent=2), config.data.s3)
    return result
