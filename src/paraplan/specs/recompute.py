"""The recomputation modes: one home for what a plan's ``recompute`` (and ``recompute_modules``) means.

A *mode* is what a framework runs under one name: Megatron-LM's three granularities (``none``,
``selective``: the core attention, ``full``: every layer's forward), torchtitan's per-op selective
activation checkpointing (``op_sac``) and MaxText's ``remat_policy: minimal_flash`` (``save_dots``). The
last two are plans with ``recompute: selective`` and a one-policy ``recompute_modules`` list; their rule
(op_sac on dense swiglu layers at cp = 1, save_dots on dense layers) is specs.rules.recompute_violations.
The estimator's arithmetic reads a mode's ``code`` (step.block_terms.recompute_s: 0 nothing, 1 the
re-run ops of selective recomputation, 2 the whole forward); the searches vary the modes the framework's
stack runs (``offered_modes``; the uniform and the per-stage searches alike, a stage stating a mode as
``stage_fields``); the exporters read ``mode_of`` a plan.

Sources: Megatron-LM core_v0.14.0 ``--recompute-granularity`` / ``--recompute-modules``
(megatron/training/arguments.py); torchtitan v0.2.2 ``activation_checkpoint.mode`` /
``selective_ac_option = "op"`` (per-op policy: pytorch/torchtitan 9dec370
torchtitan/parallelisms/parallelize_llama.py:214-266, graph.ops.OP_SAC_SOURCE); MaxText ``remat_policy``
(google/maxtext 3075bbe MaxText/layers/models.py:255-261, graph.ops.SAVE_DOTS).
"""

from __future__ import annotations

from typing import NamedTuple, get_args

from paraplan.specs.choices import Recompute

OP_SAC = "op_sac"  # torchtitan's per-op SAC policy among the recompute modules
SAVE_DOTS = "save_dots"  # MaxText's minimal_flash policy among the recompute modules
DEFAULT_MODULES = ("core_attn",)  # Megatron-LM's --recompute-modules default (selective)
# the plan's recompute values (specs.choices.Recompute) and the code the step arithmetic reads
# (step.block_terms.recompute_s: 0 none, 1 selective, 2 full)
RECOMPUTE_CODES = {name: code for code, name in enumerate(get_args(Recompute))}


class RecomputeMode(NamedTuple):
    """One recomputation mode: its name (the search's ``--recompute`` value), the plan fields that state it
    and the framework stacks that run it (empty: every stack)."""

    name: str
    recompute: str  # the plan's ``recompute``
    modules: tuple[str, ...] = ()  # the plan's ``recompute_modules`` (empty: none given)
    stacks: tuple[str, ...] = ()  # the stacks that run it (catalog.framework_stack)

    @property
    def code(self) -> int:
        """The step arithmetic's code of the mode (RECOMPUTE_CODES)."""
        return RECOMPUTE_CODES[self.recompute]


MODES: dict[str, RecomputeMode] = {
    m.name: m
    for m in (
        RecomputeMode("none", "none"),
        RecomputeMode("selective", "selective"),
        RecomputeMode("full", "full"),
        RecomputeMode(OP_SAC, "selective", (OP_SAC,), ("torchtitan",)),
        RecomputeMode(SAVE_DOTS, "selective", (SAVE_DOTS,), ("maxtext",)),
    )
}
MODE_NAMES: tuple[str, ...] = tuple(MODES)  # a mode's index is its id in the search's row columns
COMMON_MODES: tuple[str, ...] = tuple(n for n, m in MODES.items() if not m.stacks)
POLICIES: tuple[str, ...] = tuple(p for m in MODES.values() for p in m.modules)  # op_sac, save_dots


def offered_modes(stack: str | None) -> tuple[str, ...]:
    """The modes a search with a framework whose stack profile is ``stack`` varies: the common ones, and
    the stack's own (none without a framework)."""
    return tuple(n for n, m in MODES.items() if not m.stacks or stack in m.stacks)


def stage_fields(name: str) -> tuple[str, tuple[str, ...]]:
    """How one stage of a per-stage plan states mode ``name``: (recompute, recompute_ops). A granularity is
    the stage's ``recompute``; a policy mode (op_sac, save_dots) its per-op list of that policy alone, with
    recompute none (step.per_stage: per-op recomputation is selective recomputation of the modules listed,
    graph.ops.recompute_modules_of)."""
    mode = MODES[name]
    return ("none", mode.modules) if mode.modules else (mode.recompute, ())


def stage_mode(recompute: str, ops: tuple[str, ...] = ()) -> str | None:
    """The mode a stage's (recompute, recompute_ops) states (stage_fields); None for a per-op list that is
    no mode (modules picked by the per-op search)."""
    found = [n for n in MODES if stage_fields(n) == (recompute, tuple(ops))]
    return found[0] if found else None


def recompute_label(recompute: str, recompute_ops: tuple[str, ...]) -> str:
    """A stage's recompute as the trajectory and plan labels show it: the mode (``stage_mode``), or
    'ops a+b' per op."""
    return stage_mode(recompute, recompute_ops) or "ops " + "+".join(recompute_ops)


def modules_of(recompute: str, modules: tuple[str, ...] | None = None) -> tuple[str, ...]:
    """Modules selective recomputation re-runs: the plan's list, else Megatron-LM's default
    ``core_attn`` (--recompute-modules); none without selective recompute."""
    if recompute != "selective":
        return ()
    return tuple(modules or ()) or DEFAULT_MODULES


def mode_modules(name: str, shaped: bool) -> tuple[str, ...]:
    """The modules the search's layer shapes state for mode ``name``: the mode's own policy, else the
    default modules on graphs that read them (``shaped``: MoE-shaped models, specs.moe_model.moe_shaped;
    a dense graph's selective default needs none)."""
    mode = MODES[name]
    if mode.modules or not shaped:
        return mode.modules
    return modules_of(mode.recompute)


def mode_of(recompute: str, modules: tuple[str, ...] | None = None) -> str:
    """The mode a plan's (recompute, recompute_modules) states: a one-policy list names its mode, anything
    else its granularity."""
    named = tuple(modules or ())
    found = [
        n for n, m in MODES.items() if named and (m.recompute, m.modules) == (recompute, named)
    ]
    return found[0] if found else recompute


def plan_fields(name: str) -> dict:
    """The plan fields (recompute, recompute_modules) of mode ``name``."""
    mode = MODES[name]
    return {"recompute": mode.recompute, "recompute_modules": mode.modules or None}
