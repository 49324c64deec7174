"""``estimate --ops`` counts (step.estimate._op_table; OpCost.count_per_gpu: how many times per micro-batch
this GPU runs the block, the fullest stage's layers): by hand for DeepSeek-V3 and Mixtral 8x7B."""

from __future__ import annotations

from collections import Counter

from paraplan.api import estimate


def _counts(est) -> tuple[dict, set, set]:
    """{block: its rows' count}, the blocks with op rows and those with collective rows."""
    counts = {}
    for op in est.ops:
        counts.setdefault(op.block, set()).add(op.count_per_gpu)
    assert all(len(c) == 1 for c in counts.values()), counts  # one count per block
    return (
        {b: c.pop() for b, c in counts.items()},
        set(Counter(o.block for o in est.ops)),
        {c.block for c in est.comms},
    )


def test_deepseek_v3_rows_count_the_fullest_stage():
    """61 layers over pp 16: the fullest stage holds ceil(61/16) = 4 layers, so moe_layer runs 4 times; the 3
    dense first layers min(4, 3) = 3 times; the MTP module (1) and embedding / LM head once. The routed
    experts are one block per MoE layer with no rows of their own (their time is in moe_layer's ops), so no
    row counts them, and none under-counts them."""
    est = estimate(
        "deepseek-v3",
        "dgx-h800",
        gpus=2048,
        tp=1,
        pp=16,
        ep=64,
        global_batch=8192,
        seq_length=4096,
        recompute="full",
        with_ops=True,
    )
    counts, op_blocks, comm_blocks = _counts(est)
    assert counts == {"embedding": 1, "dense_layer": 3, "moe_layer": 4, "mtp": 1, "lm_head": 1}
    assert "experts" not in op_blocks | comm_blocks


def test_mixtral_has_no_rows_of_a_kind_no_stage_runs():
    """32 MoE layers over pp 4: moe_layer runs 32 / 4 = 8 times on a stage; Mixtral has no dense layer, so
    the dense_layer kind (count 0) has no rows, neither ops nor collectives."""
    est = estimate(
        "mixtral-8x7b",
        "dgx-h100-80gb",
        gpus=64,
        tp=2,
        pp=4,
        ep=8,
        global_batch=256,
        seq_length=4096,
        sequence_parallel=True,
        with_ops=True,
    )
    counts, op_blocks, comm_blocks = _counts(est)
    assert counts == {"embedding": 1, "moe_layer": 8, "lm_head": 1}
    assert "dense_layer" not in op_blocks | comm_blocks
