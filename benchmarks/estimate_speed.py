"""Time of one in-process estimate (target: under 10 ms), cold (caches cleared) and warm.

Run: python benchmarks/estimate_speed.py
"""

from __future__ import annotations

import time

from paraplan.step.build import COLD_CACHES
from paraplan.catalog import load_model, load_system
from paraplan.step.estimate import estimate
from paraplan.specs.plan import PlanSpec

CASES = [
    (
        "gpt3-175b tp8 pp8 vpp3 (Korthikanti Tab. 5)",
        "gpt3-175b",
        "dgx-a100-80gb",
        dict(
            gpus=64,
            tp=8,
            pp=8,
            vpp=3,
            global_batch=64,
            seq_length=2048,
            sequence_parallel=True,
            recompute="selective",
        ),
    ),
    (
        "llama3-70b tp4 pp4 cp2 vpp5 (NeMo)",
        "llama3-70b",
        "dgx-h100-80gb",
        dict(
            gpus=512,
            tp=4,
            pp=4,
            cp=2,
            vpp=5,
            global_batch=1024,
            seq_length=8192,
            sequence_parallel=True,
            zero=1,
        ),
    ),
    (
        "llama3-405b tp8 pp2 cp2 on 16,128 GPUs",
        "llama3-405b",
        "dgx-h100-80gb",
        dict(
            gpus=16128,
            tp=8,
            pp=2,
            cp=2,
            global_batch=2016,
            seq_length=8192,
            sequence_parallel=True,
            zero=1,
        ),
    ),
]
CACHES = COLD_CACHES


def main() -> None:
    print(f"{'case':48s} {'cold ms':>9s} {'warm ms':>9s} {'with ops ms':>12s}")
    for label, model_name, system_name, fields in CASES:
        model, system, plan = load_model(model_name), load_system(system_name), PlanSpec(**fields)
        cold = []
        for _ in range(20):
            for cache in CACHES:
                cache.cache_clear()
            from paraplan.graph import transformer

            transformer.decoder_layer_1d.cache_clear()
            transformer.embedding_block.cache_clear()
            transformer.lm_head_block.cache_clear()
            start = time.perf_counter()
            estimate(model, system, plan)
            cold.append(time.perf_counter() - start)
        warm_n = 200
        start = time.perf_counter()
        for _ in range(warm_n):
            estimate(model, system, plan)
        warm = (time.perf_counter() - start) / warm_n
        start = time.perf_counter()
        for _ in range(20):
            estimate(model, system, plan, with_ops=True)
        ops = (time.perf_counter() - start) / 20
        print(f"{label:48s} {min(cold) * 1e3:9.2f} {warm * 1e3:9.2f} {ops * 1e3:12.2f}")


if __name__ == "__main__":
    main()
