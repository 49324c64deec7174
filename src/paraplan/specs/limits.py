"""Bounds on the sizes a search or sweep accepts: far above any real training run, low enough that
no input makes paraplan run for minutes, use gigabytes or overflow an integer.

The biggest runs of 2024-25 use ~1e5 GPUs, sequences of ~1e6 tokens and global batches of ~1e4
sequences; each bound leaves at least an order of magnitude above that.
"""

from __future__ import annotations

from paraplan.specs.errors import InputError

MAX_GPUS = 2**20  # 1,048,576 GPUs
MAX_SEQ_LENGTH = 2**24  # 16,777,216 tokens per sequence
MAX_GLOBAL_BATCH = 2**24  # sequences per step
MAX_TOP = 100  # plans kept per search (the top-k table; every feasible plan goes to --csv instead)
# distinct layer costings (milliseconds each, step.build.block_cost_facts) above which `search` says so before
# it starts and names the axes to restrict: 100,000 is minutes on one core (benchmarks/search_speed.py)
LARGE_COSTINGS = 100_000
# blocks (search.blocks) above which `search` says the block-by-block search takes seconds and names the axes to
# restrict: Qwen3-235B on 512 H100 has ~1,150 (~6 s), Mixtral 8x7B on 64 H100 ~540 (~1 s; docs/performance.md)
LARGE_BLOCKS = 1_000


def _check(flag: str, value: object, high: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= high:
        raise InputError(f"{flag}: {value!r} is not allowed; must be an integer from 1 to {high:,}")


def check_search_bounds(
    gpus: int,
    seq_length: int,
    batch: int,
    top: int | None,
    names: tuple[str, str, str, str],
) -> None:
    """InputError (one line naming the size as ``names`` does) when a size is outside the bounds
    above; ``top`` None is not checked."""
    highs = (MAX_GPUS, MAX_SEQ_LENGTH, MAX_GLOBAL_BATCH, MAX_TOP)
    for name, value, high in zip(names, (gpus, seq_length, batch, top), highs):
        if value is not None:
            _check(name, value, high)


def position_warning(model, seq_length: int) -> str | None:
    """A one-line warning when the sequence is longer than the positions the model was built for
    (``max_position``: a learned table has no rows beyond it; rotary models were not trained there)."""
    if seq_length <= model.max_position:
        return None
    kind = "its learned position table has" if model.learned_positions else "it was trained with"
    return (
        f"--seq-length {seq_length:,} is longer than {model.name}'s {model.max_position:,} positions "
        f"({kind} {model.max_position:,}); the estimate assumes the model is extended to it"
    )
