"""The errors a user can fix, and the exit code each gives: the CLI prints them as one
line (no traceback unless ``-v``). Light on purpose: the CLI imports it before anything
heavy."""

from __future__ import annotations


class UserError(Exception):
    """Something in the command, config or data the user can fix; exit code 2."""

    exit_code = 2


class RunFailed(UserError):
    """A run that started failed on the user's data (e.g. an unreadable shard); exit 1."""

    exit_code = 1
