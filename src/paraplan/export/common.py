"""What every framework exporter shares: the kept argument lists, refusals, and plan canonical form.

A plan knob a framework cannot express is refused with one line naming the knob (exit 2), never
dropped. Knobs that have no effect in the plan (the overlap of a ZeRO parameter gather when nothing
is sharded, sequence parallelism at tp = 1, ...) are put in one canonical form by
:func:`canonical_plan`, so that export -> import round trips compare like with like.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Collection, Iterable, Iterator
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from paraplan.io.parsed_cache import packaged_yaml
from paraplan.io.terminal import printable
from paraplan.specs.errors import InputError
from paraplan.specs.parallel import DEFAULT_PLACEMENT_LABEL, DIM_NAMES
from paraplan.specs.plan import PlanSpec

FRAMEWORKS = ("megatron", "nemo", "megatron-bridge", "torchtitan", "deepspeed")
# the package's folder of kept files (frameworks/, facts/), read as files as catalog.expert_loads reads its
# data: importlib.resources' reader imports zipfile (issue 31: a search reads them for its launch targets)
FOLDER = Path(__file__).parent
# The plan fields every exporter maps (each adds its own to its HANDLED set): the degrees, the batch and
# the sequence, recomputation, ZeRO, datatype and attention, the schedule, the optimizer offload, the
# overlap switches and the placement.
COMMON_FIELDS = frozenset(
    "gpus tp pp dp cp vpp micro_batch global_batch seq_length sequence_parallel recompute zero dtype"
    " attention schedule offload_optimizer overlap_dp_grad_reduce overlap_param_gather"
    " overlap_tp_comm placement".split()
)


class ExportRefused(InputError):
    """A plan knob the target framework cannot express."""


@dataclass(frozen=True)
class FrameworkArgs:
    """A framework's argument names as read from its source, with the version they were read from."""

    name: str
    framework: str
    version: str
    commit: str
    source: str
    names: frozenset[str]
    choices: dict[str, list]

    @property
    def label(self) -> str:
        return f"{self.framework} {self.version}"


@lru_cache(maxsize=None)
def framework_args(name: str) -> FrameworkArgs:
    """The kept argument list ``export/frameworks/<name>.yaml``."""
    text = (FOLDER / "frameworks" / f"{name}.yaml").read_text()
    data = packaged_yaml(text)
    names = data.get("flags") or data.get("keys") or []
    return FrameworkArgs(
        name=name,
        framework=data["framework"],
        version=data["version"],
        commit=data["commit"],
        source=" ".join(str(data["source"]).split()),
        names=frozenset(names),
        choices=dict(data.get("choices") or {}),
    )


def refuse(framework: str, knob: str, value: Any, why: str) -> ExportRefused:
    """One line: which plan knob, its value, and why the framework cannot express it."""
    return ExportRefused(f"plan.{knob}={value!r} cannot be expressed in {framework}: {why}")


def effective_order(plan: PlanSpec) -> tuple[str, ...]:
    """The placement order of the groups with more than one member (degree-1 groups place nothing)."""
    return tuple(g for g in plan.placement_order if getattr(plan, g) > 1)


def same_placement(plan: PlanSpec, order: str) -> bool:
    """Does ``plan`` place its groups as the framework order ``order`` ('tp-cp-dp-pp', innermost first)?"""
    want = tuple(g for g in order.split("-") if g in DIM_NAMES and getattr(plan, g) > 1)
    return effective_order(plan) == want


def canonical_plan(plan: PlanSpec) -> dict[str, Any]:
    """The plan's fields with knobs that cannot matter set to their defaults: the schedule made
    explicit (1f1b with one stage), ZeRO 0 when nothing is data-parallel (dp·cp = 1), parameter-gather overlap on when no
    parameters are gathered (zero 0), sequence parallelism and TP overlap off at tp = 1, the CP algorithm
    at cp = 1 and the ZeRO-3 prefetch / live-parameter knobs below ZeRO 3 at their defaults, and the
    default placement when the groups of degree > 1 are placed in the default order, and no cached fp8
    weight copies outside fp8 training."""
    d = plan.model_dump()
    d["schedule"] = (
        plan.pipeline_schedule if plan.pp > 1 else "1f1b"
    )  # one stage: no pipeline schedule
    if plan.dp * plan.cp == 1:
        d["zero"] = 0
        d["overlap_dp_grad_reduce"] = True
    if d["zero"] == 0:
        d["overlap_param_gather"] = True
    if plan.tp == 1:
        d["sequence_parallel"] = False
        d["overlap_tp_comm"] = False
    if plan.cp == 1:  # no context parallelism: no algorithm for it
        d["cp_algorithm"] = PlanSpec.model_fields["cp_algorithm"].default
    if d["zero"] < 3:  # nothing gathered per layer: no prefetch depth, no cap on live parameters
        for name in (
            "zero3_prefetch_layers",
            "zero3_backward_prefetch_layers",
            "zero3_max_live_params",
            "zero3_gather_unit",
            "zero3_reduce_unit",
            "zero3_regather_recompute",
        ):
            d[name] = PlanSpec.model_fields[name].default
    if same_placement(plan, DEFAULT_PLACEMENT_LABEL):
        d["placement"] = DEFAULT_PLACEMENT_LABEL
    if plan.dtype != "fp8":  # cached fp8 weight copies exist in fp8 training only (cost.memory)
        d["fp8_weight_copies"] = PlanSpec.model_fields["fp8_weight_copies"].default
    return d


def check_handled(plan: PlanSpec, handled: Collection[str], framework: str) -> dict[str, Any]:
    """Refuse any plan field this exporter does not map when it differs from its default, so that
    fields added to the plan later are refused rather than silently dropped; the canonical plan."""
    canon = canonical_plan(plan)
    for name, field in PlanSpec.model_fields.items():
        if name in handled:
            continue
        default = field.default
        if canon.get(name) != default:
            raise refuse(framework, name, canon.get(name), "paraplan has no mapping for this knob")
    return canon


# Training datatypes no exporter maps yet: tf32 (a PyTorch backend switch, no launcher argument in the
# kept argument lists) and the FP4 recipes (nvfp4, mxfp4; not in the kept Megatron-LM, NeMo,
# torchtitan or DeepSpeed argument lists).
UNMAPPED_DTYPES = ("tf32", "nvfp4", "mxfp4")


def exportable(plan: PlanSpec, name: str, handled: Collection[str]) -> tuple[str, dict[str, Any]]:
    """(the framework's label, the canonical plan) of a plan whose every changed field the exporter
    of framework ``name`` maps (``handled``; check_handled refuses the others) and whose dtype it
    can state (UNMAPPED_DTYPES are refused)."""
    label = framework_args(name).label
    if plan.dtype in UNMAPPED_DTYPES:
        raise refuse(label, "dtype", plan.dtype, "no argument of this framework selects it")
    return label, check_handled(plan, handled, label)


def check_names(args: FrameworkArgs, used: list[str]) -> None:
    """Every exported name must be in the framework's kept argument list (a bug otherwise)."""
    unknown = [n for n in used if n not in args.names]
    if unknown:
        raise AssertionError(
            f"{args.label}: exported names not in the kept argument list: {unknown}"
        )


def nodes_and_gpus_per_node(gpus: int, gpus_per_node: int) -> tuple[int, int]:
    """(nodes, processes per node) of a launcher: whole nodes, or one partial node below a node."""
    if gpus <= gpus_per_node:
        return 1, gpus
    if gpus % gpus_per_node:
        raise ExportRefused(
            f"plan.gpus={gpus} is not a whole number of {gpus_per_node}-GPU nodes; give --gpus-per-node"
        )
    return gpus // gpus_per_node, gpus_per_node


def header_lines(header: str, *lines: str) -> list[str]:
    """The comment lines an export starts with: ``# header`` when one is given, then ``lines``. The
    header holds user text (the plan file's path, the model's name): it is made one printable line
    (io.terminal.printable), so a newline in a file name cannot end the comment and start a command."""
    return ([f"# {printable(header)}"] if header else []) + list(lines)


def require(found: Collection[str], needed: Iterable[str], where: str) -> None:
    """Refuse an import that lacks a key the plan is rebuilt from (``where``: the framework and the
    prefix of its keys, e.g. ``"nemo: recipe."``)."""
    for key in needed:
        if key not in found:
            raise ExportRefused(f"{where}{key} is missing; paraplan needs it to rebuild the plan")


def override_lines(text: str, prefix: str) -> Iterator[tuple[str, tuple[str, str] | None]]:
    """(code line, (path, value text) of a ``<prefix>.<path> = <value>`` line or None) for each line of
    a Python override file (NeMo's recipe, Megatron-Bridge's ConfigContainer) that holds code: comments,
    blank lines and imports are skipped; the caller reads or refuses a line of another form."""
    pattern = re.compile(rf"^{re.escape(prefix)}\.([A-Za-z0-9_.]+)\s*=\s*(.+)$")
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line or line.startswith(("from ", "import ")):
            continue
        m = pattern.match(line)
        yield line, (m.group(1), m.group(2).strip()) if m else None


def read_override_file(text: str, name: str, prefix: str, own_form=None) -> dict[str, object]:
    """{path: value} of the ``<prefix>.<path> = <value>`` lines of a Python override file that the
    exporter ``name`` writes (NeMo's recipe, Megatron-Bridge's ConfigContainer): each path in its kept
    list (framework_args) and each value read by override_value. ``own_form(line, assigned, values)``
    reads a line of the exporter's own form (a callback line, a config call) into ``values`` and says
    whether it took it; any other line is refused, naming the form expected."""
    fw, values = framework_args(name), {}
    for line, assigned in override_lines(text, prefix):
        if own_form is not None and own_form(line, assigned, values):
            continue
        if assigned is None:
            raise ExportRefused(
                f"{name}: cannot read line {line!r}; expected {prefix}.<path> = <value>"
            )
        key, value = assigned
        values[key] = override_value(fw, f"{name}: {prefix}.", key, value)
    return values


def override_value(fw: FrameworkArgs, where: str, key: str, value: str) -> object:
    """The value of an override line ``<where><key> = <value>``: a key in the kept list ``fw``, the
    attention backend enum member's name (``AttnBackend.flash`` -> 'flash'), else a Python literal;
    refused naming the key otherwise."""
    if key not in fw.names:
        raise ExportRefused(f"{where}{key} is not a known {fw.label} field")
    if value.startswith("AttnBackend."):
        return value.split(".", 1)[1]
    try:
        return ast.literal_eval(value)
    except (ValueError, SyntaxError):
        raise ExportRefused(f"{where}{key} = {value!r} is not a literal") from None
