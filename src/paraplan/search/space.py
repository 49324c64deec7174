"""The space of plans a search covers, in a canonical order shared by every search path.

A candidate is (tp, cp, dp, pp, placement) × (micro_batch, sequence_parallel, recompute,
overlap_tp_comm) × (vpp/schedule/split, zero, overlap_dp_grad_reduce, overlap_param_gather, offloads).
The first two levels form a *row*: everything that sets the per-layer costs. The last level is
the row's *grid*: knobs that only enter the step composition and the memory sum, evaluated for
many candidates at once.

Canonical form: a knob that cannot change anything for a row takes one value (sequence
parallelism only with tp > 1; ZeRO stages and DP-overlap switches only with data × context > 1;
the parameter-gather switch only with ZeRO >= 1; gpipe and interleaving only with pp > 1; offload
only on systems with host memory), and placement orders that give every group the same network
span are one candidate (the first order in our list, the Megatron-LM default first). Layers are
split by the default rule (specs/split.py); counting the embedding and the loss as layers is
tried only where it is the only way to interleave with some vpp (Llama 3.1 405B's 126 layers), unless
``vary_split`` asks for every split Megatron-LM's two accounting switches give (``split_options``).
Every plan rule comes from specs/rules.py.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from functools import cached_property, lru_cache

from paraplan.cost.comm import GroupSpan
from paraplan.search import launch
from paraplan.search.divisors import divisors as _divisors
from paraplan.search.expert_axes import expert_axes_violations, expert_degrees, expert_switches
from paraplan.search.grid_axes import SCHEDULES, SPLIT_BACKWARD_SCHEDULES, GridAxes
from paraplan.search.options import (
    NO_EXPERT_OPTION,
    ExpertOption,
    Factorization,
    LayerKnob,
    Row,
    grid,
    grid_option,
    grid_parts,
    plan_of,
)
from paraplan.search.options import rows as _rows
from paraplan.specs.errors import InputError, Violation
from paraplan.specs.model import ModelSpec
from paraplan.specs.parallel import DEFAULT_PLACEMENT, DIM_NAMES, ParallelDims, placement_label
from paraplan.specs.plan import RuntimeFields
from paraplan.specs.rules import (
    cp_rule,
    grid_rules,
    layout_model_rule,
    local_sequence_rule,
    pp_rule,
    sequence_parallel_rule,
    tp_rules,
    tp_rules_text,
    ulysses_rule,
)
from paraplan.specs.rules_moe import expert_degree_rules, moe_sequence_parallel_rule
from paraplan.specs.rules_precision import accelerator_rules
from paraplan.specs.rules_stack import stack_gpus_rule, stack_parallelism_rules
from paraplan.specs.system import SystemSpec
from paraplan.specs.tp_layout import TP_LAYOUTS
from paraplan.step.plan_spans import default_order_key, placed_domains, plan_spans

# the rows, grids and plans of the space (search.options) and the grid's schedules (search.grid_axes), named here too
__all__ = [
    "SCHEDULES",
    "SPLIT_BACKWARD_SCHEDULES",
    "Row",
    "SearchProblem",
    "grid",
    "grid_option",
    "grid_parts",
    "plan_of",
    "rows",
]

# the objectives each evaluated plan is scored by on its own (search.result.objective_value); robust
# (search.robust) and the time-to-train ones (search.time_to_train) rank the ranked plans only
PLAN_OBJECTIVES = ("time", "cost", "mfu")
OBJECTIVES = (*PLAN_OBJECTIVES, "robust")  # robust: search.robust


# every placement order, the default first
PLACEMENT_ORDERS = (
    DEFAULT_PLACEMENT,
    *(p for p in itertools.permutations(DEFAULT_PLACEMENT) if p != DEFAULT_PLACEMENT),
)


@lru_cache(maxsize=4096)
def distinct_orders(
    clipped: tuple[int, int, int, int], system: SystemSpec, vary: bool, default_key=None
) -> tuple[tuple[str, ...], ...]:
    """The placement orders with distinct spans, the first order of each (``vary`` False: the default order alone),
    for degrees (tp, cp, dp, pp: DIM_NAMES' order) whose min(degree, D) are ``clipped``, D the system's GPUs per
    NVLink domain. Which orders span alike depends on those alone, so they are costed on the clipped degrees: the
    orders of one factorization share every group's size, so they differ only in members per domain, which
    cost.comm._span_of reads from min(size, D) and from the strides below D (a stride is a product of degrees, below D
    exactly when the product of their clipped values is, and then equal to it); the expert span reads no order.
    Orders equal without their degree-1 dimensions change no stride and are not costed. ``default_key``: the default
    order's key where its tp and cp groups straddle (step.plan_spans.default_order_key), None elsewhere."""
    sizes = dict(zip(DIM_NAMES, clipped))
    seen, tried, out = set(), set(), []
    for order in PLACEMENT_ORDERS if vary else PLACEMENT_ORDERS[:1]:
        effective = tuple(name for name in order if sizes[name] > 1)
        if effective in tried:
            continue
        tried.add(effective)
        key = placed_domains(ParallelDims(**sizes, placement_order=order), system)
        key = default_key if default_key is not None and order == DEFAULT_PLACEMENT else key
        if key not in seen:
            seen.add(key)
            out.append(order)
    return tuple(out)


@dataclass(frozen=True)
class SearchProblem(GridAxes):
    """What to search: a model on a cluster at a batch and sequence length, and which axes to vary."""

    model: ModelSpec
    system: SystemSpec
    gpus: int
    seq_length: int
    global_batch: int | None = None
    max_global_batch: int | None = None
    dtype: str = "bf16"
    attention: str = "flash"
    objective: str = "time"
    # axis restrictions: None = every value the model and cluster allow
    tp: tuple[int, ...] | None = None
    pp: tuple[int, ...] | None = None
    cp: tuple[int, ...] | None = None
    micro_batch: tuple[int, ...] | None = None
    recompute: tuple[str, ...] | None = None
    zero: tuple[int, ...] | None = None
    sequence_parallel: tuple[bool, ...] | None = None
    schedules: tuple[str, ...] | None = None
    # mixture-of-experts axes (models with experts only): None = every value the rules allow
    ep: tuple[int, ...] | None = None
    etp: tuple[int, ...] | None = None
    dispatchers: tuple[str, ...] | None = None
    capacity_factor: float | None = None  # fixed for the search (null = dropless)
    moe_balance: str = "learned"  # fixed for the search
    expert_load_cv: float | None = None  # fixed for the search (null: the published figure)
    vary_offload: bool = True
    vary_overlap: bool = True
    vary_placement: bool = True
    # every layer split of split_options for every schedule (the first and last stages' layer counts); False: the
    # default split, and the accounted one only where interleaving needs it
    vary_split: bool = False
    price_per_gpu_hour: float | None = None
    # tensor-parallel layouts to try (specs/tp_layout.py); 1D only unless asked: the 2D grids multiply the rows
    tp_layouts: tuple[str, ...] = ("1d",)
    # the framework profile the system was adapted to (frameworks.framework_system): its name for the
    # error band, and its (overlap_tp_comm, overlap_dp_grad_reduce, overlap_param_gather) defaults,
    # the values the overlap switches take when they are not varied
    framework: str | None = None
    default_overlaps: tuple[bool, bool, bool] = (False, True, True)
    # the run-wide implementation knobs every candidate states (specs.plan.RuntimeFields, a plan's own), from
    # the profile when one is given (cost.frameworks.framework_search_fields)
    runtime: RuntimeFields = RuntimeFields()

    def check(self) -> None:
        """Raise InputError (one line: field, value, what is allowed) for an unusable problem."""
        from paraplan.specs.rules import uniform_model_violations  # the estimator's own model rule

        if broken := uniform_model_violations(self.model):
            raise InputError.from_violations(broken)
        if precision := accelerator_rules(self.system.accelerator, self.dtype, self.attention):
            raise InputError.from_violations([Violation(*rule) for rule in precision])
        if unlaunchable := launch.problem_violations(self.framework, self):
            raise InputError.from_violations([Violation(*v) for v in unlaunchable])
        if not isinstance(self.gpus, int) or self.gpus <= 0:
            raise InputError(f"gpus: {self.gpus!r} is not allowed; must be a positive integer")
        if self.seq_length <= 0:
            raise InputError(
                f"seq_length: {self.seq_length!r} is not allowed; must be a positive integer"
            )
        bad = [t for t in self.tp_layouts if t not in TP_LAYOUTS]
        if bad or not self.tp_layouts:
            raise InputError(
                f"tp_layout: {','.join(bad) or 'none'!r} is not allowed; allowed: {', '.join(TP_LAYOUTS)}"
            )
        if (self.global_batch is None) == (self.max_global_batch is None):
            raise InputError(
                "global_batch: give exactly one of --global-batch or --max-global-batch"
            )
        if self.objective not in OBJECTIVES:
            raise InputError(
                f"objective: {self.objective!r} is not allowed; allowed: {', '.join(OBJECTIVES)}"
            )
        batch = self.global_batch if self.global_batch is not None else self.max_global_batch
        field_name = "global_batch" if self.global_batch is not None else "max_global_batch"
        if batch <= 0:
            raise InputError(f"{field_name}: {batch!r} is not allowed; must be a positive integer")
        if rule := stack_gpus_rule(self.stack_runs, self.gpus):
            raise InputError(f"gpus: {self.gpus} is not allowed; {rule}")
        factorizations = self.factorizations
        if not factorizations:
            restricted = [
                f"--{n} {','.join(map(str, v))}"
                for n, v in (("tp", self.tp), ("pp", self.pp), ("cp", self.cp))
                if v
            ]
            within = f" within {' '.join(restricted)}" if restricted else ""
            raise InputError(
                f"gpus: {self.gpus} cannot be split as tp·pp·cp·dp for {self.model.name}{within} "
                f"({tp_rules_text(self.model, self.tp or ())}; pp <= layers={self.model.layers})"
            )
        self._check_expert_axes(factorizations)
        min_dp = min(f.dp for f in factorizations)
        if batch < min_dp:
            raise InputError(
                f"{field_name}: {batch} is smaller than the minimum data-parallel degree {min_dp} "
                f"for {self.gpus} GPUs; allowed: >= {min_dp}"
            )
        if not any(self.micro_batches(f.dp) for f in factorizations):
            degrees = sorted({f.dp for f in factorizations})
            raise InputError(
                f"{field_name}: {batch} is not a multiple of any possible data-parallel degree for {self.gpus} GPUs "
                f"(dp in {degrees[:12]}{' ...' if len(degrees) > 12 else ''})"
                + (f" with micro-batch in {list(self.micro_batch)}" if self.micro_batch else "")
            )

    # ---- level 1: degrees and placement -------------------------------------------------------
    @cached_property
    def factorizations(self) -> list[Factorization]:
        """Every (tp, cp, dp, pp) with tp·cp·dp·pp = gpus that the model's shape allows (pp need not
        divide the layers: uneven splits follow step.schedules.layers_on_stage) and the stack's training loop
        runs (specs.rules_stack.stack_parallelism_rules, the estimator's rule), in the canonical order: tp
        outermost, then pp, then cp, each ascending (not the fields' order)."""
        m = self.model
        out = []
        for tp in _divisors(self.gpus):
            if self.tp is not None and tp not in self.tp:
                continue
            if tp_rules(m, tp) and not ("2d" in self.tp_layouts and self.grids(tp)):
                continue
            for pp in _divisors(self.gpus // tp):
                if pp_rule(m, pp) or (self.pp is not None and pp not in self.pp):
                    continue
                for cp in _divisors(self.gpus // (tp * pp)):
                    if self.cp is not None and cp not in self.cp:
                        continue
                    if cp_rule(self.seq_length, cp):
                        continue
                    if ulysses_rule(m, tp, cp, self.runtime.cp_algorithm):
                        continue
                    if not launch.degrees_allowed(self.framework, tp, cp, self.seq_length):
                        continue
                    dp = self.gpus // (tp * pp * cp)
                    degrees = Factorization(tp, cp, dp, pp)
                    if stack_parallelism_rules(self.stack_runs, ParallelDims(*degrees)):
                        continue
                    out.append(degrees)
        return out

    def placements(
        self, tp: int, cp: int, dp: int, pp: int
    ) -> list[tuple[str, dict[str, GroupSpan]]]:
        """Placement orders with distinct network spans for these degrees (first order wins; distinct_orders), with
        the spans of each (the default order's from ``_orders``)."""
        orders, spans = self._orders(tp, cp, dp, pp)
        return [
            (
                placement_label(order),
                dict(spans)
                if order == DEFAULT_PLACEMENT
                else plan_spans(ParallelDims(tp, cp, dp, pp, placement_order=order), self.system),
            )
            for order in orders
        ]

    def placement_count(self, tp: int, cp: int, dp: int, pp: int) -> int:
        """len(placements(tp, cp, dp, pp)), without costing the spans."""
        return len(self._orders(tp, cp, dp, pp)[0])

    def _orders(self, tp: int, cp: int, dp: int, pp: int) -> tuple[tuple, dict[str, GroupSpan]]:
        """(distinct_orders, default-order plan_spans), memoised: search.run._by_blocks asks too."""
        memo, key = self._memo.setdefault("orders", {}), (tp, cp, dp, pp)
        if key not in memo:
            clipped = tuple(min(n, self.system.node.gpus_per_domain) for n in key)
            vary = launch.placement_varied(self.framework, self.vary_placement)
            spans = plan_spans(default := ParallelDims(tp, cp, dp, pp), self.system)
            straddled = default_order_key(default, self.system, spans)
            memo[key] = distinct_orders(clipped, self.system, vary, straddled), spans
        return memo[key]

    # ---- level 2: knobs that set per-layer costs ----------------------------------------------
    def grids(self, tp: int) -> list[int]:
        """Rows r of the valid 2D grids r × tp/r for this tp (specs.tp_layout rules that involve only the
        model and the sequence: the others are the search's own canonical choices)."""
        if layout_model_rule(self.model, "2d"):
            return []
        return [r for r in _divisors(tp) if not grid_rules(self.model, tp, r, self.seq_length, 1)]

    def layouts(self, tp: int, cp: int) -> list[tuple[str, int | None]]:
        """(tp_layout, tp_rows) options for these degrees: 1d where tp_rules allow it, every valid 2D grid
        (whose seq_length/cp the rows divide), 2d-seq with cp > 1; in TP_LAYOUTS order."""
        out: list[tuple[str, int | None]] = []
        one_d_ok = tp == 1 or not tp_rules(self.model, tp)
        if "1d" in self.tp_layouts and one_d_ok:
            out.append(("1d", None))
        if "2d" in self.tp_layouts and tp >= 4:
            out += [
                ("2d", r)
                for r in self.grids(tp)
                if not local_sequence_rule(self.seq_length, cp, r, "tp_rows")
            ]
        if "2d-seq" in self.tp_layouts and cp > 1 and one_d_ok:
            out.append(("2d-seq", None))
        return [
            (layout, rows)
            for layout, rows in out
            if not ulysses_rule(self.model, tp, cp, self.runtime.cp_algorithm, layout)
            and launch.layout_allowed(self.framework, layout)
        ]

    def layer_knobs(self, tp: int, cp: int) -> tuple[LayerKnob, ...]:
        """(sequence_parallel, recompute, overlap_tp_comm, tp_layout, tp_rows) options for these degrees;
        a 2D grid takes neither sequence parallelism nor TP comm-GEMM overlap (specs.tp_layout). Memoised."""
        memo = self._memo.setdefault("layer_knobs", {})
        if (tp, cp) not in memo:
            memo[(tp, cp)] = self._layer_knobs(tp, cp)
        return memo[(tp, cp)]

    @property
    def stack_runs(self) -> tuple[str, ...]:
        """The parallel kinds the stack's training loop runs (efficiency.runtime.parallelism)."""
        return self.system.accelerator.efficiency.runtime.parallelism

    def _layer_knobs(self, tp: int, cp: int) -> tuple[LayerKnob, ...]:
        """layer_knobs, computed."""
        sp_options = [False] if tp == 1 else [False, True]
        if self.sequence_parallel is not None:
            sp_options = [s for s in sp_options if s in self.sequence_parallel] or (
                [False] if tp == 1 else []
            )
        if tp > 1 and sequence_parallel_rule(self.seq_length, cp, tp):
            sp_options = [s for s in sp_options if not s]
        sp_options = [
            s
            for s in sp_options
            if not moe_sequence_parallel_rule(self.model, tp, s)
            and launch.sequence_parallel_allowed(self.framework, tp, s)
        ]
        recompute = launch.searched_modes(self.framework, self.model, cp, self.recompute)
        default = self.default_overlaps[0]
        overlap = (
            [default, not default]
            if (tp > 1 and self.vary_overlap)
            else [default if tp > 1 else False]
        )
        out = []
        for layout, rows in self.layouts(tp, cp):
            if layout == "2d":
                out += [LayerKnob(False, rc, False, layout, rows) for rc in recompute]
            else:
                out += [
                    LayerKnob(sp, rc, ov, layout, rows)
                    for sp in sp_options
                    for rc in recompute
                    for ov in overlap
                    if launch.tp_overlap_allowed(self.framework, sp, ov)
                    and not stack_parallelism_rules(self.stack_runs, ParallelDims(tp, cp), sp, ov)
                ]
        return tuple(out)

    def _check_expert_axes(self, factorizations) -> None:
        """The expert axes (--ep, --etp, --dispatcher) name values some plan can take, and the router's expert spread
        (--expert-load-cv) is one the model's router can have (search.expert_axes.expert_axes_violations, the
        per-stage searches' check too); then some factorization takes an expert layout of them."""
        axes = (self.ep, self.etp, self.dispatchers, self.capacity_factor, self.expert_load_cv)
        if refused := expert_axes_violations(self.model, *axes):
            raise InputError.from_violations([Violation(*v) for v in refused])
        if not self.model.is_moe or any(
            self.expert_options(f.tp, f.cp, f.dp) for f in factorizations
        ):
            return
        tp, cp, dp, _ = factorizations[0]
        ep, etp = (self.ep or (1,))[0], (self.etp or (1,))[0]
        rules = expert_degree_rules(self.model, ParallelDims(tp, cp, dp, ep=ep, etp=etp))
        why = rules[0][2] if rules else "no plan has it"  # specs.rules.Rule: (field, value, rule)
        raise InputError(
            f"ep: {list(self.ep or ())} / etp: {list(self.etp or ())} / dispatcher: "
            f"{list(self.dispatchers or ())} leave no expert layout for {self.model.name} on {self.gpus} GPUs "
            f"(e.g. ep {ep}, etp {etp}: {why})"
        )

    def expert_options(self, tp: int, cp: int, dp: int) -> list[ExpertOption]:
        """(ep, etp, moe_dispatcher, moe_a2a_overlap) options of a mixture-of-experts model for these
        degrees (specs.moe_plan rules); (1, 1, "alltoall", False) for other models. ep ranges over the
        divisors of the experts, etp over 1 and tp (Megatron-Core's two settings: experts not split, or
        split like the dense layers), the dispatchers over all three; overlap of dispatch/combine only
        where there is one (ep·etp > 1)."""
        if not self.model.is_moe:
            return [NO_EXPERT_OPTION]
        return [
            ExpertOption(ep, etp, d, ov)
            for ep, etp in self._expert_degrees(tp, cp, dp)
            for d, ov in self.expert_switches(ep, etp)
            if launch.experts_allowed(self.framework, tp, cp, dp, ep, etp, d)
        ]

    def expert_option_count(self, tp: int, cp: int, dp: int) -> int:
        """len(expert_options(tp, cp, dp)), without building the options (the block list counts 288 of them on
        DeepSeek-V3)."""
        if not self.model.is_moe:
            return 1
        if launch.experts_unrestricted(self.framework):
            return sum(
                len(self.expert_switches(*pair)) for pair in self._expert_degrees(tp, cp, dp)
            )
        return sum(
            1
            for ep, etp in self._expert_degrees(tp, cp, dp)
            for d, _ in self.expert_switches(ep, etp)
            if launch.experts_allowed(self.framework, tp, cp, dp, ep, etp, d)
        )

    def _expert_degrees(self, tp: int, cp: int, dp: int) -> list[tuple[int, int]]:
        """The (ep, etp) pairs of expert_options, in its order (search.expert_axes.expert_degrees)."""
        dims = (ParallelDims(tp, cp, dp),)
        return expert_degrees(self.model, dims, self.ep, self.etp, (self.stack_runs,))

    def expert_switches(self, ep: int, etp: int) -> tuple[tuple[str, bool], ...]:
        """(moe_dispatcher, moe_a2a_overlap) options of an (ep, etp) (search.expert_axes.expert_switches).
        Memoised."""
        memo = self._memo.setdefault("expert_switches", {})
        if (ep, etp) not in memo:
            memo[(ep, etp)] = expert_switches(
                self.framework, self.dispatchers, self.capacity_factor, self.vary_overlap, ep, etp
            )
        return memo[(ep, etp)]

    @cached_property
    def _memo(self) -> dict:
        """Per-problem caches of options that depend on a few degrees only."""
        return {}


rows = _rows  # the rows of the canonical space (search.options.rows)


def rows_per_micro_batch(problem: SearchProblem, tp: int, cp: int, dp: int, pp: int) -> int:
    """Rows of one factorization at one micro-batch: placements × layer knobs × expert options (space.rows)."""
    return (
        problem.placement_count(tp, cp, dp, pp)
        * len(problem.layer_knobs(tp, cp))
        * problem.expert_option_count(tp, cp, dp)
    )
