"""Python's cyclic garbage collector around a command's work: one rule for the search and the command line.

A search or an estimate allocates many acyclic objects (memoised costings, start-up's imports, typer's commands,
the catalog) and makes no reference cycles worth collecting before it ends. Two costs come from the collector
alone (issue 31, docs/performance.md):

- a full collection walks every tracked object again: a quarter of the unrestricted DeepSeek-V3 search;
- the first young collection after a command has allocated them walks them all once: ~0.4 s after the DeepSeek-V3
  search, 25-60 ms after ``paraplan estimate`` (the collection started when ``cli.main.command_settings`` restored
  CPython's 700-allocation threshold).

:func:`promote_to_oldest` moves what is tracked into the oldest generation without a collection (``gc.freeze``, then
``gc.unfreeze``, CPython's documented pair: "move all objects into a permanent generation" and back "into the
oldest generation"); :func:`cyclic_gc_paused` turns the collector off for a piece of work and promotes what it
allocated after it.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


def promote_to_oldest() -> None:
    """Every tracked object into the collector's oldest generation, without walking any: no young collection
    follows. Skipped when the caller keeps objects frozen (``gc.unfreeze`` would release them)."""
    if not gc.get_freeze_count():
        gc.freeze()
        gc.unfreeze()


@contextmanager
def cyclic_gc_paused() -> Iterator[None]:
    """The cyclic collector off for the work inside, and back as it was after; what the work allocated joins the
    oldest generation (:func:`promote_to_oldest`). A caller that had the collector off keeps it off."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        promote_to_oldest()
        if was_enabled:
            gc.enable()
