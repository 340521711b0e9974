"""The Ray a run uses -- an embedded local one (started and ended here) or a cluster it
joins -- and whether it has the CPUs and GPUs the run's actor pools hold. Ray itself is
imported only when a run needs it, so planning a run stays light.

An embedded Ray is recorded when it starts (its session directory and the processes it
started) under ``<cache>/ray-sessions/``, and the record is removed when it shuts down. A
driver killed with SIGKILL cannot shut it down, and two of Ray's agents outlive it; the
next run on the machine finds the records of drivers that no longer exist and ends the
processes they list (checked by start time, so a reused pid is never touched) and any
process still holding files of that session -- identified by the session, never by name.
"""

from __future__ import annotations

import json
import logging
import math
import os
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

import psutil

from minkscan.config import ConfigError, ScanConfig
from minkscan.distributed.spec import StageSpec, required_cpus, required_gpus
from minkscan.models.names import default_cache_dir

logger = logging.getLogger(__name__)

GRACE_SECONDS = 3.0


def _records() -> Path:
    return default_cache_dir() / "ray-sessions"


def verbose() -> bool:
    """Whether the user asked for everything (``-v``: minkscan logs at DEBUG)."""
    return logging.getLogger("minkscan").isEnabledFor(logging.DEBUG)


def joins_cluster(config: ScanConfig) -> bool:
    return bool(config.ray.address or os.environ.get("RAY_ADDRESS"))


def ensure_ray(config: ScanConfig, stages: list[StageSpec]) -> None:
    """Join the configured cluster (or the job's), else start an embedded local Ray.

    Without an address a new local Ray is started even when one is already running on
    the machine (``address="local"``): joining a stranger's cluster by accident is never
    what ``minkscan score`` without ``--address`` means. It gets at least the CPUs the
    ``stages`` hold (`required_cpus`), so a small machine shares its cores instead of
    waiting for CPUs it does not have.
    """
    import ray  # here: planning a run imports no Ray

    if ray.is_initialized():
        return
    level = logging.INFO if verbose() else logging.ERROR
    if joins_cluster(config):
        ray.init(address=config.ray.address, log_to_driver=False, logging_level=level)
        return
    end_leftover_sessions()
    needed = max(math.ceil(required_cpus(stages)), os.cpu_count() or 1)
    context = ray.init(
        address="local",
        num_cpus=needed,
        include_dashboard=False,
        log_to_driver=False,
        logging_level=level,
    )
    _record(context.address_info["session_dir"])


def _record(session_dir: str) -> None:
    """Note this driver's embedded Ray session and every process it started."""
    me = psutil.Process()
    processes = []
    for child in me.children(recursive=True):
        with suppress(psutil.Error):
            processes.append([child.pid, child.create_time()])
    record = {
        "driver": [me.pid, me.create_time()],
        "session_dir": session_dir,
        "processes": processes,
    }
    _records().mkdir(parents=True, exist_ok=True)
    (_records() / f"{Path(session_dir).name}.json").write_text(json.dumps(record))


def _forget(session_dir: str) -> None:
    (_records() / f"{Path(session_dir).name}.json").unlink(missing_ok=True)


def _alive(pid: int, created: float) -> psutil.Process | None:
    """The process ``pid`` if it is the one started at ``created`` and has not exited."""
    try:
        process = psutil.Process(pid)
        same = abs(process.create_time() - created) < 0.01
        return process if same and process.status() != psutil.STATUS_ZOMBIE else None
    except psutil.Error:
        return None


def session_processes(session_dir: str, listed: list[list[float]] = ()) -> list[psutil.Process]:
    """The live processes of an embedded Ray session: those ``listed`` ([pid, start time])
    that still run, and any process whose command line or open files name its directory."""
    found = {p.pid: p for p in (_alive(int(pid), t) for pid, t in listed) if p is not None}
    for process in psutil.process_iter():
        if process.pid in found or process.pid == os.getpid():
            continue
        with suppress(psutil.Error):
            if process.status() == psutil.STATUS_ZOMBIE:
                continue  # exited; only its parent's reaping is left
            if session_dir in " ".join(process.cmdline()) or any(
                f.path.startswith(session_dir) for f in process.open_files()
            ):
                found[process.pid] = process
    return list(found.values())


def end_leftover_sessions() -> None:
    """End the processes of embedded Ray sessions whose driver no longer exists."""
    directory = _records()
    if not directory.is_dir():
        return
    for path in directory.glob("*.json"):
        try:
            record = json.loads(path.read_text())
        except (OSError, ValueError):
            path.unlink(missing_ok=True)
            continue
        if _alive(*record["driver"]) is not None:
            continue  # another run's embedded Ray, still in use
        processes = session_processes(record["session_dir"], record["processes"])
        for process in processes:
            with suppress(psutil.Error):
                process.terminate()
        _, left = psutil.wait_procs(processes, timeout=GRACE_SECONDS)
        for process in left:
            with suppress(psutil.Error):
                process.kill()
        if processes:
            logger.warning(
                "ended %d process(es) left by the embedded Ray of an earlier run whose driver "
                "(pid %d) was killed (session %s)",
                len(processes),
                record["driver"][0],
                Path(record["session_dir"]).name,
            )
        path.unlink(missing_ok=True)


def shutdown_ray() -> None:
    """Shut down the Ray this process started or joined (an embedded one stops entirely)."""
    import ray  # here: planning a run imports no Ray

    session_dir = _session_dir()
    ray.shutdown()
    if session_dir:
        _forget(session_dir)


def _session_dir() -> str | None:
    """This driver's embedded session directory, if it started one."""
    directory = _records()
    if not directory.is_dir():
        return None
    me = os.getpid()
    for path in directory.glob("*.json"):
        with suppress(OSError, ValueError):
            record = json.loads(path.read_text())
            if record["driver"][0] == me:
                return record["session_dir"]
    return None


@contextmanager
def ray_session(config: ScanConfig, stages: list[StageSpec]) -> Iterator[None]:
    """`ensure_ray` for the duration of a block; a Ray started here is shut down after it."""
    import ray  # here: planning a run imports no Ray

    started = not ray.is_initialized()
    own = signal.getsignal(signal.SIGTERM)
    ensure_ray(config, stages)
    if callable(own) and threading.current_thread() is threading.main_thread():
        # Ray's core worker replaces it with one that dumps a C++ stack and exits; the
        # command's own (`minkscan.cli`) unwinds instead: Ray shut down, the lease released.
        signal.signal(signal.SIGTERM, own)
    try:
        yield
    finally:
        if started:
            shutdown_ray()


def warn_if_too_small(config: ScanConfig, stages: list[StageSpec]) -> None:
    """Log a warning when the Ray cluster has fewer CPUs or GPUs than the ``stages`` hold at
    their minimum (`required_cpus`, `required_gpus`): it then waits for an autoscaler to add
    nodes, or stalls until Ray Data's no-progress timeout. The embedded Ray always has the
    CPUs; it has only this machine's GPUs and no node will join it, so too few is an error
    there."""
    import ray  # here: planning a run imports no Ray

    _check_gpus(config, stages)
    have = ray.cluster_resources().get("CPU", 0.0)
    needed = required_cpus(stages)
    if have < needed:
        logger.warning(
            "the Ray cluster has %g CPUs but this run needs at least %g (scoring and other model "
            "actors, tokenizer, a read task, the commit actor): it waits for more nodes; lower "
            "ray.cpus_per_actor / ray.num_actors if none will come",
            have,
            needed,
        )


def _check_gpus(config: ScanConfig, stages: list[StageSpec]) -> None:
    import ray  # here: planning a run imports no Ray

    total, widest = required_gpus(stages)
    node_gpus = [n["Resources"].get("GPU", 0.0) for n in ray.nodes() if n["Alive"]] or [0.0]
    have, most = sum(node_gpus), max(node_gpus)
    if have >= total and most >= widest:
        return
    problem = (
        f"this run needs {total:g} GPUs ({widest:g} per actor on one node: ray.gpus_per_actor"
        f"{', baselines.reference_gpus_per_actor' if config.baselines.reference_model else ''})"
        f" but the Ray cluster has {have:g} (at most {most:g} on a node)"
    )
    if not joins_cluster(config):
        raise ConfigError(
            f"{problem}: set ray.gpus_per_actor 0 to score on CPUs, or --address a cluster "
            "with GPUs"
        )
    logger.warning(
        "%s: it waits for GPU nodes; lower ray.gpus_per_actor if none will come", problem
    )
