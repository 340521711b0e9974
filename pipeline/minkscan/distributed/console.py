"""The lines of Ray's own that a run keeps off the terminal.

Ray's C++ core prints, once per driver and whatever the stage's arguments, an error-level
line for the first actor of a Ray Data actor pool: "Actor ... has constructor arguments in
the object store and max_restarts > 0" (Ray Data hands its actors an argument held in the
object store, ray-project/ray#57733). It is no error of the run, and it is written straight
to file descriptor 2, past Python's logging. `ray_actor_line_dropped` copies everything else
written to descriptor 2 through unchanged, as it comes.

Ray's driver also prints the errors its cluster reports, each as a "(raylet) ..." line on
standard output. While a run goes they stay (a worker killed for memory is news); once a
stopped run shuts Ray down (`stopping`), its tasks' failed submissions are reported that way
("Task ... submit failed. There are infinite retries remaining"), and those lines are the
shutdown's, not the user's: `raylet_lines_dropped_once_stopping` drops them from then on,
and `stop_signals_mark_stopping` marks the run stopping as Ctrl-C or SIGTERM arrives.
"""

from __future__ import annotations

import os
import re
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType
from typing import TextIO

RAY_ACTOR_LINE = re.compile(
    rb"\[[^\]\n]*\] core_worker\.cc:\d+: Actor with class name: '[^'\n]*' and ID: '\w+' has "
    rb"constructor arguments in the object store and max_restarts > 0\.[^\n]*\n"
)
# The start of one of Ray's log lines ('[2026-11-25 18:57:24,937 E 11062 11062] ...'): an
# unfinished one is held back until its end arrives, so the line is seen whole.
_RAY_LOG_START = re.compile(rb"\[\d{4}-\d\d-\d\d ")


@contextmanager
def ray_actor_line_dropped() -> Iterator[None]:
    """Descriptor 2 through a pipe for the block: what is written to it reaches the terminal
    (or file) as it comes, less Ray's actor line (`RAY_ACTOR_LINE`)."""
    sys.stderr.flush()
    terminal = os.dup(2)
    read, write = os.pipe()
    os.dup2(write, 2)
    os.close(write)
    pump = threading.Thread(target=_pump, args=(read, terminal), daemon=True)
    pump.start()
    try:
        yield
    finally:
        sys.stderr.flush()
        os.dup2(terminal, 2)  # the pipe's last writer in this process: the pump sees its end
        pump.join(timeout=5)  # (a process that inherited it may still hold it open)
        os.close(terminal)


def _pump(read: int, terminal: int) -> None:
    """Copy the pipe to ``terminal`` minus Ray's line. A terminal that went away (a closed
    pipe) ends only the copying: the pipe is still drained, so no writer ever blocks."""
    pending, copying = b"", True
    with os.fdopen(read, "rb", buffering=0) as source:
        while chunk := source.read(1 << 16):
            text, pending = filtered(pending + chunk)
            copying = copying and _write(terminal, text)
        if copying:
            _write(terminal, pending)


def filtered(text: bytes) -> tuple[bytes, bytes]:
    """``text`` less Ray's actor line, and the unfinished Ray log line at its end (held back
    until the rest arrives; it may start mid-line, after a progress bar's last redraw)."""
    line = text.rfind(b"\n") + 1
    start = _RAY_LOG_START.search(text, line)
    if start is not None:
        cut = start.start()
    else:  # or the first bytes of one: '[', '[20', ...
        bracket = text.rfind(b"[", line)
        cut = bracket if bracket >= 0 and _may_start(text[bracket:]) else len(text)
    return RAY_ACTOR_LINE.sub(b"", text[:cut]), text[cut:]


def _may_start(fragment: bytes) -> bool:
    """Whether ``fragment``, shorter than a log line's start, could be the first bytes of one."""
    template = b"[0000-00-00 "
    return len(fragment) < len(template) and all(
        chr(have).isdigit() if want == ord("0") else have == want
        for have, want in zip(fragment, template, strict=False)
    )


def _write(fd: int, data: bytes) -> bool:
    try:
        while data:
            data = data[os.write(fd, data) :]
    except OSError:
        return False
    return True


# A line of the errors Ray's driver prints (`ray._private.worker.print_to_stdstream`), its
# "(raylet)" prefix maybe coloured.
_RAYLET_LINE = re.compile(r"^(?:\x1b\[[0-9;]*m)*\(raylet\)")


class _RayletLinesDropped:
    """A text stream writing through to ``sink``, less the "(raylet)" lines written after
    ``stopping`` is set (whole lines are judged: a line is held until its end arrives)."""

    def __init__(self, sink: TextIO) -> None:
        self.sink = sink
        self.stopping = threading.Event()
        self._pending = ""
        self._lock = threading.Lock()

    def write(self, text: str) -> int:
        with self._lock:
            if not self.stopping.is_set() and not self._pending:
                return self.sink.write(text)
            *lines, self._pending = (self._pending + text).split("\n")
            kept = [line for line in lines if not _RAYLET_LINE.match(line)]
            if kept:
                self.sink.write("\n".join(kept) + "\n")
            return len(text)

    def flush(self) -> None:
        self.sink.flush()

    def __getattr__(self, name: str) -> object:  # isatty, fileno, encoding, ...
        return getattr(self.sink, name)


_active: list[_RayletLinesDropped] = []


@contextmanager
def raylet_lines_dropped_once_stopping() -> Iterator[None]:
    """Standard output through `_RayletLinesDropped` for the block (restored after it,
    with an unfinished line written out)."""
    stream = _RayletLinesDropped(sys.stdout)
    sys.stdout = stream  # type: ignore[assignment]
    _active.append(stream)
    try:
        yield
    finally:
        _active.remove(stream)
        sys.stdout = stream.sink
        if stream._pending and not _RAYLET_LINE.match(stream._pending):
            stream.sink.write(stream._pending)


def stopping() -> None:
    """A stopped run is shutting Ray down: drop Ray's "(raylet)" lines from now on."""
    for stream in _active:
        stream.stopping.set()


def stop_signals_mark_stopping() -> Callable[[], None]:
    """Ctrl-C and SIGTERM mark the run as stopping (`stopping`) the moment they arrive, then
    act as they did: the interrupt unwinds through Ray Data's iterator, which kills its actors
    on the way out, before any ``except`` of ours runs, and the "(raylet)" lines reporting
    those kills must already be dropped. Returns what restores the handlers before."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    stops = (signal.SIGINT, signal.SIGTERM)
    previous = {stop: signal.getsignal(stop) for stop in stops}

    def mark_then_stop(signum: int, frame: FrameType | None) -> None:
        stopping()
        handler = previous[signum]
        if callable(handler):
            handler(signum, frame)
        elif handler == signal.SIG_DFL:  # what the signal does by default, now
            signal.signal(signum, signal.SIG_DFL)
            signal.raise_signal(signum)

    def restore() -> None:
        for stop in stops:
            signal.signal(stop, previous[stop])

    for stop in stops:
        signal.signal(stop, mark_then_stop)
    return restore
