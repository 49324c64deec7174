"""A block-by-block search (search.run) split over processes that share one pruning threshold.

The blocks are dealt to the processes by costing class: blocks whose (tp, local tokens) are equal share their layer
floors (search.expert_floors.KindFloors), so a class goes whole to one process, the largest classes first to the least
loaded. Each process runs the same branch and bound over its blocks and keeps its own top K. The K-th group's objective
θ of any process is an admissible threshold for all of them: that process holds K groups at or below θ, so a candidate
above it is in no global top K. The processes therefore publish their θ in a shared double, and each prunes against
the least published one. The parent merges the parts' pools: the top K is the one-process search's (ties broken by
canonical row, as there). How many candidates are evaluated depends on when a threshold is published, so the counts
may differ from run to run; the plans do not.

The workers are forked (POSIX only; elsewhere the search runs in one process). A worker sends its part back through a
pipe and ends with os._exit: deallocating its caches one by one would keep the parent waiting (~1 s on DeepSeek-V3).
"""

from __future__ import annotations

import math
import multiprocessing
import os
import sys
import threading
import traceback

from paraplan.processes import die_with_parent

# the shared costing of a class, in keys' worth of per-key work (the balance of the split; measured on DeepSeek-V3:
# ~2 ms for a class's first (tp, cp, micro-batch) key, ~0.25 ms for each key after it)
SHARED_COST_KEYS = 8


AUTO_WORKERS_MAX = 4  # processes a search uses unasked (each holds its own cost caches: ~0.2 GB on DeepSeek-V3)


def processes_available() -> bool:
    """True where worker processes can be forked: the platform forks, and this process is not a daemonic worker
    (multiprocessing forbids those children)."""
    return "fork" in multiprocessing.get_all_start_methods() and not multiprocessing.current_process().daemon


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


class SharedThreshold:
    """The least K-th-group objective any process has published (math.inf before any): a double in shared memory."""

    def __init__(self, context=None):
        self.value = (context or multiprocessing).Value("d", math.inf)

    def get(self) -> float:
        return self.value.value

    def offer(self, threshold: float) -> None:
        """Publish a process's threshold (kept when it is below the shared one)."""
        if threshold < self.value.value:
            with self.value.get_lock():
                if threshold < self.value.value:
                    self.value.value = threshold


def split_by_costing_class(blocks: list, workers: int, costing_class) -> list[list]:
    """``blocks`` in at most ``workers`` parts, each in the blocks' order: the blocks of one costing_class(block) (a
    function of the block's (tp, cp, micro-batch), asked once per key) together, classes dealt largest first
    (SHARED_COST_KEYS plus their distinct keys) to the least loaded."""
    classes: dict = {}
    of_key: dict = {}
    for block in blocks:
        key = (block.tp, block.cp, block.micro_batch)
        if key not in of_key:
            of_key[key] = costing_class(block)
        classes.setdefault(of_key[key], []).append(block)
    parts: list[list] = [[] for _ in range(workers)]
    loads = [0] * workers

    def weight(members: list) -> int:
        return SHARED_COST_KEYS + len({(b.tp, b.cp, b.micro_batch) for b in members})

    for members in sorted(classes.values(), key=weight, reverse=True):
        w = loads.index(min(loads))
        parts[w] += members
        loads[w] += weight(members)
    return [sorted(part, key=lambda b: b.offset) for part in parts if part]


def run_parts(task, parts: list[list]) -> list:
    """[task(part, shared) for part in parts], the first part in this process and each other one in a forked worker,
    all with one SharedThreshold; an exception in a worker is raised here (with the worker's traceback)."""
    context = multiprocessing.get_context("fork")
    shared = SharedThreshold(context)
    workers = []
    for part in parts[1:]:
        receiver, sender = context.Pipe(duplex=False)
        process = context.Process(target=_worker, args=(task, part, shared, sender, os.getpid()), daemon=True)
        process.start()
        sender.close()
        workers.append((process, receiver))
    finished = False
    try:
        results = [task(parts[0], shared)]
        for process, receiver in workers:
            try:
                status, value = receiver.recv()
            except EOFError:
                raise RuntimeError(f"a search worker ended without a result (exit code {process.exitcode})") from None
            if status == "error":
                raise RuntimeError(f"a search worker failed:\n{value}")
            results.append(value)
        finished = True
        return results
    finally:
        for process, receiver in workers:
            receiver.close()
            if not finished:  # this process failed or was interrupted: the workers' parts are not wanted
                process.kill()
            process.join()


def _worker(task, part, shared: SharedThreshold, sender, parent_pid: int) -> None:
    """A forked worker: task(part, shared) sent through ``sender``, then os._exit (no teardown of its caches); it ends
    with the process that started it (processes.die_with_parent)."""
    import gc

    gc.disable()
    die_with_parent(parent_pid)
    code = 0
    try:
        try:
            sender.send(("ok", task(part, shared)))
        except BaseException:  # noqa: BLE001 - reported to the parent, which raises it
            code = 1
            sender.send(("error", traceback.format_exc()))
        sender.close()
    finally:
        os._exit(code)
