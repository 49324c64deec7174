"""Hand-worked cases of the composition mechanisms of issue 8: DP buckets, shared NICs, ZeRO-3
prefetch, chunked TP overlap, the CP ring. Each number below is computed by hand in the comment."""

from __future__ import annotations

import pytest

from paraplan.cost.comm import LinearCollective
from paraplan.step.compose import (
    BlockCost,
    BlockTerms,
    GradientGroup,
    GridKnobs,
    Stage,
    StepInputs,
    block_terms,
    stage_work,
    tail_terms,
)
from paraplan.step.build import BlockComm, BlockCompute

GB = 1e-9  # seconds per byte at 1 GB/s


def _group(on_nic: bool) -> GradientGroup:
    form = (
        LinearCollective(0.0, 0.0, GB, 0.0, 0.0, 0.0)
        if on_nic
        else LinearCollective(GB, 0.0, 0.0, 0.0, 0.0, 0.0)
    )
    return GradientGroup(2, form, form, form)


def _inputs(
    block: BlockCost,
    count: int,
    zero: int,
    on_nic: bool = True,
    gather_overlap: bool = True,
    m: int = 2,
):
    stage = Stage(0, 1, ((block, count),), 0.0)
    knobs = GridKnobs(
        vpp=1,
        interleaved=False,
        gpipe=False,
        zero=zero,
        overlap_dp_grad_reduce=True,
        overlap_param_gather=gather_overlap,
        offload_weights=False,
        offload_activations=False,
        offload_optimizer=False,
    )
    inp = StepInputs(
        stages=(stage,),
        pp=1,
        microbatches=m,
        gradient_groups={"dense": _group(on_nic)},
        knobs=knobs,
        host_bandwidth=1.0,
        hbm_rate=1e30,
        weight_bytes=2.0,
        param_gather_bytes=2.0,
        gathered_weight_bytes=2.0,
        gathered_outside_bytes=2.0,
        grad_bytes=4.0,
        optimizer_bytes=12.0,
        reserved_bytes=0.0,
    )
    return inp, stage


def _block(params: float, nic_backward: float = 0.0) -> BlockCost:
    terms = BlockTerms(1.0, 2.0, 0.0, 0.0, 0.0, 0.0, 0.0)
    return BlockCost("decoder", terms, params, 0.0, 0.0, 0.0, nic_backward_s=nic_backward)


def test_dp_reduce_by_bucket():
    # 80M params -> 2 buckets of 40M; reduce-scatter 80M·4 B at 1 GB/s = 0.32 s, all-gather 80M·2 B = 0.16 s.
    # grad window 2 s: 0.32/2 + max(0, ½·(0.32 − 2)) = 0.16; gather window 1 s: 0.08 + 0 = 0.08
    inp, stage = _inputs(_block(80e6), 1, zero=1)
    exposed, _, _ = tail_terms(inp, stage, stage_work(stage))
    assert float(exposed) == pytest.approx(0.24)


def test_nic_shared_with_tp_traffic():
    # the block's TP collectives keep the NIC busy 1.9 s of the 2 s backward window: 0.1 s left for
    # the gradients: 0.16 + ½·(0.32 − 0.1) = 0.27, plus the 0.08 of the gather
    inp, stage = _inputs(_block(80e6, nic_backward=1.9), 1, zero=1)
    assert float(tail_terms(inp, stage, stage_work(stage))[0]) == pytest.approx(0.35)
    # gradients reduced inside the NVLink domain do not compete with the NIC
    inp, stage = _inputs(_block(80e6, nic_backward=1.9), 1, zero=1, on_nic=False)
    assert float(tail_terms(inp, stage, stage_work(stage))[0]) == pytest.approx(0.24)


def test_zero3_per_block_gathers_with_prefetch():
    # 4 blocks of 10M: per-block gather 10M·2 B = 0.02 s, reduce-scatter 10M·4 B = 0.04 s.
    # prefetch 1: forward 0.02 + 3·max(0, 0.02 − 1) = 0.02; backward 0.06 + 3·max(0, 0.06 − 2) = 0.06;
    # two micro-batches: 2·0.08 = 0.16. Without prefetch every gather waits: 2·(4·0.02 + 4·0.06) = 0.64
    inp, stage = _inputs(_block(10e6), 4, zero=3)
    assert float(tail_terms(inp, stage, stage_work(stage))[0]) == pytest.approx(0.16)
    inp, stage = _inputs(_block(10e6), 4, zero=3, gather_overlap=False)
    assert float(tail_terms(inp, stage, stage_work(stage))[0]) == pytest.approx(0.64)


def _comm(**kw) -> BlockComm:
    base = dict.fromkeys(BlockComm._fields, 0.0)
    base.update(kw)
    return BlockComm(**base)


def test_chunked_tp_overlap():
    # GEMMs 1 s forward, TP collectives 0.4 s, 4 chunks: 0.4/4 + max(0, ¾·(0.4 − 1)) = 0.1 exposed
    compute = BlockCompute(1.0, 2.0, 0.0, 0.0, 1.0, 2.0)
    comm = _comm(tp_forward=0.4)
    assert float(block_terms(compute, comm, 0, True).tp_forward) == pytest.approx(0.1)
    assert float(block_terms(compute, comm, 0, False).tp_forward) == pytest.approx(0.4)
    # backward collectives 3 s behind 2 s of GEMMs: 0.75 + ¾·(3 − 2) = 1.5
    comm = _comm(tp_backward=3.0)
    assert float(block_terms(compute, comm, 0, True).tp_backward) == pytest.approx(1.5)


def test_cp_ring_exposes_each_step():
    # ring of 4: 3 steps of 0.1 s transfer against 0.2/4 = 0.05 s of attention each:
    # 3·0.05 + sync 0.003 = 0.153 (the old aggregate max(0, 0.3 − 0.2) = 0.1 hid more than a ring can)
    compute = BlockCompute(1.0, 2.0, 0.2, 0.4, 0.0, 0.0)
    comm = _comm(cp_forward=0.3, cp_steps=3.0, cp_sync_forward=0.003)
    assert float(block_terms(compute, comm, 0, False).cp_forward) == pytest.approx(0.153)
