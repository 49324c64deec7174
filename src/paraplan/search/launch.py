"""Which plans a framework can launch: the search's side of the rule the exporters check (issue 34).

With ``--framework F`` the search covers only plans F runs and can be exported to F: for the Megatron-Core
profile (exported to Megatron-LM and NeMo) the rules of specs.rules (megatron_fsdp_rule,
megatron_overlap_rule, taken from Megatron-LM core_v0.14.0's start-up checks, export/facts) and the
knobs its exporters cannot write are left out of the space: the schedules other than 1F1B and
interleaved 1F1B, weight and activation offload, optimizer offload (Megatron offloads it only beside the
distributed optimizer; the grid's state and offload axes are independent, so it is left out whole),
rank orders other than its default, TP comm overlap without sequence parallelism, and EP all-to-all
overlap (Megatron-Core asserts it without full recomputation and with virtual stages at pp > 1, which
the row's expert option cannot see). Profiles without kept start-up checks (deepspeed, torchtitan,
maxtext, the 2021 profiles) search the whole space; the rows then say which frameworks run them.
"""

from __future__ import annotations

from functools import lru_cache

from paraplan.specs.rules import megatron_fsdp_rule, megatron_overlap_rule

MEGATRON_CORE = "megatron-core"
MEGATRON_SCHEDULES = ("1f1b", "interleaved")


@lru_cache(maxsize=64)
def restricted(framework: str | None) -> bool:
    """Does the search leave out plans this framework profile cannot launch? The Megatron-Core
    profile and the recipe profiles built on it (``base: megatron-core``: nemo-24.09,
    megatron-bridge-25.11)."""
    if framework is None:
        return False
    if framework == MEGATRON_CORE:
        return True
    from paraplan.catalog import framework_names, load_framework

    return framework in framework_names() and load_framework(framework).base == MEGATRON_CORE


def schedule_allowed(framework: str | None, schedule: str) -> bool:
    """Megatron-LM runs 1F1B and interleaved 1F1B pipelines."""
    return not restricted(framework) or schedule in MEGATRON_SCHEDULES


def state_allowed(framework: str | None, zero: int, reduce: bool, gather: bool, pp: int) -> bool:
    """ZeRO stage and DP overlaps at this pipeline depth (specs.rules megatron rules)."""
    if not restricted(framework):
        return True
    return not (megatron_fsdp_rule(zero, pp) or megatron_overlap_rule(zero, reduce, gather))


def offloads_allowed(framework: str | None) -> bool:
    """Are offloads searched? Not for Megatron-Core (see the module doc)."""
    return not restricted(framework)


def placement_varied(framework: str | None, vary: bool) -> bool:
    """Megatron-Core's searched rank order is its default (tp-cp-ep-dp-pp)."""
    return vary and not restricted(framework)


def tp_overlap_allowed(framework: str | None, sequence_parallel: bool, overlap: bool) -> bool:
    """Megatron-LM's --tp-comm-overlap needs --sequence-parallel (arguments.py line 845)."""
    return not restricted(framework) or sequence_parallel or not overlap


def a2a_overlap_allowed(framework: str | None, overlap: bool) -> bool:
    """EP all-to-all overlap is left out for Megatron-Core (see the module doc)."""
    return not restricted(framework) or not overlap
