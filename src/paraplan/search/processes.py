"""Worker processes that do not outlive the paraplan process that started them (sweeps, split searches)."""

from __future__ import annotations

import os
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
