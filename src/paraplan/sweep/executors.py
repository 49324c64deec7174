"""Where a sweep's points run: in this process, on local processes (spawned, each dying with its
parent) or on a Dask scheduler; every finished record goes to ``write`` as it arrives."""

from __future__ import annotations

import hashlib
import os
import socket
import struct
from collections.abc import Callable

from paraplan.search.processes import die_with_parent
from paraplan.specs.errors import InputError
from paraplan.sweep.journal import dumps
from paraplan.sweep.point import run_point


def execute(
    tasks: list[dict], write: Callable[[dict], None], workers: int = 1, dask: str | None = None
) -> None:
    """Run ``run_point`` on every task: in this process (workers=1), on local processes, or on Dask."""
    if not tasks:
        return
    if dask is not None:
        _execute_dask(tasks, write, dask, workers)
    elif workers <= 1 or len(tasks) == 1:
        for task in tasks:
            write(run_point(task))
    else:
        import multiprocessing
        from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait

        context = multiprocessing.get_context(
            "spawn"
        )  # no fork of a process that runs a progress thread
        pool = ProcessPoolExecutor(
            max_workers=min(workers, len(tasks)),
            mp_context=context,
            initializer=die_with_parent,
            initargs=(os.getpid(),),
        )
        try:
            pending = {pool.submit(run_point, task) for task in tasks}
            while pending:
                finished, pending = wait(pending, return_when=FIRST_COMPLETED)
                for future in sorted(finished, key=lambda f: f.result()["index"]):
                    write(future.result())
        except (
            BaseException
        ):  # interrupted or failed: stop at once; finished points are saved already
            processes = list(
                (getattr(pool, "_processes", None) or {}).values()
            )  # shutdown() forgets them
            for process in processes:
                process.terminate()
            pool.shutdown(wait=False, cancel_futures=True)
            raise
        pool.shutdown()


def _execute_dask(
    tasks: list[dict], write: Callable[[dict], None], address: str, workers: int
) -> None:
    try:
        from distributed import Client, LocalCluster, as_completed
    except ImportError:  # pragma: no cover - a main dependency
        raise InputError(
            "--dask: the 'distributed' package is not installed; pip install distributed"
        ) from None
    cluster = None
    try:
        if address == "local":
            cluster = LocalCluster(
                n_workers=workers if workers > 1 else 2,
                threads_per_worker=1,
                processes=True,
                dashboard_address=None,
            )
            client = Client(cluster)
            # the workers are this process's children (the nannies run in this process): give them the
            # same parent-death guarantee as --workers (Dask's own worker processes also watch a pipe
            # to the parent and exit when it closes; this does not depend on that)
            client.run(die_with_parent, os.getpid())
        else:
            _check_dask_address(address)
            _probe_dask_scheduler(address)
            try:
                client = Client(address, timeout="10s")
            except (OSError, TimeoutError, ValueError, MemoryError) as exc:
                raise InputError(
                    f"--dask: cannot connect to the scheduler at {address!r}: {exc}"
                ) from None
        try:
            futures = [
                client.submit(
                    run_point,
                    task,
                    key=f"paraplan-point-{task['index']}-{_task_token(task)}",
                    pure=False,
                )
                for task in tasks
            ]
            for future, record in as_completed(futures, with_results=True):
                write(record)
        finally:
            client.close()
    finally:
        if cluster is not None:
            cluster.close()


def _check_dask_address(address: str) -> None:
    """A scheduler address ``[protocol://]host:port`` with a port in 1..65535 (checked before a
    connection attempt that would wait for its timeout)."""
    rest = address.split("://", 1)[-1]
    host, sep, port = rest.rpartition(":")
    if not sep or not host or not port.isdigit() or not 1 <= int(port) <= 65535:
        raise InputError(
            f"--dask: {address!r} is not a scheduler address; give tcp://HOST:PORT (port 1-65535) or 'local'"
        )


# a Dask comm opens with its handshake: one small frame, its length first (8 bytes, little endian)
DASK_PROBE_TIMEOUT_S = 10.0
DASK_HANDSHAKE_MAX_BYTES = 1 << 20


def _probe_dask_scheduler(address: str, timeout_s: float = DASK_PROBE_TIMEOUT_S) -> None:
    """Refuse a TCP peer that does not open as a Dask scheduler does, before Dask reads its
    first 8 bytes as a frame length (issue 37: an SSH or HTTP banner read as "3.07 EiB" and a
    MemoryError; a silent peer waited past the client's timeout). A scheduler sends its
    handshake, a frame of a few hundred bytes, as soon as the connection opens."""
    protocol, sep, rest = address.rpartition("://")
    if sep and protocol != "tcp":
        return  # tls:// and others: the first bytes are the transport's, not Dask's
    host, _, port = rest.rpartition(":")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s) as sock:
            sock.settimeout(timeout_s)
            head = b""
            while len(head) < 8:
                chunk = sock.recv(8 - len(head))
                if not chunk:
                    break
                head += chunk
    except TimeoutError:
        head = None
    except OSError as exc:
        raise InputError(f"--dask: cannot connect to the scheduler at {address!r}: {exc}") from None
    if head is None or len(head) < 8:
        said = f"sent nothing within {timeout_s:g} s" if head is None else "closed the connection"
        raise InputError(f"--dask: {address!r} is not a Dask scheduler (it {said})")
    length = struct.unpack("<Q", head)[0]
    if not 0 < length <= DASK_HANDSHAKE_MAX_BYTES:
        raise InputError(
            f"--dask: {address!r} is not a Dask scheduler (its first bytes are no Dask "
            f"handshake: a frame of {length} bytes)"
        )


def _task_token(task: dict) -> str:
    return hashlib.sha1(dumps(task).encode()).hexdigest()[:12]
