"""A block-by-block search (search.run) split over processes that share one pruning threshold.

The blocks are dealt to the processes by costing class (search.blocks.costing_class): blocks whose (tp, local tokens)
are equal share their layer floors (search.expert_floors.KindFloors), so a class goes whole to one process; the classes are dealt in descending
order, each to the least loaded process (split_by_costing_class). Each process runs the same branch and bound over
its blocks and keeps its own top K. The K-th group's objective θ of any process is an admissible threshold for all of
them: that process holds K groups at or below θ, so a candidate above it is in no global top K. The processes
therefore publish their θ in a shared double, and each prunes against the least published one. They also publish
their best K groups, whose K-th together is tighter than any one's own when the best plans are spread over the
processes (PartView.offer_groups), and a block's scan never loosens the threshold the others reached
(search.scan.Scan.ceiling); a scan publishes its threshold as soon as it holds K groups and takes, between batches,
a lower one another process published meanwhile (search.scan.Scan.refresh). A process that has finished its own
blocks does not sit idle: the others hand it the blocks they reach the scan of (PartView.hand_over, help_until_done;
a block's row table and scan are ~0.1 s on DeepSeek-V3, and the process holding the winner's blocks used to end
~0.25 s after the other). The parent merges the parts' pools: the top K is the one-process search's (ties broken by
canonical row, as there), whoever scanned a block. The evaluated counts can differ from one process's (the blocks are
searched in another order), the plans cannot.

The workers are forked (POSIX only; elsewhere the search runs in one process). A worker sends its part back through a
pipe and ends with os._exit: deallocating its caches one by one would keep the parent waiting (~1 s on DeepSeek-V3).
"""

from __future__ import annotations

import math
import multiprocessing
import os
import time
import traceback
from typing import NamedTuple

import numpy as np

from paraplan.search.processes import (  # noqa: F401 (auto_workers: named here too)
    AUTO_WORKERS_MAX,
    auto_workers,
    die_with_parent,
)
from paraplan.search import ranking

# the shared costing of a class, in keys' worth of per-key work (the balance of the split; measured on DeepSeek-V3:
# ~2 ms for a class's first (tp, cp, micro-batch) key, ~0.25 ms for each key after it)
SHARED_COST_KEYS = 8


def processes_available() -> bool:
    """True where worker processes can be forked: the platform forks, and this process is not a daemonic worker
    (multiprocessing forbids those children)."""
    return (
        "fork" in multiprocessing.get_all_start_methods()
        and not multiprocessing.current_process().daemon
    )


class SharedSearch:
    """What the processes of one split search share: the least K-th-group objective any of them has reached
    (math.inf before any), each one's best top_k groups, and the blocks handed over to the processes that finished
    their own (up to ``blocks`` of them: PartView.hand_over). ``view(i)`` is what process i uses (PartView)."""

    def __init__(self, parts: int, context=None, top_k: int = 0, blocks: int = 0):
        context = context or multiprocessing
        self.parts = parts
        self.threshold = context.Value("d", math.inf)
        # each process's best top_k groups, (objective, step, peak) each, tie-rounded (PartView.offer_groups)
        self.top_k = top_k
        self.groups = context.RawArray("d", [math.inf] * (parts * top_k * 3))
        # handed-over blocks (an id and the bound they were handed over at), how many were handed over and taken, and
        # how many processes finished their own blocks; under the threshold's lock
        self.handed = context.RawArray("q", max(blocks, 1))
        self.handed_bounds = context.RawArray("d", max(blocks, 1))
        self.counts = context.RawArray("q", 3)  # handed over, taken, finished
        self.workers: list = []  # the parent's: its forked workers (run_parts), whose end PartView.help_until_done sees

    def view(self, index: int) -> "PartView":
        return PartView(self, index)


class PartView:
    """One process's side of a SharedSearch."""

    def __init__(self, shared: SharedSearch, index: int):
        self.shared, self.index = shared, index

    def get(self) -> float:
        """The least threshold published."""
        return self.shared.threshold.value

    def offer(self, threshold: float) -> None:
        """Publish this process's threshold (kept when it is below the shared one)."""
        value = self.shared.threshold
        if threshold < value.value:
            with value.get_lock():
                if threshold < value.value:
                    value.value = threshold

    def offer_groups(self, objectives, steps, peaks) -> None:
        """Publish this process's best top_k groups (its pool's candidates) and offer the K-th group objective of
        every process's published groups together (ranking.kth_group_objective): admissible, since each published
        group is a plan some process found, and tighter than any one process's K-th when the best groups are spread
        over the processes. Under the threshold's lock: no process reads a half-written slot."""
        shared, k = self.shared, self.shared.top_k
        if not k:
            return
        triples = ranking.unique_rows(
            np.stack(
                [
                    ranking.tie_value(np.asarray(objectives, dtype=float)),
                    ranking.tie_value(np.asarray(steps, dtype=float)),
                    ranking.tie_value(np.asarray(peaks, dtype=float)),
                ],
                axis=1,
            )
        )[:k]
        mine = np.full((k, 3), math.inf)
        mine[: len(triples)] = triples
        with shared.threshold.get_lock():  # a reentrant lock: offer takes it again
            slot = self.index * k * 3
            shared.groups[slot : slot + k * 3] = mine.ravel().tolist()
            every = np.frombuffer(shared.groups, dtype=float).reshape(-1, 3)
            found = every[np.isfinite(every[:, 0])]
            self.offer(
                ranking.kth_group_objective(found[:, 0], found[:, 1], found[:, 2], k)
                if len(found)
                else math.inf
            )

    def waiting(self) -> bool:
        """Some process has finished its own blocks and takes handed-over ones (help_until_done)."""
        return self.shared.counts[2] > 0

    def hand_over(self, block: int, bound: float) -> bool:
        """Hand block ``block`` (its id), whose bound is ``bound``, to a process that finished its own: False when no
        process waits for one or there is no room (the caller then searches it itself)."""
        shared = self.shared
        with shared.threshold.get_lock():
            handed = shared.counts[0]
            if not self.waiting() or handed >= len(shared.handed):
                return False
            shared.handed[handed], shared.handed_bounds[handed] = block, bound
            shared.counts[0] = handed + 1
        return True

    def take(self) -> tuple[int, float] | None:
        """The next handed-over (block id, bound), or None."""
        shared = self.shared
        with shared.threshold.get_lock():
            taken = shared.counts[1]
            if taken >= shared.counts[0]:
                return None
            shared.counts[1] = taken + 1
            return shared.handed[taken], shared.handed_bounds[taken]

    def help_until_done(self, search) -> None:
        """This process has finished its own blocks: search(block id, bound) every block handed over until every
        process has finished its own and none is left. A block is handed over only by a process that has not
        finished, so once all have, what the list holds is all there will be; the parent stops waiting when a worker
        ended without finishing (it failed: run_parts reports it)."""
        shared = self.shared
        with shared.threshold.get_lock():
            shared.counts[2] += 1
        while True:
            item = self.take()
            if item is None:
                if shared.counts[2] < shared.parts:
                    if shared.workers and not all(process.is_alive() for process in shared.workers):
                        return
                    time.sleep(HELP_POLL_S)
                    continue
                item = self.take()
                if item is None:
                    return
            search(*item)


HELP_POLL_S = 0.001  # how often a process that finished its own blocks looks for handed-over ones


class PartOutcome(NamedTuple):
    """What a branch and bound over some blocks found: its top K pool, nearest miss and faster misses (canonical rows,
    with the (Row, grid option) of each in ``resolved``), its counters."""

    pool: list
    faster: list
    nearest: tuple | None
    resolved: dict
    evaluated: int
    feasible: int
    rows_done: int


def split_by_costing_class(blocks: list, workers: int, costing_class) -> list[list]:
    """``blocks`` in at most ``workers`` parts, each in the blocks' order: the blocks of one costing_class(block) (a
    function of the block's (tp, cp, micro-batch), asked once per key) together, the classes in descending order each
    to the least loaded part (load: SHARED_COST_KEYS plus a class's distinct keys). Neighbouring classes (one tp,
    similar token counts) have similar bounds, so dealing them in order alternates them between the parts and spreads
    the blocks the search refines (measured on DeepSeek-V3: 864 / 809 memory refinements per part, against 978 / 695
    when the largest classes went first)."""
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

    for _, members in sorted(classes.items(), key=lambda item: item[0], reverse=True):
        w = loads.index(min(loads))
        parts[w] += members
        loads[w] += weight(members)
    return [sorted(part, key=lambda b: b.offset) for part in parts if part]


def run_parts(task, parts: list[list], top_k: int = 0, blocks: int = 0) -> list:
    """[task(part, view) for part in parts], the first part in this process and each other one in a forked worker,
    each with its view of one SharedSearch (sharing top_k groups per process, and up to ``blocks`` handed-over blocks);
    an exception in a worker is raised here (with the worker's traceback)."""
    context = multiprocessing.get_context("fork")
    shared = SharedSearch(len(parts), context, top_k, blocks)
    workers = []
    for index, part in enumerate(parts[1:], start=1):
        receiver, sender = context.Pipe(duplex=False)
        process = context.Process(
            target=_worker, args=(task, part, shared.view(index), sender, os.getpid()), daemon=True
        )
        process.start()
        sender.close()
        workers.append((process, receiver))
    shared.workers = [process for process, _ in workers]
    finished = False
    try:
        results = [task(parts[0], shared.view(0))]
        for process, receiver in workers:
            try:
                status, value = receiver.recv()
            except EOFError:
                raise RuntimeError(
                    f"a search worker ended without a result (exit code {process.exitcode})"
                ) from None
            if status == "error":
                raise RuntimeError(f"a search worker failed:\n{value}")
            results.append(value)
        finished = True
        return results
    finally:
        for process, receiver in workers:
            receiver.close()
            if (
                not finished
            ):  # this process failed or was interrupted: the workers' parts are not wanted
                process.kill()
            process.join()


def _worker(task, part, shared: PartView, sender, parent_pid: int) -> None:
    """A forked worker: task(part, shared) sent through ``sender``, then os._exit (no teardown of its caches); it ends
    with the process that started it (processes.die_with_parent)."""
    import gc

    gc.disable()
    die_with_parent(parent_pid)
    code = 0
    try:
        try:
            result = ("ok", task(part, shared))
        except BaseException:  # noqa: BLE001 - reported to the parent, which raises it
            code = 1
            result = ("error", traceback.format_exc())
        sender.send(result)
        sender.close()
    finally:
        os._exit(code)
