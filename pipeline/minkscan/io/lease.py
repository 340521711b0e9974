"""One writer per score output: a lease file taken atomically, renewed by a heartbeat.

``_lease.json`` names the run that writes the output (an id, host, pid) and when its lease
expires. Every change to it is a compare-and-swap, so two runs can never both believe they
hold it:

* local disk: read-compare-write under an exclusive ``flock`` on the output directory (held
  for the swap only; the kernel drops it if the process dies);
* S3: conditional writes -- ``If-None-Match: *`` to create the lease, ``If-Match: <ETag>`` to
  renew, take over or release it -- through s3fs.

A run renews its lease every ``ttl / 4`` seconds. A lease past its expiry, or held by a
process of this host that no longer exists, may be taken over: a killed run never locks its
output for good. Releasing writes an already-expired lease (S3) or removes it (local).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Protocol

import psutil

from minkscan.config import S3Config
from minkscan.errors import RunFailed, UserError
from minkscan.schema import LEASE

logger = logging.getLogger(__name__)

TTL_SECONDS = 120.0


class OutputBusy(UserError):
    """Another live run is writing this output."""


class LeaseLost(RunFailed):
    """This run's lease was taken over (it stalled past its expiry): it must stop writing."""


@dataclass(frozen=True)
class Holder:
    """Who holds a lease, and until when (seconds since the epoch)."""

    run: str
    host: str
    pid: int
    started: float
    expires: float

    def describe(self) -> str:
        started = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(self.started))
        return f"run {self.run[:8]} (pid {self.pid} on {self.host}, started {started})"

    def dead(self, now: float) -> bool:
        """Expired, or held by a process of this host that has gone (or was replaced)."""
        if now >= self.expires:
            return True
        if self.host != socket.gethostname():
            return False
        try:
            return psutil.Process(self.pid).create_time() > self.started + 1
        except psutil.NoSuchProcess:
            return True


class _Store(Protocol):
    """Compare-and-swap of one small file: (content, version) reads, swaps conditional on a
    version (None: the file must not exist)."""

    def read(self) -> tuple[bytes | None, str | None]: ...

    def swap(self, expected: str | None, content: bytes | None) -> bool: ...


class _LocalStore:
    """The lease file on local disk, swapped under an exclusive flock of its directory."""

    def __init__(self, directory: str) -> None:
        self.directory = Path(directory)
        self.path = self.directory / LEASE

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        handle = os.open(self.directory, os.O_RDONLY)
        try:
            fcntl.flock(handle, fcntl.LOCK_EX)
            yield
        finally:
            os.close(handle)  # closing drops the lock

    def read(self) -> tuple[bytes | None, str | None]:
        try:
            content = self.path.read_bytes()
        except FileNotFoundError:
            return None, None
        return content, content.decode()  # the content is its own version

    def swap(self, expected: str | None, content: bytes | None) -> bool:
        with self._locked():
            if self.read()[1] != expected:
                return False
            if content is None:
                self.path.unlink(missing_ok=True)
            else:
                staging = self.directory / f".{LEASE}.{uuid.uuid4().hex}"
                staging.write_bytes(content)
                os.replace(staging, self.path)
            return True


class _S3Store:
    """The lease object on S3, swapped with conditional writes (ETags)."""

    def __init__(self, root: str, options: S3Config) -> None:
        import s3fs

        endpoint = options.endpoint_url
        self.fs = s3fs.S3FileSystem(
            anon=options.anon,
            key=options.access_key_id,
            secret=options.secret_access_key,
            endpoint_url=endpoint,
            client_kwargs={"region_name": options.region} if options.region else {},
            # A fresh client: fsspec's instance cache would hand back one made earlier in
            # this process, still bound to the endpoint and credentials the environment
            # named then (a notebook, or a test suite, moving between S3 stores).
            skip_instance_cache=True,
        )
        self.bucket, _, prefix = root.partition("/")
        self.key = f"{prefix}/{LEASE}" if prefix else LEASE

    def read(self) -> tuple[bytes | None, str | None]:
        """The content and its ETag from one GET, so the two always match."""
        from fsspec.asyn import sync

        async def get() -> tuple[bytes, str]:
            response = await self.fs._call_s3("get_object", Bucket=self.bucket, Key=self.key)
            async with response["Body"] as stream:
                return await stream.read(), response["ETag"]

        try:
            return sync(self.fs.loop, get)
        except FileNotFoundError:
            return None, None

    def swap(self, expected: str | None, content: bytes | None) -> bool:
        condition = {"IfNoneMatch": "*"} if expected is None else {"IfMatch": expected}
        try:
            self.fs.call_s3(
                "put_object",
                Bucket=self.bucket,
                Key=self.key,
                Body=content if content is not None else b"{}",
                **condition,
            )
        except FileExistsError:  # s3fs's translation of 412 Precondition Failed
            return False
        except Exception as error:  # noqa: BLE001 - botocore's precondition errors vary
            if _precondition_failed(error):
                return False
            raise
        return True


def _precondition_failed(error: BaseException) -> bool:
    text = f"{type(error).__name__} {error}"
    return any(
        marker in text for marker in ("PreconditionFailed", "412", "ConditionalRequestConflict")
    )


class WriterLease:
    """The right to write one output, for one run: `acquire`, then `heartbeat` while
    writing; `check` raises once it is lost."""

    def __init__(self, root: str, *, s3: S3Config | None, ttl: float = TTL_SECONDS) -> None:
        self.store: _Store = _S3Store(root, s3) if s3 is not None else _LocalStore(root)
        self.root, self.ttl = root, ttl
        self.run = uuid.uuid4().hex
        self.started = time.time()
        self._version: str | None = None
        self._lost = threading.Event()

    def _holder(self) -> Holder:
        return Holder(self.run, socket.gethostname(), os.getpid(), self.started,
                      time.time() + self.ttl)  # fmt: skip

    @staticmethod
    def _encode(holder: Holder) -> bytes:
        return json.dumps(asdict(holder), indent=2).encode()

    def acquire(self) -> None:
        """Take the lease, or raise OutputBusy naming the live run that holds it."""
        for _ in range(3):  # a lost race re-reads once or twice
            content, version = self.store.read()
            current = _decode(content)
            if current is not None and not current.dead(time.time()):
                raise OutputBusy(
                    f"output {self.root} is being written by another {current.describe()}; "
                    f"wait for it, or give another --output (its lease expires "
                    f"{max(0, current.expires - time.time()):.0f} s after it stops)"
                )
            mine = self._encode(self._holder())
            if self.store.swap(version, mine):
                if current is not None:
                    logger.warning("took over the output lease of %s (%s)", current.describe(),
                                   "expired" if time.time() >= current.expires
                                   else "its process has ended")  # fmt: skip
                self._version = self.store.read()[1]
                return
        raise OutputBusy(f"output {self.root}: another run took its lease at the same moment")

    def renew(self) -> None:
        """Push the expiry out by ``ttl``; marks the lease lost if someone else holds it."""
        if self._lost.is_set():
            return
        if not self.store.swap(self._version, self._encode(self._holder())):
            self._lost.set()
            return
        self._version = self.store.read()[1]

    def release(self) -> None:
        """Give the lease up (only if still ours)."""
        if self._lost.is_set() or self._version is None:
            return
        if isinstance(self.store, _LocalStore):
            self.store.swap(self._version, None)
        else:
            expired = Holder(self.run, socket.gethostname(), os.getpid(), self.started, 0.0)
            self.store.swap(self._version, self._encode(expired))
        self._version = None

    def check(self) -> None:
        """Raise LeaseLost if another run took the lease over."""
        if self._lost.is_set():
            raise LeaseLost(
                f"output {self.root}: this run stalled past its lease and another run took the "
                "output over; this run stops writing"
            )

    @contextlib.contextmanager
    def held(self) -> Iterator[WriterLease]:
        """Acquire, renew every ``ttl / 4`` seconds in a daemon thread, release at the end."""
        self.acquire()
        stop = threading.Event()

        def beat() -> None:
            while not stop.wait(self.ttl / 4):
                try:
                    self.renew()
                except Exception:  # noqa: BLE001 - a failed renewal is retried next beat
                    logger.warning("could not renew the output lease", exc_info=True)

        thread = threading.Thread(target=beat, name="minkscan-lease", daemon=True)
        thread.start()
        try:
            yield self
        finally:
            stop.set()
            thread.join()
            self.release()


def _decode(content: bytes | None) -> Holder | None:
    if not content:
        return None
    try:
        return Holder(**json.loads(content))
    except (ValueError, TypeError):
        return None  # unreadable: treat as free, the swap still guards the race
