"""How a run's inputs differ from those its output recorded (`InputChanges`): what the
plan tells the user (summary, ``-v``) and acts on -- an edited input scored again, a moved
one's rows kept under its new path, a missing one refused or dropped."""

from __future__ import annotations

from dataclasses import dataclass, field

from minkscan.io.inputs import InputFile


@dataclass(frozen=True)
class InputChanges:
    """How a run's inputs differ from those the output recorded, by relative path: changed
    (edited, or unreadable now: its old rows are deleted and its content now is scored),
    moved (same content under a new path: its rows kept, shown under the new path) and
    missing (not named by this run: refused unless ``data.drop_missing`` drops its rows)."""

    changed: list[str] = field(default_factory=list)
    moved: list[tuple[str, str]] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.changed or self.moved or self.missing)

    def note(self) -> str:
        """'; inputs since the last run: 1 changed (scored again), 2 moved (rows kept)'."""
        counts = [(self.changed, "changed (scored again)"), (self.moved, "moved (rows kept)"),
                  (self.missing, "missing (rows dropped)")]  # fmt: skip
        shown = ", ".join(f"{len(paths)} {what}" for paths, what in counts if paths)
        return f"; inputs since the last run: {shown}" if shown else ""

    def lines(self) -> list[str]:
        """One line per input, for -v."""
        return ([f"changed {path}: scored again" for path in self.changed]
                + [f"moved {old} -> {new}: rows kept" for old, new in self.moved]
                + [f"missing {path}: rows dropped" for path in self.missing])  # fmt: skip


def input_changes(
    recorded: dict[str, dict] | None, files: list[InputFile], unreadable: set[str]
) -> InputChanges:
    """Compare an output's recorded inputs ({key: {path, ...}}) with a run's files and the
    relative paths of the inputs it cannot read."""
    if recorded is None:
        return InputChanges()
    now = {file.key: file.relpath for file in files}
    paths = set(now.values()) | unreadable
    lost = sorted(entry["path"] for key, entry in recorded.items() if key not in now)
    moved = sorted((entry["path"], now[key]) for key, entry in recorded.items()
                   if key in now and entry["path"] != now[key])  # fmt: skip
    return InputChanges([p for p in lost if p in paths], moved,
                        [p for p in lost if p not in paths])  # fmt: skip
