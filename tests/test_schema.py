"""One owner for the names of minkscan's data: every column name, status value, input
format and output file name is spelled in `minkscan.schema` and nowhere else in the package,
and piece keys and part file names are formatted and parsed there."""

from __future__ import annotations

import ast
from pathlib import Path

import pyarrow as pa
from minkscan import schema

PACKAGE = Path(schema.__file__).parent
OWNED = (
    {value for name, value in vars(schema).items() if name.isupper() and isinstance(value, str)}
    | set(schema.FORMATS)
    | set(schema.OUTPUT_NAMES)
)


def literals(path: Path) -> list[tuple[int, str]]:
    """String constants of a module, docstrings aside."""
    tree = ast.parse(path.read_text())
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    return [
        (node.lineno, node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str)
        and id(node) not in docstrings
    ]  # fmt: skip


def test_no_module_but_the_schema_spells_a_name_the_schema_owns():
    spelled = [
        f"{path.relative_to(PACKAGE)}:{line}: {value!r}"
        for path in sorted(PACKAGE.rglob("*.py"))
        if path != Path(schema.__file__)
        for line, value in literals(path)
        if value in OWNED
    ]
    assert spelled == []


def test_piece_keys_and_part_names_round_trip():
    key = schema.PieceKey("0123456789abcdef", 100, 250)
    assert schema.PieceKey.parse(str(key)) == key and key.rows == 150
    name = schema.part_name(key, 120, 30)
    assert schema.parse_part_name(name) == (key, 120, 30)
    assert schema.parse_part_name("part-x.parquet") is None
    assert schema.parse_part_name(schema.MARKER) is None


def test_score_columns_have_one_arrow_type():
    assert schema.arrow_type(schema.N_TOKENS) == pa.int64()
    assert schema.arrow_type(schema.TOKEN_Z) == pa.list_(pa.float32())
    assert schema.arrow_type("minkpp_k20") == pa.float64()
