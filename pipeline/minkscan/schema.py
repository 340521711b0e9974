"""The one schema of minkscan's data: column names and their Arrow types, document statuses,
the input formats, the names of what an output directory holds, and the piece key.

Every module that reads or writes these names takes them from here (a test checks that no
other module spells them), so a rename is one line. Light on purpose: only pyarrow.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import pyarrow as pa

# Columns of a score file, in the order they are written (kept input columns go after ROW,
# score columns after STATUS, the text last).
ID, SOURCE, ROW = "id", "source", "row"
N_TOKENS, STATUS = "n_tokens", "status"
TEXT = "text"
# With scoring.token_scores: per scored token, its Min-K%++ z and character span in the text.
TOKEN_Z, TOKEN_START, TOKEN_END = "token_z", "token_start", "token_end"
TOKEN_COLUMNS = (TOKEN_Z, TOKEN_START, TOKEN_END)
# A rough count of tokens from characters, for estimates only (English BPE: about 4).
CHARS_PER_TOKEN = 4
# Labelled data (benchmark inputs, calibration scores): 1 = member, 0 = non-member; a group.
LABEL, GROUP = "label", "group"
GROUP_KEY = "_group"  # the group a report counts a row in (from --group-column, or one)

# Columns that travel between pipeline stages and never reach a score file.
PIECE = "_piece"  # the input piece a row belongs to
PIECE_ROWS = "_piece_rows"  # the rows this run reads of that piece (commit knows it whole)
PRESET_STATUS = "_status"  # a status decided when the row was read (bad encoding, not text)
INPUT_IDS = "_input_ids"  # token ids, tokenizer to model
SPAN_START, SPAN_END = "_span_start", "_span_end"  # token spans, tokenizer to model
SECONDS_PREFIX = "_seconds_"  # a row's share of a forward pass's compute seconds
TARGET_LOGPROBS = "_target_logprobs"  # per-token log p of the main pass, for WBC

# A document's status: whether and how it was scored.
OK = "ok"
EMPTY = "empty"  # None, "", or only whitespace and NUL characters
NOT_TEXT = "not_text"  # not a string
BAD_ENCODING = "bad_encoding"  # bytes that are not UTF-8 (set when the input is read)
TOO_SHORT = "too_short"  # fewer than two tokens: nothing to score
TRUNCATED = "truncated"  # longer than max_tokens; scored on the first max_tokens tokens
WINDOWED = "windowed"  # longer than max_tokens; every token scored with sliding windows
SCORED_STATUSES = frozenset({OK, TRUNCATED, WINDOWED})

# Input formats and the file name endings that select them.
PARQUET, JSONL, CSV, ARROW = "parquet", "jsonl", "csv", "arrow"
FORMATS = (PARQUET, JSONL, CSV, ARROW)
EXTENSIONS = {
    ".parquet": PARQUET,
    ".jsonl": JSONL,
    ".jsonl.gz": JSONL,
    ".csv": CSV,
    ".csv.gz": CSV,
    ".arrow": ARROW,
}

# What an output directory holds (minkscan writes nothing else there).
MARKER = "_minkscan.json"  # the run record, written first
MANIFEST = "_manifest.json"  # the last run's configuration and statistics
LEASE = "_lease.json"  # which run writes the output now
TMP_DIR = "_tmp"  # files being written
BAD_DIR = "_bad"  # shards that failed while being read
NIGHTLY_MANIFEST = "_nightly_manifest.json"
RUNS_DIR = "runs"  # a nightly scan's runs
# What `minkscan order-test` writes in its output directory: the orderings it scores (one
# row per shard and order), the settings they were built from, their score output, and the
# result; and the order of an ordering row (0: published, 1..P: shuffles) with its shard.
ORDERINGS = "orderings.parquet"
ORDER_PLAN = "order_plan.json"
ORDER_SCORES = "scores"
ORDER_RESULT = "order_test.json"
SHARD, ORDER = "shard", "order"
# What `minkscan report` writes beside report.{html,md,json}: the FDR-selected documents;
# what a report directory holds, and a nightly report directory (the diff beside it).
SELECTED = "selected.csv"
DECISIONS, DECISIONS_CSV = "decisions.parquet", "decisions.csv"  # every document's decision
REPORT_FILES = frozenset(
    {"report.html", "report.md", "report.json", SELECTED, DECISIONS, DECISIONS_CSV}
)
DIFF = "diff.json"
# What `minkscan benchmark` writes in its --output, and in its --work-dir.
BENCHMARK_FILES = frozenset(
    {"scores.parquet", "tables.md", "tables.json", "main.csv", "k_sweep.csv", "decomposition.csv"}
)
WORK_DIR_ENTRIES = frozenset({"input", "scores"})
OUTPUT_NAMES = frozenset({MARKER, MANIFEST, LEASE, TMP_DIR, BAD_DIR, NIGHTLY_MANIFEST, RUNS_DIR})
_PART = re.compile(
    r"part-(?P<key>[0-9a-f]{16})-(?P<start>\d+)-(?P<end>\d+)-(?P<first>\d+)-(?P<rows>\d+)\.parquet"
)


@dataclass(frozen=True)
class PieceKey:
    """Rows [start, end) of the input file whose relative path hashes to ``file``."""

    file: str
    start: int
    end: int

    def __str__(self) -> str:
        return f"{self.file}-{self.start}-{self.end}"

    @classmethod
    def parse(cls, text: str) -> PieceKey:
        file, start, end = text.split("-")
        return cls(file, int(start), int(end))

    @property
    def rows(self) -> int:
        return self.end - self.start


def derived_id(relpath: str, row: int) -> str:
    """The id of a row of an input without ids: its path relative to the input root, and
    its row."""
    return f"{relpath}:{row}"


def part_name(piece: PieceKey | str, first: int, rows: int) -> str:
    """The file name of ``rows`` score rows of ``piece`` whose smallest input row is ``first``."""
    return f"part-{piece}-{first}-{rows}.parquet"


def parse_part_name(name: str) -> tuple[PieceKey, int, int] | None:
    """(piece, first row, rows) of a score file's name; None for any other name."""
    match = _PART.fullmatch(name)
    if match is None:
        return None
    piece = PieceKey(match["key"], int(match["start"]), int(match["end"]))
    return piece, int(match["first"]), int(match["rows"])


def arrow_type(column: str) -> pa.DataType:
    """The Arrow type of a score file's own column (a score column is float64)."""
    return _TYPES.get(column, pa.float64())


_TYPES = {
    ID: pa.string(),
    SOURCE: pa.string(),
    ROW: pa.int64(),
    N_TOKENS: pa.int64(),
    STATUS: pa.string(),
    TEXT: pa.large_string(),
    TOKEN_Z: pa.list_(pa.float32()),
    TOKEN_START: pa.list_(pa.int32()),
    TOKEN_END: pa.list_(pa.int32()),
}


def frame_schema(columns: list[str]) -> pa.Schema:
    """The Arrow schema of the scorer's own columns, in the given order."""
    return pa.schema([(name, arrow_type(name)) for name in columns])
