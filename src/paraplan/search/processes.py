"""Worker processes that do not outlive the paraplan process that started them (sweeps, split searches)."""

from __future__ import annotations

import os
import sys
import threading
import time

PARENT_POLL_S = 0.25  # how often a worker checks that the process that started it is alive


def die_with_parent(parent_pid: int) -> None:
    """In a worker process: exit as soon as the process that started it is gone (even after SIGKILL, which runs
    no clean-up in the parent): on Linux the kernel sends SIGKILL (prctl PR_SET_PDEATHSIG), elsewhere
    a daemon thread notices the new parent within PARENT_POLL_S."""
    try:  # Linux: immediate
        import ctypes
        import signal

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG = 1
    except (OSError, AttributeError):  # pragma: no cover - not Linux
        pass

    def watch() -> None:
        while os.getppid() == parent_pid:
            time.sleep(PARENT_POLL_S)
        os._exit(1)

    if os.getppid() != parent_pid:  # the parent died before this worker started
        os._exit(1)
    threading.Thread(target=watch, daemon=True, name="paraplan-parent-watch").start()


AUTO_WORKERS_MAX = (
    4  # processes a search uses unasked (each holds its own cost caches: ~0.2 GB on DeepSeek-V3)
)


def auto_workers() -> int:
    """The processes a block-by-block search uses when not told: the CPUs this process may run on, at most
    AUTO_WORKERS_MAX, on Linux (forking is the platform's default there) in a process running no other thread (a fork
    copies one thread, and the locks the others hold); 1 elsewhere."""
    if not sys.platform.startswith("linux") or threading.active_count() > 1:
        return 1
    try:
        usable = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # pragma: no cover - no affinity call
        usable = os.cpu_count() or 1
    return max(1, min(usable, AUTO_WORKERS_MAX))
