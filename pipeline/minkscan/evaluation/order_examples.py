"""A benchmark file's examples for the order test, in published order, read as its authors
read them, and refused in one line -- before a forward pass -- where they cannot be tested.

Oren et al.'s ``compute_sharded_comparison_test.py`` reads a file's raw lines (``readlines``:
universal newlines, each line with its newline) and tokenises each one on its own. So by
default a JSON lines benchmark is its raw lines. Other formats, or ``--text-column`` /
``--template``, give each row's column or rendering, followed by a separator (default a
newline, as a line ends). Each example's numeric columns (JSON numbers of a line, numeric
columns of a table) come along for the exchangeability check.

What cannot be tested is refused naming the file or flag: a template that reads no column
or has anything but plain fields, text that is not UTF-8 (file and line), examples that are
all empty or all the same, and examples holding `PART_SEPARATOR`, the character orderings
put between examples.
"""

from __future__ import annotations

import io
import json
import string
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from minkscan.config import ScanConfig
from minkscan.io import content
from minkscan.io.inputs import InputError, InputFile, column_names, discover
from minkscan.io.paths import filesystem_for
from minkscan.io.reading import raw_bytes, read_file
from minkscan.schema import JSONL, PARQUET

LINES, COLUMN, TEMPLATE = "lines", "column", "template"
# Between the examples of an ordering: the scorer tokenises each part on its own
# (`scoring.part_separator`), so every ordering of a shard holds the same tokens.
PART_SEPARATOR = "\x1e"


@dataclass(frozen=True)
class Examples:
    """The examples as scored, in published order (the first ``data.limit``), each one's
    numeric columns, how many the files hold, and each file's content fingerprint."""

    texts: list[str]
    numeric: dict[str, list[float]] = field(default_factory=dict)
    read: int = 0
    content: dict[str, str] = field(default_factory=dict)  # path: fingerprint

    @property
    def files(self) -> list[str]:
        return list(self.content)


def template_fields(template: str) -> list[str]:
    """The column names a ``str.format`` template reads, in order, once each; anything but
    plain ``{column}`` fields is refused in one line."""
    try:
        parsed = list(string.Formatter().parse(template))
    except ValueError as error:
        raise InputError(f"--template {template!r}: {error} (write literal braces as {{{{ "
                         "and }})") from None  # fmt: skip
    fields = []
    for _, name, spec, conversion in parsed:
        if name is None:
            continue
        if not name.isidentifier():
            raise InputError(f"--template {template!r}: field {{{name}}} is not a column name "
                             "(fields are plain column names, like {question})")  # fmt: skip
        if spec or conversion:
            raise InputError(f"--template {template!r}: field {{{name}}} has a format spec or "
                             "conversion; write it plainly, like {question}")  # fmt: skip
        fields.append(name)
    if not fields:
        raise InputError(f"--template {template!r} reads no column, so every example would be "
                         "the same text: name columns in braces, like {question}")  # fmt: skip
    return list(dict.fromkeys(fields))


def _cell(value: object) -> str:
    """A column value as example text: lists (choices) one per line, None as ''."""
    if value is None:
        return ""
    if isinstance(value, list):
        return "\n".join(_cell(item) for item in value)
    return str(value)


def _decoded(fs: pafs.FileSystem, file: InputFile) -> str:
    """A JSON lines file's text (UTF-8; a refusal naming the file and line otherwise)."""
    raw = raw_bytes(fs, file)
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as error:
        line, byte = raw[: error.start].count(b"\n") + 1, raw[error.start]
        raise InputError(f"{file.path}: line {line} is not UTF-8 (byte 0x{byte:02x}); "
                         "convert the file to UTF-8") from None  # fmt: skip


def _numbers(record: object) -> dict[str, float]:
    """The numeric fields of a parsed JSON line (none for anything but an object)."""
    if not isinstance(record, dict):
        return {}
    return {k: float(v) for k, v in record.items()
            if isinstance(v, int | float) and not isinstance(v, bool)}  # fmt: skip


def _line_records(text: str, keep_blank: bool) -> tuple[list[str], list[dict[str, float]]]:
    """The lines as the authors read them (universal newlines, each with its newline) and
    each one's numeric JSON fields; blank lines dropped unless ``keep_blank``."""
    lines = io.StringIO(text, newline=None).readlines()
    if not keep_blank:
        lines = [line for line in lines if line.strip()]
    records = []
    for line in lines:
        try:
            records.append(_numbers(json.loads(line)))
        except ValueError:
            records.append({})
    return lines, records


def _table_numbers(table: pa.Table) -> list[dict[str, float]]:
    """Each row's numeric columns of a table."""
    numeric = [name for name, kind in zip(table.column_names, table.schema.types, strict=True)
               if pa.types.is_integer(kind) or pa.types.is_floating(kind)]  # fmt: skip
    rows = table.select(numeric).to_pylist()
    return [{k: float(v) for k, v in row.items() if v is not None} for row in rows]


def _all_columns(fs: pafs.FileSystem, file: InputFile) -> list[str]:
    """The columns a file has (for the message that names a missing one)."""
    if file.format == PARQUET:
        with fs.open_input_file(file.path) as handle:
            return pq.ParquetFile(handle).schema_arrow.names
    return column_names(fs, file) or ["none"]


def _rendered(fs: pafs.FileSystem, file: InputFile, config: ScanConfig, mode: str,
              template: str | None) -> tuple[list[str], list[dict[str, float]]]:  # fmt: skip
    """A file's examples (without their separator) and each one's numeric columns."""
    if mode == LINES:
        return _line_records(_decoded(fs, file), keep_blank=True)
    columns = template_fields(template) if mode == TEMPLATE else [config.data.text_column]
    table = read_file(fs, file, list(dict.fromkeys([*columns, *_all_columns(fs, file)])))
    missing = [c for c in columns if c not in table.column_names]
    if missing:
        flag = "--template" if mode == TEMPLATE else "--text-column"
        raise InputError(f"{flag}: {file.path} has no column(s) {missing} (it has "
                         f"{', '.join(_all_columns(fs, file)[:12])})")  # fmt: skip
    values = table.select(columns).to_pylist()
    if mode == TEMPLATE:
        texts = [template.format(**{k: _cell(v) for k, v in row.items()}) for row in values]
    else:
        texts = [_cell(row[columns[0]]) for row in values]
    if file.format == JSONL:  # the reader types JSON numbers as text: take them from the lines
        numbers = _line_records(_decoded(fs, file), keep_blank=False)[1]
    else:
        numbers = _table_numbers(table)
    return texts, numbers


def example_mode(config: ScanConfig, template: str | None, column: bool) -> str:
    """`TEMPLATE`, `COLUMN` (``--text-column`` given, or not JSON lines) or `LINES`."""
    if template is not None:
        return TEMPLATE
    if column:
        return COLUMN
    data = config.data
    fs = filesystem_for(list(data.input), data.s3)
    files = discover(list(data.input), fs, format=data.format, root=data.input_root).files
    return LINES if all(file.format == JSONL for file in files) else COLUMN


def read_examples(config: ScanConfig, mode: str, template: str | None,
                  separator: str) -> Examples:  # fmt: skip
    """Each example's text as scored, in published order (files in path order, rows or
    lines in file order, the first ``data.limit`` only), followed by ``separator`` unless
    it is a raw line; refused in one line where they cannot be tested."""
    data = config.data
    fs = filesystem_for(list(data.input), data.s3)
    files = discover(list(data.input), fs, format=data.format, root=data.input_root).files
    texts: list[str] = []
    numbers: list[dict[str, float]] = []
    fingerprints: dict[str, str] = {}
    for file in files:
        found, found_numbers = _rendered(fs, file, config, mode, template)
        end = "" if mode == LINES else separator
        texts += [text + end for text in found]
        numbers += found_numbers
        fingerprints[file.path] = content.fingerprint(fs, file.path, file.format)
    read = len(texts)
    if data.limit is not None:
        texts, numbers = texts[: data.limit], numbers[: data.limit]
    _check(texts, mode, template)
    names = sorted({name for row in numbers for name in row})
    numeric = {name: [row[name] for row in numbers] for name in names
               if all(name in row for row in numbers)}  # fmt: skip
    return Examples(texts, numeric, read, fingerprints)


def _check(texts: list[str], mode: str, template: str | None) -> None:
    """Refuse examples the test cannot order: none, all empty, all alike, or holding the
    separator orderings put between examples."""
    what = {LINES: "line", COLUMN: "example", TEMPLATE: "rendered example"}[mode]
    if not any(text.strip() for text in texts):
        raise InputError(f"every {what} is empty ({len(texts)} read): nothing to order"
                         f"{'; check --template' if template else ''}")  # fmt: skip
    if len(set(texts)) == 1:
        raise InputError(f"all {len(texts)} examples read the same ({texts[0][:40]!r}): "
                         f"nothing to order{'; check --template' if template else ''}")  # fmt: skip
    bad = next((i for i, text in enumerate(texts) if PART_SEPARATOR in text), None)
    if bad is not None:
        raise InputError(f"example {bad + 1} holds the character U+001E, which the order test "
                         "puts between examples: remove it from the file")  # fmt: skip
