"""Option declarations several commands share, each with its one help text (``typer`` reads an
``Annotated`` alias as the declaration; the parameter's default stays at the command), and option
groups: sets of options several commands take together, declared once as a dataclass whose fields
are the options (``option_groups`` puts them into each command's signature)."""

from __future__ import annotations

import functools
import inspect
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Callable, Optional, get_type_hints

from paraplan.cli.app import (
    Attention,
    CpOption,
    DefaultOverlapOption,
    DefaultPlacementOption,
    Dtype,
    MicroBatchOption,
    NoOffloadOption,
    PpOption,
    RecomputeOption,
    ScheduleOption,
    TpOption,
    VarySplitOption,
    ZeroOption,
    search_restrictions,
)
from paraplan.cli.declare import given, optional, switch
from paraplan.cli.goodput_opts import GoodputChanges

ModelOption = given(
    str, "--model", "-m", help="catalog name, or a YAML/JSON file (or a Hugging Face config.json)"
)
SeqLengthOption = given(int, "--seq-length")
GlobalBatchOption = optional(int, "--global-batch", help="sequences per step")
MaxGlobalBatchOption = optional(
    int,
    "--max-global-batch",
    help="instead of --global-batch: largest multiple of dp·micro_batch not above it",
)
DtypeOption = given(Dtype, "--dtype")
AttentionOption = given(Attention, "--attention")
PriceOption = optional(float, "--price", help="USD per GPU-hour (default: the system's)", min=0.0)
JsonOption = switch("--json", help="print JSON instead of tables")
TokensOption = optional(
    str, "--tokens", help="run length in tokens (15e12, 15T, 300B): days, and cost with a price"
)
ClusterOption = optional(
    Path,
    "--cluster",
    help="cluster of node pools (YAML/JSON): a non-uniform --plan's GPUs, or an AMP-style search "
    "(one ep / etp per plan, an MoE stage on one pool; cp 1 unless --cp lists more, one on every stage; "
    "schedule 1f1b unless --schedule lists 1f1b, gpipe, zb-h1; dualpipe and interleaved are not searched; "
    "no offload)",
)


# ---- option groups: sets of options several commands declare together ------------------------
@dataclass(frozen=True)
class SearchBatch:
    """The sequence and batch of ``search`` and ``sweep``: a fixed global batch, or the largest
    multiple of dp·micro_batch up to --max-global-batch."""

    seq_length: SeqLengthOption = 2048
    global_batch: GlobalBatchOption = None
    max_global_batch: MaxGlobalBatchOption = None


@dataclass(frozen=True)
class SearchAxes:
    """The search-space restrictions ``search`` and ``sweep`` share (None = unrestricted)."""

    tp: TpOption = None
    pp: PpOption = None
    cp: CpOption = None
    micro_batch: MicroBatchOption = None
    recompute: RecomputeOption = None
    zero: ZeroOption = None
    schedule: ScheduleOption = None

    def restrictions(self, **moe: Optional[str]) -> dict:
        """SearchProblem axis restrictions (app.search_restrictions), with ``moe`` the MoE axes'
        (ep, etp, dispatcher) options where the command has them."""
        return search_restrictions(**asdict(self), **moe)


@dataclass(frozen=True)
class SpaceSwitches:
    """The switches of the searched space ``search`` and ``sweep`` share: each narrows (or, for
    --vary-split, widens) what the search varies."""

    no_offload: NoOffloadOption = False
    default_overlap: DefaultOverlapOption = False
    default_placement: DefaultPlacementOption = False
    vary_split: VarySplitOption = False

    def problem_fields(self) -> dict:
        """The SearchProblem fields they set."""
        return {
            "vary_offload": not self.no_offload,
            "vary_overlap": not self.default_overlap,
            "vary_placement": not self.default_placement,
            "vary_split": self.vary_split,
        }


OPTION_GROUPS = (SearchBatch, SearchAxes, SpaceSwitches, GoodputChanges)


def option_groups(command: Callable) -> Callable:
    """A command whose parameters annotated with an option group (OPTION_GROUPS) take the group's
    options in their place: typer reads the signature this gives, which lists each group's fields
    (their ``Annotated`` option declarations and defaults) where the group's parameter stood; the
    command receives one value of the group made of them."""
    hints = get_type_hints(command, include_extras=True)
    groups: dict[str, type] = {}
    params: list[inspect.Parameter] = []
    for param in inspect.signature(command).parameters.values():
        kind = hints.get(param.name, param.annotation)
        if kind not in OPTION_GROUPS:
            params.append(param.replace(annotation=kind))
            continue
        groups[param.name] = kind
        group_hints = get_type_hints(kind, include_extras=True)
        params.extend(
            param.replace(name=f.name, annotation=group_hints[f.name], default=f.default)
            for f in fields(kind)
        )

    @functools.wraps(command)
    def grouped(**given):
        for name, kind in groups.items():
            given[name] = kind(**{f.name: given.pop(f.name) for f in fields(kind)})
        return command(**given)

    grouped.__signature__ = inspect.Signature(params, return_annotation=None)
    grouped.__annotations__ = {p.name: p.annotation for p in params} | {"return": None}
    return grouped


# --set PATH=VALUE of estimate and search (the paths of paraplan sweep --set; cli.estimate_plan.apply_sets)
SetOption = optional(
    list[str],
    "--set",
    help="change one numeric field of the system or model, e.g. accelerator.hbm_capacity=141GiB "
    "or model.layers=48 (the paths of paraplan sweep --set); repeat for more",
)
