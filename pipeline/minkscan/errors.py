"""The errors a user can fix, and the exit code each gives: the CLI prints them as one
line (no traceback unless ``-v``). Light on purpose: the CLI imports it before anything
heavy."""

from __future__ import annotations


class UserError(Exception):
    """Something in the command, config or data the user can fix; exit code 2.

    Its text is the message it was raised with, kept apart from ``args``: Ray Data appends
    its retry advice to a failed task's exception arguments, which is not the cause."""

    exit_code = 2

    def __init__(self, *args: object) -> None:
        super().__init__(*args)
        self.message = str(args[0]) if args else ""

    def __str__(self) -> str:
        return self.message


class RunFailed(UserError):
    """A run that started failed on the user's data (e.g. an unreadable shard); exit 1."""

    exit_code = 1


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where the main thread is, as Ctrl-C raises KeyboardInterrupt: the
    run unwinds the same way (Ray shut down, the writer lease released)."""


def interrupted_code(interrupt: BaseException) -> int:
    """The shell's exit code for a run stopped by ``interrupt``: 143 for SIGTERM, 130 for
    SIGINT (Ctrl-C)."""
    return 143 if isinstance(interrupt, Terminated) else 130


class Interrupted(UserError):
    """A run stopped by Ctrl-C or SIGTERM, with what it had committed; exit 130 or 143."""

    def __init__(self, committed: int, code: int) -> None:
        super().__init__(
            f"interrupted: {committed:,} rows committed; re-run the same command to resume"
        )
        self.exit_code = code
