"""The rows of the canonical plan space as arrays, and their candidates' StepInputs.

``RowTable`` enumerates every row of ``space.rows`` (same canonical order) and gathers, per row,
the same facts ``step.build.row_facts`` gives the estimator — from the same cached functions
(``step.build.block_cost_facts``, ``block_memory_facts``, ``gradient_group``, ``pipeline_links``)
— as one ``step.build.RowFacts`` of arrays. Block terms then come from ``step.build.row_blocks`` on
those arrays, and a batch of candidates (rows × grid options) becomes ``StepInputs`` through
``step.build.build_step_inputs``: the estimator's own builder.
"""

from __future__ import annotations

from dataclasses import fields

import numpy as np

from paraplan.search.arrays import stack, take
from paraplan.search.columns import (
    RECOMPUTE_NAMES,
    SCHEDULE_FIELDS,
    feasible_columns,
    grid_arrays,
    plan_columns,
)
from paraplan.search.options import ExpertOption
from paraplan.search.row_enumeration import RowEnumeration
from paraplan.search.shapes import expert_shape_of, layer_shape_of, shape_keys_of
from paraplan.search.space import Row, SearchProblem
from paraplan.specs.moe_model import moe_shaped
from paraplan.specs.split import accounted_units, default_first_last, grouped_split
from paraplan.specs.tp_layout import TP_LAYOUTS
from paraplan.step.build import (
    BlockFacts,
    GridKnobs,
    RowFacts,
    build_step_inputs,
    head_params_with_embedding,
    kind_blocks,
    system_terms,
)
from paraplan.step.compose import BLOCK_TERM_NAMES, StepInputs

# named here too: the search's columns (search.columns) and layer shapes (search.shapes)
__all__ = [
    "SCHEDULE_FIELDS",
    "RowTable",
    "feasible_columns",
    "grid_arrays",
    "layer_shape_of",
    "plan_columns",
    "shape_keys_of",
]
_expert_shape = expert_shape_of  # the name tests know


class RowTable:
    """Every row of the canonical space: columns (degrees, batch, knobs) and one RowFacts of arrays."""

    def __init__(self, problem: SearchProblem, progress=None):
        """``progress(done, total)``, when given, is called as the distinct layer costs are computed
        (the slow part of a large space: ``step.build.block_cost_facts`` per layer shape and spans)."""
        self.problem = problem
        walk = RowEnumeration(problem)
        walk.run(progress)
        costings = walk.costings
        self.placement_names = costings.placement_names
        c = self.columns = {
            k: (np.concatenate(v) if v else np.zeros(0, dtype=np.int64))
            for k, v in walk.columns.items()
        }
        self.size = len(c["tp"])
        self.layer_kinds = _layer_kinds(problem.model)
        self.expert_choices = list(walk.expert_ids)
        if not self.size:
            self.facts = self.blocks = None
            return
        # the rows' units: rows alike in what their blocks read (cost id, memory id, recompute mode,
        # TP overlap switch; the cost id fixes the TP span), ~4x fewer than the rows: the blocks are
        # costed per unit, and rows take theirs by ``unit``
        key = c["cost_id"] * (int(c["memory_id"].max()) + 1) + c["memory_id"]
        key = (key * len(RECOMPUTE_NAMES) + c["recompute"]) * 2 + c["overlap_tp"]
        _, first, unit = np.unique(key, return_index=True, return_inverse=True)
        self.unit = unit.reshape(-1)
        self.blocks = kind_blocks(
            self._block_facts(costings, first),
            c["recompute"][first],
            c["overlap_tp"][first].astype(bool),
            c["tp_domains"][first],
        )
        # what build_step_inputs reads besides the blocks, per row
        self.facts = self.step_facts = self._facts(costings)
        self.constants = system_terms(problem.system, problem.dtype, problem)

    def _block_facts(self, costings, rows: np.ndarray) -> dict[str, BlockFacts]:
        """Per block kind, the BlockFacts of the given rows: their entries of the costings, stacked."""
        c, costs, memories = self.columns, costings.costs, costings.memories
        cid, mid = c["cost_id"][rows], c["memory_id"][rows]
        return {
            kind: BlockFacts.of(
                stack([f[kind] for f in costs], cid), stack([m[kind] for m in memories], mid)
            )
            for kind in costs[0]
        }

    def _facts(self, costings) -> RowFacts:
        """The rows' RowFacts but their blocks: each row's entries of the costings, stacked into arrays."""
        model, c = self.problem.model, self.columns
        head_with_embedding = {
            tp: head_params_with_embedding(model, tp) for tp in set(c["tp"].tolist())
        }
        return RowFacts(
            blocks={},
            head_params_with_embedding=np.array([head_with_embedding[t] for t in c["tp"].tolist()]),
            recompute_code=c["recompute"],
            overlap_tp_comm=c["overlap_tp"].astype(bool),
            tp_domains=c["tp_domains"],
            pipeline=stack(costings.transfers, c["p2p_id"]),
            layers=float(model.layers),
            pp=c["pp"].astype(float),
            microbatches=(c["global_batch"] // (c["dp"] * c["micro_batch"])).astype(float),
            gradient_groups=stack(costings.groups, c["group_id"]),
            model=model,
            mtp_layers=model.mtp_layers,
        )

    def row(self, i: int) -> Row:
        c = self.columns
        return Row(
            int(c["tp"][i]),
            int(c["pp"][i]),
            int(c["cp"][i]),
            int(c["dp"][i]),
            self.placement_names[c["placement"][i]],
            {},
            int(c["micro_batch"][i]),
            int(c["global_batch"][i]),
            bool(c["sp"][i]),
            str(RECOMPUTE_NAMES[c["recompute"][i]]),
            bool(c["overlap_tp"][i]),
            TP_LAYOUTS[int(c["layout"][i])],
            int(c["tp_rows"][i]) or None,
            *ExpertOption(*self.expert_choices[c["expert"][i]]),
        )

    def inputs(self, index: np.ndarray, grid_values: dict[str, np.ndarray]) -> StepInputs:
        """StepInputs of candidates (row ``index[i]``, grid option i): the estimator's builder on arrays."""
        facts = take(self.step_facts, index)
        first, last = default_first_last(
            facts.layers,
            facts.pp,
            *accounted_units(
                grid_values["embedding_as_layer"], grid_values["loss_as_layer"], facts.mtp_layers
            ),
        )
        split = grouped_split(facts.layers, facts.pp, first, last)
        knobs = GridKnobs(**{f.name: grid_values[f.name] for f in fields(GridKnobs)})
        blocks = take(self.blocks, self.unit[index])
        return build_step_inputs(facts, blocks, knobs, split, self.constants)

    def lower_bounds(
        self, v_max: np.ndarray, split_backward: np.ndarray | bool = False
    ) -> np.ndarray:
        """Admissible step-time bound per row, with u the per-layer work of one micro-batch:
        m·(⌈L/p⌉·u + 1 exchange when pp > 1) + (L − ⌈L/p⌉)·u / v_max.

        Whatever the split, some stage holds F >= ⌈L/p⌉ layers, so the slowest stage does at
        least F·u (+ its transfers) per micro-batch and the other stages at least (L − F)·u in
        all; the bound is increasing in F (m >= 1 >= 1/v), so F = ⌈L/p⌉ gives a lower bound. The
        bubble divides the other stages' work by at most v_max, the largest vpp of the row's grid;
        data-parallel sync, optimizer and offload terms are >= 0. For models with several kinds of
        decoder layer (dense and MoE layers) u is the cheaper kind's work; MTP modules add >= 0.
        The split-backward schedules (ZB-H1, DualPipe) shrink the bubble below (L − F)·u / v_max
        (ZB-H1 by (F + B − 2W)/(F + B), DualPipe to (p/2 − 1)·(F&B + B − 3W)): a row whose grid has
        one (``split_backward``) keeps m·F·u only — with the bubble term, 140 of the 296 rows of a
        Mixtral problem had a bound above their best candidate's step."""
        unit = None
        for kind in self.layer_kinds:  # the cheapest kind of decoder layer the model has
            terms = self.blocks[kind].terms
            work = 0.0
            for name in (
                BLOCK_TERM_NAMES
            ):  # the time parts (``wgrad`` is a share of ``backward``, not added)
                work = work + getattr(terms, name)
            unit = work if unit is None else np.minimum(unit, work)
        unit = unit[self.unit] if np.ndim(unit) else unit  # per unit -> per row
        facts = self.facts
        links = (
            facts.pipeline
        )  # every stage of a pipeline exchanges at least once (step.p2p.exchanges)
        p2p = np.where(facts.pp > 1, np.minimum(links.inner_s, links.outer_s), 0.0)
        layers, pp = self.problem.model.layers, self.columns["pp"]
        fullest = -(-layers // pp)
        bubble = np.where(split_backward, 0.0, (layers - fullest) * unit / v_max)
        return facts.microbatches * (fullest * unit + p2p) + bubble


def _layer_kinds(model) -> tuple[str, ...]:
    """The decoder-layer block kinds a model's stages hold (step.build.BLOCK_KINDS names)."""
    if not moe_shaped(model):
        return ("decoder",)
    kinds = ("dense_layer",) if (not model.is_moe or model.dense_layers > 0) else ()
    return kinds + (("moe_layer",) if model.is_moe else ())
