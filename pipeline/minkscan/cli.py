"""`minkscan` command line: one sub-command module per verb under `minkscan.commands`.

Each module exposes ``register(subparsers)``, which adds its parser and sets
``func(args) -> int`` as the handler; this file wires them together and turns errors into
one line on stderr (``-v`` adds the traceback): a `UserError` exits with its own code (2
for a bad command, config or input, 1 for a run that failed on the data), anything else 1.
"""

from __future__ import annotations

import argparse
import difflib
import importlib
import logging
import signal
import sys
import threading
import time
import traceback
from importlib.metadata import version

from minkscan.errors import Terminated, UserError, interrupted_code

COMMAND_MODULES = [
    "minkscan.commands.score",
    "minkscan.commands.benchmark",
    "minkscan.commands.calibrate",
    "minkscan.commands.report",
    "minkscan.commands.order_test",
    "minkscan.commands.nightly",
    "minkscan.commands.frequencies",
]


VERBOSE_HELP = "everything: debug logs, Ray's own output and progress bars, tracebacks"


class _SubcommandParser(argparse.ArgumentParser):
    """A sub-command's parser: it takes ``-v``/``--verbose`` too, after the sub-command, and
    its ``epilog`` (an example) keeps its lines."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        kwargs.setdefault("formatter_class", argparse.RawDescriptionHelpFormatter)
        super().__init__(*args, **kwargs)
        self.add_argument(
            "-v", "--verbose", action="store_true", default=argparse.SUPPRESS, help=VERBOSE_HELP
        )


class _Plain(logging.Formatter):
    """minkscan's own lines as a user reads them: the message, 'warning: ' before warnings."""

    def format(self, record: logging.LogRecord) -> str:
        message = record.getMessage()
        return (
            message
            if record.levelno < logging.WARNING
            else f"{record.levelname.lower()}: {message}"
        )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="minkscan",
        description="Pre-training data detection (Min-K%++ and baselines) over corpora with Ray.",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help=VERBOSE_HELP)
    parser.add_argument("--version", action="version", version=f"minkscan {version('minkscan')}")
    subparsers = parser.add_subparsers(
        dest="command", required=True, parser_class=_SubcommandParser
    )
    for module_name in COMMAND_MODULES:
        importlib.import_module(module_name).register(subparsers)
    return parser


def _configure_logging(verbose: bool) -> None:
    """Without ``-v``: minkscan's own INFO lines and everyone's warnings, plainly; with it,
    everything at DEBUG with timestamps and logger names."""
    handler = logging.StreamHandler()
    handler.set_name("minkscan-cli")
    handler.setFormatter(
        logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s") if verbose
        else _Plain()
    )  # fmt: skip
    root = logging.getLogger()
    for old in [h for h in root.handlers if h.get_name() == handler.get_name()]:
        root.removeHandler(old)  # an earlier call's (main run twice in one process)
    root.addHandler(handler)
    root.setLevel(logging.WARNING)
    logging.getLogger("minkscan").setLevel(logging.DEBUG if verbose else logging.INFO)


def _terminate(signum: int, frame: object) -> None:
    raise Terminated()


def _parse(argv: list[str] | None) -> argparse.Namespace:
    """The arguments; an unknown flag is refused by its sub-command's parser (its usage, not
    the top-level one), with the closest flag it has."""
    parser = build_parser()
    args, unknown = parser.parse_known_args(argv)
    if unknown:
        (subparsers,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        command = subparsers.choices[args.command]
        flags = [flag for action in command._actions for flag in action.option_strings]
        close = difflib.get_close_matches(unknown[0].split("=")[0], flags, n=1)
        hint = f" (did you mean {close[0]}?)" if close else ""
        command.error(f"unrecognized arguments: {' '.join(unknown)}{hint}")
    return args


def main(argv: list[str] | None = None) -> int:
    started = time.perf_counter()
    args = _parse(argv)
    args.started = started  # what the person waits from (a command's summary says it)
    _configure_logging(args.verbose)
    main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _terminate) if main_thread else None
    try:
        return _run(args)
    finally:
        if main_thread:
            signal.signal(signal.SIGTERM, previous)


def _run(args: argparse.Namespace) -> int:
    """The command, its failures as one line (SIGTERM unwinds like Ctrl-C: Ray shut down,
    the writer lease released)."""
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt as interrupt:  # before or after a run's own accounting
        if args.verbose:
            traceback.print_exc()
        print(f"minkscan {args.command}: interrupted; re-run the same command to resume",
              file=sys.stderr)  # fmt: skip
        return interrupted_code(interrupt)
    except Exception as error:  # noqa: BLE001 - every failure becomes one line
        if args.verbose:
            traceback.print_exc()
        message = str(error).strip().splitlines()[0] if str(error).strip() else ""
        if isinstance(error, UserError):
            print(f"minkscan {args.command}: {message}", file=sys.stderr)
            return error.exit_code
        hint = "" if args.verbose else " (-v shows the traceback)"
        print(f"minkscan {args.command}: {type(error).__name__}: {message}{hint}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
