"""Labelled inputs (`read_labelled`, what `benchmark` reads) and membership labels as users
give them: 1 or true (member), 0 or false (non-member), and
nothing else. A label of 0.5 is not truncated to 0, a string is not guessed at, a missing
label is not dropped, and an id labelled both ways is not counted twice: each is refused in
one line, with examples and how many, before any work starts."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

import polars as pl

from minkscan.errors import UserError
from minkscan.io.inputs import InputError
from minkscan.schema import GROUP, ID, LABEL, TEXT

# Text forms of a label (CSV and JSON may carry labels as text).
_TEXT_FORMS = {"1": 1, "0": 0, "true": 1, "false": 0}
EXAMPLES = 3
ALL_INPUTS = "all"  # the group of score rows that keep no group column


class LabelError(UserError, ValueError):
    """Labels that are not 0/1 or true/false, or that contradict each other."""


def checked_labels(values: pl.Series, where: str) -> pl.Series:
    """``values`` as Int64 0/1, or LabelError naming ``where`` and the bad values."""
    if values.dtype == pl.Boolean:
        parsed = values.cast(pl.Int64)
    elif values.dtype.is_numeric():
        parsed = values.cast(pl.Float64)
        parsed = pl.Series(values.name, [
            None if v is None or v not in (0.0, 1.0) else int(v) for v in parsed.to_list()
        ], dtype=pl.Int64)  # fmt: skip
    elif values.dtype == pl.Utf8:
        parsed = pl.Series(values.name, [
            None if v is None else _TEXT_FORMS.get(v.strip().lower()) for v in values.to_list()
        ], dtype=pl.Int64)  # fmt: skip
    else:
        raise LabelError(f"{where}: labels must be 0/1 or true/false, not {values.dtype}")
    bad = [v for v, p in zip(values.to_list(), parsed.to_list(), strict=True) if p is None]
    if bad:
        shown = ", ".join(repr(v) for v in list(dict.fromkeys(bad))[:EXAMPLES])
        raise LabelError(f"{where}: labels must be 0/1 or true/false; {len(bad)} are not "
                         f"(e.g. {shown})")  # fmt: skip
    return parsed.alias(values.name)


def unique_labels(frame: pl.DataFrame, label: str, where: str) -> pl.DataFrame:
    """``frame`` with one row per (id, label): repeats of an id with its label counted once,
    an id with both labels refused (LabelError naming how many and some)."""
    frame = frame.unique(subset=[ID, label], keep="first", maintain_order=True)
    conflicting = frame.filter(pl.col(ID).is_duplicated())[ID].unique(maintain_order=True)
    if conflicting.len():
        shown = ", ".join(repr(v) for v in conflicting.head(EXAMPLES).to_list())
        raise LabelError(f"{where}: {conflicting.len()} ids are labelled both member and "
                         f"non-member (e.g. {shown})")  # fmt: skip
    return frame


def joined_labels(scores: pl.DataFrame, labels: pl.DataFrame, where: str) -> pl.DataFrame:
    """``scores`` with the ``label`` of a labels file joined on id (ids compared as text, so
    integer ids match), refused in one line where the labels contradict each other or the
    scores' own label column; scored ids the file does not label are left out, counted and
    named in a warning."""
    if ID not in labels.columns or LABEL not in labels.columns:
        raise LabelError(f"{where}: a labels file needs columns '{ID}' and '{LABEL}', it has "
                         f"{labels.columns[:8]}")  # fmt: skip
    labels = labels.select(pl.col(ID).cast(pl.Utf8), checked_labels(labels[LABEL], where))
    labels = unique_labels(labels, LABEL, where)
    scores = scores.with_columns(pl.col(ID).cast(pl.Utf8))
    if LABEL in scores.columns:
        own = scores.select(ID, checked_labels(scores[LABEL], f"the scores' '{LABEL}' column"))
        both = own.join(labels, on=ID, suffix="_file")
        disagree = both.filter(pl.col(LABEL) != pl.col(f"{LABEL}_file"))[ID].unique().sort()
        if disagree.len():
            shown = ", ".join(repr(v) for v in disagree.head(EXAMPLES).to_list())
            raise LabelError(f"{where} and the scores' '{LABEL}' column disagree on "
                             f"{disagree.len()} ids (e.g. {shown}): drop one of them")  # fmt: skip
    joined = scores.drop(LABEL, strict=False).join(labels, on=ID, how="inner")
    if joined.is_empty():
        raise LabelError(f"{where}: no scored id has a label (e.g. scored "
                         f"{scores[ID].head(2).to_list()}, labelled "
                         f"{labels[ID].head(2).to_list()})")  # fmt: skip
    unlabelled = scores.filter(~pl.col(ID).is_in(labels[ID].implode()))[ID]
    if unlabelled.len():
        shown = ", ".join(repr(v) for v in unlabelled.head(EXAMPLES).to_list())
        logging.getLogger(__name__).warning(
            "%s labels %d of %d scored documents; the other %d (e.g. %s) are left out",
            where, scores.height - unlabelled.len(), scores.height, unlabelled.len(), shown,
        )  # fmt: skip
    return joined


def read_labelled(paths: Sequence[str]) -> pl.DataFrame:
    """Concatenate labelled Parquet files into columns id, text, label, group.

    ``group`` defaults to the file's stem (e.g. length32) when the file has none.
    """
    frames = []
    for path in paths:
        try:
            frame = pl.read_parquet(path)
        except FileNotFoundError:
            raise InputError(f"input not found: {path}") from None
        except (OSError, pl.exceptions.ComputeError) as error:
            raise InputError(f"{path} is not a readable Parquet file: {error}") from None
        missing = {TEXT, LABEL} - set(frame.columns)
        if missing:
            raise InputError(f"{path}: missing column(s) {sorted(missing)}")
        stem = Path(path).stem
        if ID not in frame.columns:
            frame = frame.with_row_index(ID).with_columns(pl.format(f"{stem}:{{}}", ID))
        if GROUP not in frame.columns:
            frame = frame.with_columns(pl.lit(stem).alias(GROUP))
        frames.append(
            frame.select(
                pl.col(ID).cast(pl.Utf8),
                pl.col(TEXT),
                checked_labels(frame[LABEL], path),
                pl.col(GROUP).cast(pl.Utf8),
            )
        )
    data = pl.concat(frames)
    duplicated = data.filter(pl.col(ID).is_duplicated())[ID].unique().sort().to_list()
    if duplicated:
        raise InputError(f"ids must be unique across --data files; repeated: {duplicated[:5]}")
    return data


def read_labelled_scores(
    paths: Sequence[str], labels: str | None, group: str = GROUP
) -> pl.DataFrame | None:
    """Score rows (`minkscan score` outputs or score Parquet files) with 0/1 labels from their
    own ``label`` column or the ``labels`` file, and a ``group`` (the kept ``group`` column;
    rows without one are the group ``all``, as members and non-members are often scored
    apart); None when ``paths`` are labelled texts to score. A mix of both is refused."""
    from minkscan.io.score_reader import read_scores

    kinds = [_holds_scores(path) for path in paths]
    if not any(kinds):
        return None
    if not all(kinds):
        texts = [p for p, scored in zip(paths, kinds, strict=True) if not scored]
        raise InputError(f"--input mixes score outputs with labelled texts to score ({texts[0]}"
                         "): give one kind")  # fmt: skip
    given = None if labels is None else pl.from_arrow(read_scores(labels).table)
    frames = []
    for path in paths:
        frame = pl.from_arrow(read_scores(path).table)
        assert isinstance(frame, pl.DataFrame)
        if isinstance(given, pl.DataFrame):  # read once, joined to every input
            frame = joined_labels(frame, given, f"--labels {labels}")
        elif LABEL not in frame.columns:
            raise LabelError(f"{path} has no '{LABEL}' column: keep it with `minkscan score "
                             f"--keep-columns {LABEL},{TEXT}`, or give --labels")  # fmt: skip
        frame = frame.with_columns(checked_labels(frame[LABEL], f"{path}'s '{LABEL}' column"))
        unique_labels(frame.select(ID, LABEL), LABEL, f"{path}'s '{LABEL}' column")
        if group in frame.columns and group != GROUP:
            frame = frame.drop(GROUP, strict=False).rename({group: GROUP})
        elif group != GROUP:
            raise InputError(f"{path} has no column '{group}' (--group-column): keep it with "
                             f"`minkscan score --keep-columns {group}`")  # fmt: skip
        elif GROUP not in frame.columns:
            frame = frame.with_columns(pl.lit(ALL_INPUTS).alias(GROUP))
        frames.append(frame.with_columns(pl.col(ID).cast(pl.Utf8), pl.col(GROUP).cast(pl.Utf8)))
    data = pl.concat(frames, how="diagonal_relaxed")
    repeated = data.filter(pl.col(ID).is_duplicated())[ID].unique().sort().to_list()
    if repeated:
        raise InputError(f"ids must be unique across --input score outputs; repeated: "
                         f"{repeated[:EXAMPLES]}")  # fmt: skip
    return data


def _holds_scores(path: str) -> bool:
    """Whether ``path`` is a score output (a directory or ``s3://`` prefix) or a Parquet file
    with a status column, as `minkscan score` writes."""
    import pyarrow.parquet as pq

    from minkscan.schema import STATUS

    local = Path(path)
    if path.startswith("s3://") or local.is_dir():
        return True
    try:
        return STATUS in pq.read_schema(local).names
    except (OSError, ValueError):
        return False  # read_labelled names what is wrong with it
