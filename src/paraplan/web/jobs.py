"""Long work off the server's event loop: each search or sweep runs in a worker process, which
reports progress through a pipe and can be cancelled (the process is terminated).

Workers are started ahead of time (spawned processes, so no lock of the server's threads is
inherited) and warmed with a small search, so a search starts at once with the catalog, the cost
caches and the validation residuals loaded; a worker whose job ended is kept for the next job (at
most ``IDLE_WORKERS`` wait), one that was cancelled or ran out of time is terminated and replaced.
Each job has a wall-clock limit (``JobManager.time_limit_s``).

Jobs live only as long as the server: nothing is journaled, because a search is deterministic and
its page's URL holds the whole problem. A server that is killed takes its workers with it (each
worker ends itself when its parent is gone: ``_watch_parent``); after a restart the old job's id is
refused (ids carry the server run's token, so an old id never names a new job) and the page runs the
search again from its URL, with identical numbers (tests/fuzz/test_kill_server.py).
"""

from __future__ import annotations

import itertools
import multiprocessing as mp
import os
import secrets
import threading
import time
from dataclasses import dataclass, field

from paraplan.api import InputError

MAX_JOBS = 8  # jobs running at once; more are refused with a one-line error
IDLE_WORKERS = 2  # started workers kept waiting for a job (two tabs search at once without a start)
KEEP_FINISHED = 64  # finished jobs kept for their result (the oldest dropped first)
PARENT_POLL_S = 0.2  # how often a worker checks that the server that started it still runs


def _watch_parent(parent: int) -> None:  # pragma: no cover - runs in the child process
    """End this worker process as soon as the server that started it is gone (killed, SIGKILL
    included: its pipe only closes once the running search returns, which may take minutes)."""
    while os.getppid() == parent:
        time.sleep(PARENT_POLL_S)
    os._exit(0)


def _worker(conn, parent: int) -> None:  # pragma: no cover - runs in the child process
    """Warm up, then run jobs one after another: progress, then ("done", doc) or ("error", flag,
    message) for each, until the pipe closes or the server (pid ``parent``) is gone. A job is (kind,
    problem, extra): a search's Problem, or a sweep's definition with ``extra`` the page's field its
    errors are shown next to."""
    threading.Thread(target=_watch_parent, args=(parent,), daemon=True).start()
    from paraplan.web import work
    from paraplan.web.params import flag_of

    work.warm_up()
    while True:
        try:
            kind, problem, extra = conn.recv()
        except (EOFError, OSError):
            return

        def progress(done, total=None, phase="searching"):
            conn.send(("progress", int(done), None if total is None else int(total), str(phase)))

        try:
            if kind == "sweep":  # extra: the page's field of the sweep (its errors show there)
                doc = work.run_sweep(problem, progress)
            else:
                doc = work.run_search(problem, progress)
            conn.send(("done", doc))
        except InputError as exc:
            flag = extra if kind == "sweep" else getattr(exc, "flag", None) or flag_of(str(exc))
            conn.send(("error", flag, str(exc)))
        except Exception as exc:  # noqa: BLE001 - shown on the page as one line, never a traceback
            conn.send(("error", None, f"internal error: {type(exc).__name__}: {exc}"))


@dataclass
class Job:
    id: str
    kind: str
    state: str = "running"  # running | done | error | cancelled
    progress: dict = field(default_factory=lambda: {"done": 0, "total": None, "phase": "starting"})
    result: dict | None = None
    error: dict | None = None
    started: float = field(default_factory=time.monotonic)
    process: object = None
    version: int = 0  # bumped on every change (the event stream sends what changed)

    def public(self) -> dict:
        out = {"id": self.id, "kind": self.kind, "state": self.state, "progress": self.progress}
        out["elapsed_s"] = round(time.monotonic() - self.started, 3)
        if self.error:
            out["error"] = self.error
        if self.result is not None:
            out["result"] = self.result
        return out


class JobManager:
    def __init__(self, time_limit_s: float = 300.0):
        self.time_limit_s = time_limit_s
        self.jobs: dict[str, Job] = {}
        self.lock = threading.Lock()
        self.ids = itertools.count(1)
        self.run = secrets.token_hex(4)  # this server run's token, part of every job id
        self.context = mp.get_context("spawn")
        self.idle: list = []  # (process, pipe) of started workers waiting for a job
        self.closed = False

    def _process(self):
        """A started worker waiting for its job (an idle one when there is one)."""
        with self.lock:
            while self.idle:
                worker = self.idle.pop()
                if worker[0].is_alive():
                    return worker
        return self._start()

    def _release(self, worker) -> None:
        """A worker whose job ended keeps waiting for the next one, or ends when enough wait."""
        with self.lock:
            if not self.closed and len(self.idle) < IDLE_WORKERS and worker[0].is_alive():
                self.idle.append(worker)
                return
        worker[1].close()
        worker[0].terminate()

    def _start(self):
        parent, child = self.context.Pipe()
        process = self.context.Process(target=_worker, args=(child, os.getpid()), daemon=True)
        process.start()
        child.close()
        return process, parent

    def warm(self) -> None:
        """Start idle workers up to IDLE_WORKERS (in the background: a start takes ~1 s)."""

        def start():
            with self.lock:
                wanted = IDLE_WORKERS - len(self.idle)
            for _ in range(max(wanted, 0)):
                self._release(self._start())

        threading.Thread(target=start, daemon=True).start()

    def submit(self, kind: str, problem, extra=None) -> Job:
        running = sum(j.state == "running" for j in self.jobs.values())
        if running >= MAX_JOBS:
            raise InputError(f"server: {running} searches are running; at most {MAX_JOBS} at once")
        process, conn = self._process()
        job = Job(id=f"j{next(self.ids)}-{self.run}", kind=kind, process=process)
        conn.send((kind, problem, extra))
        with self.lock:
            self.jobs[job.id] = job
            finished = [j for j in self.jobs.values() if j.state != "running"]
            for old in finished[: max(0, len(finished) - KEEP_FINISHED)]:
                del self.jobs[old.id]
        threading.Thread(target=self._follow, args=(job, conn), daemon=True).start()
        if not self.idle:
            self.warm()
        return job

    def _follow(self, job: Job, conn) -> None:
        """Read the worker's messages into the job until it ends, is cancelled or runs out of time."""
        while job.state == "running":
            if time.monotonic() - job.started > self.time_limit_s:
                self._end(job, "late", error={"field": None, "message": self._late()})
                break
            try:
                ready = conn.poll(0.05)
                message = conn.recv() if ready else None
            except (EOFError, OSError):
                if job.state == "running":
                    self._end(job, "error", error={"field": None, "message": "worker ended"})
                break
            if message is None:
                continue
            if message[0] == "progress":
                job.progress = {"done": message[1], "total": message[2], "phase": message[3]}
                job.version += 1
            else:
                if message[0] == "done":
                    self._end(job, "done", result=message[1])
                else:
                    self._end(job, "error", error={"field": message[1], "message": message[2]})
                self._release((job.process, conn))
                return
        conn.close()

    def _late(self) -> str:
        return (
            f"server: the search ran past the time limit of {self.time_limit_s:g} s and was stopped;"
            " restrict axes (tp, pp, cp, micro-batch) for a faster search"
        )

    def _end(self, job: Job, state: str, result=None, error=None) -> None:
        with self.lock:
            if job.state != "running":
                return
            job.state, job.result, job.error = (
                ("error" if state == "late" else state),
                result,
                error,
            )
            job.version += 1
        if job.process is not None and job.process.is_alive() and state in ("cancelled", "late"):
            job.process.terminate()

    def cancel(self, job_id: str) -> Job | None:
        job = self.jobs.get(job_id)
        if job is not None:
            self._end(job, "cancelled")
        return job

    def close(self) -> None:
        for job in list(self.jobs.values()):
            self._end(job, "cancelled")
        with self.lock:
            self.closed, idle, self.idle = True, self.idle, []
        for process, conn in idle:
            conn.close()
            process.terminate()
