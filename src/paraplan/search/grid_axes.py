"""The grid of a row (level 3 of the canonical space, search/space.py): the schedule, state and offload options a
row's candidates take, which depend on pp, the micro-batch count and the data × context size only; and the batch
options (micro_batches) that set the micro-batch count.

``GridAxes`` is a part of ``SearchProblem`` (its base class): its methods read the problem's fields and memoise in
``SearchProblem._memo``.
"""

from __future__ import annotations

import itertools
from functools import cached_property
from typing import get_args

from paraplan.search import launch
from paraplan.search.divisors import divisors as _divisors
from paraplan.search.options import (
    BatchOption,
    LayerSplit,
    OffloadOption,
    ScheduleOption,
    StateOption,
)
from paraplan.specs.moe_model import moe_shaped
from paraplan.specs.plan import Schedule
from paraplan.specs.rules import interleave_split_rule, even_share
from paraplan.specs.rules_offload import offload_rule
from paraplan.specs.rules_schedule import DEFAULT_SCHEDULE, SCHEDULE_RULES
from paraplan.specs.rules_stack import (
    dp_reduce_fallback,
    engine_dp_overlap_rule,
    engine_schedule_rule,
    engine_zero_rule,
)
from paraplan.specs.split import (
    SplitGroup,
    accounted_units,
    chunk_units,
    default_first_last,
    grouped_split,
    stage_layer_counts,
)
from paraplan.step import schedules

SCHEDULES: tuple[str, ...] = get_args(Schedule)
# searched by default for the models DeepSeek-V3-class training uses them on (experts, MLA, MTP);
# other models with --schedules naming them
SPLIT_BACKWARD_SCHEDULES = schedules.SPLIT_BACKWARD_SCHEDULES
# the schedules' entries in the order the options list them: the default first, the chunked (interleaved) last
_OPTION_ORDER = sorted(
    SCHEDULE_RULES.values(), key=lambda r: (r.name != DEFAULT_SCHEDULE, r.chunked)
)
# the splits Megatron-LM's two accounting switches give, the default first
SPLITS = (
    LayerSplit(False, False),
    LayerSplit(True, False),
    LayerSplit(False, True),
    LayerSplit(True, True),
)


class GridAxes:
    """The grid options of ``SearchProblem`` (level 3 of the space) and its batch options."""

    def micro_batches(self, dp: int) -> list[BatchOption]:
        """(micro_batch, global_batch) pairs for this dp: divisors of global_batch/dp, or with
        --max-global-batch every micro-batch up to max/dp that is a power of two or divides it,
        with the batch rounded down to a multiple of dp·micro_batch (Calculon's rule)."""
        if self.global_batch is not None:
            # the micro-batches specs.rules.batch_rule allows: the divisors of the samples per replica
            options = _divisors(even_share(self.global_batch, dp))
            pairs = [BatchOption(mb, self.global_batch) for mb in options]
        else:
            top = self.max_global_batch // dp
            if top < 1:
                return []
            options = sorted(
                set(_divisors(top)) | {2**k for k in range(top.bit_length()) if 2**k <= top}
            )
            pairs = [
                BatchOption(mb, (self.max_global_batch // (dp * mb)) * dp * mb) for mb in options
            ]
        if self.micro_batch is not None:
            pairs = [p for p in pairs if p.micro_batch in self.micro_batch]
        return pairs

    def schedule_options(self, pp: int, microbatches: int) -> tuple[ScheduleOption, ...]:
        """(vpp, schedule, split): 1f1b; with pp > 1 also gpipe, zb-h1 and dualpipe (where allowed), each with
        every split of split_options, and interleaved with every vpp > 1 a split allows
        (specs.plan.interleave_split_rule, _interleave_options); each schedule's micro-batch counts (its
        specs.rules_schedule entry's batch_rule: a multiple of pp interleaved, DualPipe's even counts); those the stack's pipeline engine runs (specs.rules_stack.engine_schedule_rule,
        the estimator's rule). A split is (embedding_as_layer, loss_as_layer). Memoised: the block bounds ask for
        every block."""
        memo = self._memo.setdefault("schedule_options", {})
        if (pp, microbatches) not in memo:
            memo[(pp, microbatches)] = tuple(self._schedule_options(pp, microbatches))
        return memo[(pp, microbatches)]

    def schedule_splits(self, pp: int, microbatches: int) -> tuple[LayerSplit, ...]:
        """The distinct splits of schedule_options(pp, microbatches), in their order (the block bounds' least over
        the splits a block's candidates use). Memoised."""
        memo = self._memo.setdefault("schedule_splits", {})
        if (pp, microbatches) not in memo:
            memo[(pp, microbatches)] = tuple(
                dict.fromkeys(option.split for option in self.schedule_options(pp, microbatches))
            )
        return memo[(pp, microbatches)]

    def _schedule_options(self, pp: int, microbatches: int) -> list[ScheduleOption]:
        allowed = searched_schedules(self.schedules, self.model, self.framework)
        splits = self.split_options(pp)
        out: list[ScheduleOption] = []
        for entry in _OPTION_ORDER:  # without pipeline stages the default schedule alone
            if entry.name not in allowed or (pp == 1 and entry.name != DEFAULT_SCHEDULE):
                continue
            if entry.batch_rule(pp, microbatches):
                continue
            if entry.chunked:
                out += self._interleave_options(pp)
            else:
                out += [ScheduleOption(1, entry.name, split) for split in splits]
        if pp == 1:
            return out
        engine = self.system.accelerator.efficiency.runtime.pipeline_engine
        return [
            o
            for o in out
            if not engine_schedule_rule(engine, o.schedule, o.vpp, pp)
            and self._stages_allowed(pp, o)
        ]

    def _stages_allowed(self, pp: int, option: ScheduleOption) -> bool:
        """Can the framework's launcher state this option's stages (launch.stages_allowed)? Memoised."""
        if not launch.restricted(self.framework):
            return True
        memo = self._memo.setdefault("stages_allowed", {})
        key = (pp, option.vpp, option.split)
        if key not in memo:
            stages = stage_layer_counts(self.split_groups(pp, option.split))
            units = self.split_units(option.split)
            memo[key] = launch.stages_allowed(self.framework, stages, option.vpp, units)
        return memo[key]

    def split_options(self, pp: int) -> tuple[LayerSplit, ...]:
        """The layer splits (embedding_as_layer, loss_as_layer) the non-interleaved schedules are searched with:
        the default split; with ``vary_split`` and pp > 1 also the splits Megatron-LM's accounting switches give
        (account_for_embedding_in_pipeline_split, account_for_loss_in_pipeline_split: the embedding counts as one
        layer, the loss and each MTP module as one more; specs.split.default_first_last), the first of those with
        equal stage layer counts kept. Memoised."""
        memo = self._memo.setdefault("split_options", {})
        if pp not in memo:
            out, seen = [], set()
            for split in SPLITS if self.vary_split and pp > 1 else SPLITS[:1]:
                layout = self._split_layout(pp, split)
                if layout is None or layout in seen:
                    continue
                seen.add(layout)
                out.append(split)
            memo[pp] = tuple(out)
        return memo[pp]

    def _interleave_options(self, pp: int) -> list[ScheduleOption]:
        """Interleaved options of pp stages (they depend on pp alone; computed once per pp): every vpp > 1 the default
        split allows, then those only the accounted split (embedding and loss counted as layers) allows; with
        ``vary_split``, every (vpp, split) of split_options and the accounted split with distinct stage layer counts."""
        memo = self._memo.setdefault("interleave", {})
        if pp in memo:
            return memo[pp]
        out, seen = [], set()
        splits = dict.fromkeys(self.split_options(pp) + (SPLITS[-1],))
        for split in splits:
            layout = self._split_layout(pp, split)
            if layout is None:
                continue
            groups = self.split_groups(pp, split)
            embedding, loss = self.split_units(split)
            top = max(int(chunk_units(g, embedding, loss)) for g in groups if int(g.count) > 0)
            for v in _divisors(top):
                key = (v, layout) if self.vary_split else v
                if (
                    v > 1
                    and key not in seen
                    and not interleave_split_rule(groups, v, embedding, loss)
                ):
                    seen.add(key)
                    out.append(ScheduleOption(v, "interleaved", split))
        memo[pp] = out
        return out

    def _split_layout(self, pp: int, split: LayerSplit) -> tuple | None:
        """The split's stage groups as (index, stages, layers) triples (splits equal on it lay the layers out alike), or
        None when it leaves a stage a negative layer count."""
        groups = self.split_groups(pp, split)
        if any(int(g.count) > 0 and int(g.layers) < 0 for g in groups):
            return None
        return tuple((int(g.index), int(g.count), int(g.layers)) for g in groups)

    def split_units(self, split: LayerSplit) -> tuple[int, int]:
        """(embedding units, loss units) a split (embedding_as_layer, loss_as_layer) counts (specs.split.accounted_units)."""
        embedding_as_layer, loss_as_layer = split
        return accounted_units(int(embedding_as_layer), int(loss_as_layer), self.model.mtp_layers)

    def split_groups(self, pp: int, split: LayerSplit) -> tuple[SplitGroup, ...]:
        """The split of the layers over pp stages with the embedding and the loss counted as layers or not (split:
        (embedding_as_layer, loss_as_layer); specs.plan.PlanSpec.split's rule). Memoised."""
        memo = self._memo.setdefault("split", {})
        if (pp, split) not in memo:
            first, last = default_first_last(self.model.layers, pp, *self.split_units(split))
            memo[(pp, split)] = grouped_split(self.model.layers, pp, first, last)
        return memo[(pp, split)]

    def state_options(self, dp_size: int, pp: int = 1) -> list[StateOption]:
        """(zero, overlap_dp_grad_reduce, overlap_param_gather) options for a data × context group at
        pipeline depth ``pp``, those the stack's pipeline runtime takes at that depth (specs.rules_stack.engine_zero_rule,
        engine_dp_overlap_rule: the estimator's rules) and the framework launches (search.launch.state_allowed). Memoised: the grid
        index asks for every (pp, m, dp·cp) of its rows. Where the stack's fallback at a ZeRO stage depends
        on the optimizer offload (``offload_fallback``) the stated options are kept beside the ones run on
        the GPU, and ``refused`` drops their candidates the estimate refuses."""
        engine = self.system.accelerator.efficiency.runtime.pipeline_engine
        if dp_size == 1:  # no reduction to overlap: the switch as the pipeline runtime takes it
            refused = engine_dp_overlap_rule(engine, True, pp, self._fallback(0))
            return [StateOption(0, not refused, True)]
        memo = self._memo.setdefault("state_options", {})
        if (dp_size, pp) not in memo:
            tp = max(self.gpus // (pp * dp_size), 1)  # DeepSpeed's (cp = 1) tensor-parallel size
            fp8_primary = self.dtype == "fp8" and not self.runtime.fp8_weight_copies
            # where DeepSpeedEngine reduces after the backward, the overlap it runs: false
            stated = self._state_options(dp_size)
            ran = [
                o._replace(overlap_dp_grad_reduce=False) if self._fallback(o.zero) else o
                for o in stated
            ]
            offloaded = (
                self.offload_fallback
            )  # the stated ones too, taken with the optimizer offloaded
            memo[(dp_size, pp)] = tuple(
                o
                for o in dict.fromkeys(ran + stated if offloaded else ran)
                if not engine_zero_rule(engine, o.zero, pp)
                and not engine_dp_overlap_rule(
                    engine, o.overlap_dp_grad_reduce, pp, self._fallback(o.zero, offloaded)
                )
                and launch.state_allowed(
                    self.framework,
                    o.zero,
                    o.overlap_dp_grad_reduce,
                    o.overlap_param_gather,
                    pp,
                    tp,
                    fp8_primary,
                )
            )
        return list(memo[(dp_size, pp)])

    def _fallback(self, zero, offload_optimizer=False):
        """specs.rules_stack.dp_reduce_fallback of the system's stack at ZeRO stage ``zero`` and optimizer
        offload ``offload_optimizer`` (numbers or arrays over candidates)."""
        stack = self.system.accelerator.efficiency.runtime
        facts = (self.dtype, self.runtime.grad_dtype, offload_optimizer)
        return dp_reduce_fallback(stack, stack.pipeline_engine, zero, *facts)

    @cached_property
    def offload_fallback(self) -> bool:
        """Whether the stack's fallback depends on the optimizer offload among the offload options: the
        BF16_Optimizer at zero 1 runs on the GPU only (specs.rules_stack.runs_bf16_optimizer; with the
        optimizer offloaded DeepSpeed runs its ZeRO-1 optimizer, whose hooks may overlap)."""
        if not any(o.optimizer for o in self.offload_options):
            return False
        return bool(self._fallback(1)) != bool(self._fallback(1, True))

    def refused(self, zero, overlap_dp_grad_reduce, offload_optimizer):
        """Which candidates (arrays of their zero, overlap_dp_grad_reduce and offload_optimizer) state an
        overlap the stack does not run with their optimizer offload (engine_dp_overlap_rule's fallback,
        dp_reduce_fallback): the stated options ``state_options`` keeps where ``offload_fallback``, on the
        GPU. None where no candidate can be (no such options)."""
        if not self.offload_fallback:
            return None
        return overlap_dp_grad_reduce & self._fallback(zero, offload_optimizer)

    def _state_options(self, dp_size: int) -> list[StateOption]:
        """state_options at any depth."""
        zeros = self.zero if self.zero is not None else (0, 1, 2, 3)
        _, dp_default, gather_default = self.default_overlaps
        reduce_ov = (
            [dp_default, not dp_default] if self.vary_overlap else [dp_default]
        )  # defaults first: ties
        gather_ov = [gather_default, not gather_default] if self.vary_overlap else [gather_default]
        out = []
        for z in zeros:
            if (
                z == 3
            ):  # ZeRO-3 gathers and reduces per micro-batch, overlapped layer by layer: switches unused
                out.append(StateOption(3, True, True))
                continue
            gathers = gather_ov if z >= 1 else [True]
            out += [StateOption(z, d, g) for d in reduce_ov for g in gathers]
        return out

    @cached_property
    def offload_options(self) -> list[OffloadOption]:
        """(weights, activations, optimizer) offload switches (``offload_switches`` on the system)."""
        return offload_switches(self.vary_offload, self.framework, [self.system])


def searched_schedules(schedules: tuple[str, ...] | None, model, framework: str | None) -> tuple:
    """The schedules a search lists: ``schedules`` (``--schedule``; None: every one, SCHEDULES, less the
    split-backward ones, SPLIT_BACKWARD_SCHEDULES, for a model not shaped like the DeepSeek-V3-class models
    that run them, specs.moe_model.moe_shaped), those the framework's launcher runs
    (search.launch.schedule_allowed). The uniform search's and the per-stage searches' (search.staged.axes)."""
    allowed = schedules or SCHEDULES
    if schedules is None and not moe_shaped(model):
        allowed = tuple(a for a in allowed if a not in SPLIT_BACKWARD_SCHEDULES)
    return tuple(a for a in allowed if launch.schedule_allowed(framework, a))


def offload_switches(vary: bool, framework: str | None, systems) -> list[OffloadOption]:
    """(weights, activations, optimizer) offload switches a search varies: every combination where ``vary``
    (not ``--no-offload``), the framework's launcher offloads (search.launch.offloads_allowed) and each of
    ``systems`` declares its host link and memory (specs.rules_offload.offload_rule); else all off. The
    uniform search's (one system) and the per-stage searches' (the cluster's pools, search.staged.axes)."""
    off = [OffloadOption(False, False, False)]
    if not (vary and launch.offloads_allowed(framework)):
        return off
    for system in systems:
        acc = system.accelerator
        if offload_rule(True, acc.host_bandwidth, acc.host_memory, system.name):
            return off
    return [OffloadOption(*switches) for switches in itertools.product([False, True], repeat=3)]
