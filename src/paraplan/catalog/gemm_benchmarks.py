"""Published GEMM benchmarks: the component data behind the catalog's bf16 GEMM caps (docs/model.md §2, §6).

Each row records how it was timed (``method``):

- ``mamf`` (the file's source): S. Bekman, *Machine Learning Engineering Open Book*,
  compute/accelerator/README.md, "Maximum Achievable Matmul FLOPS comparison table"
  (https://github.com/stas00/ml-engineering, read at commit 744d01e18b79512572f64a6bbd8b5f4a725203a7,
  2026-08-22). MAMF is the best mean TFLOPS of ``torch.mm`` (bf16) or ``torch._scaled_mm`` (fp8 e4m3,
  per-tensor scales) over a sweep of (m, n, k) shapes, no sparsity; each shape is timed kernel by kernel between
  CUDA events after an L2 flush, mean of 100 iterations after 50 warm-up
  (compute/accelerator/benchmarks/mamf-finder.py, ``benchmark_mm``). The timed region is one GEMM kernel on a
  stream the host runs ahead of: launch latency is hidden, the kernel's own fill and tail are included.
- ``wall_clock_loop`` (the row's own ``source``, github.com/zzc0721/torch-performance-test-data test.py): 30
  back-to-back ``torch.mm`` of a square n × n × n after 6 warm-up, timed by the wall clock around the loop (the
  host runs ahead, as in MAMF), best of a few sizes; in fp16 where the part has no bf16 (V100, T4). On parts both
  sources measured it sits 0.7-2.5 % under MAMF (catalog/benchmarks/gemm.yaml).
- ``torchao_bench_matmul`` (the row's own ``source``, pytorch/ao pull request #2427): torchao's
  benchmarks/float8/bench_matmul.py on a B200, a bf16 ``torch.mm`` and an NVFP4 ``torch._scaled_mm`` at the same
  square shape, each the GEMM kernel's GPU time from the profiler. Recorded in pairs (``GEMM_BENCHMARK_FP4``), for
  comparison only: FP4 GEMMs are priced at the FP4 peak x the fp8 cap x the part's fp4_gemm_share (1 on B200), and the pairs
  show what share of its peak an NVFP4 kernel keeps against bf16 in one harness (docs/hardware.md).

How the catalog uses a row (cost.compute.gemm_benchmark_cap): the *kernel cap* is the cap at which
``gemm_time_s`` with zero ramp reproduces the row's TFLOPS at the row's shape (the model's tile/wave and depth
factors and the 4 µs kernel overhead included). A system's catalog ``gemm`` is that kernel cap times the bf16
*in-step share*, one number for every listed system, fitted on the step times of korthikanti2022 and
nemo-llama31-h100 (validate.fitted ``gemm.bf16``): the share of an isolated kernel's rate a framework's GEMMs keep
inside a training step (clocks under a full node's power draw, SMs lent to overlapped collectives, off-best
shapes beyond the tile model). The fp8 rows are recorded for comparison only: the fp8 caps stay fitted to dense
step times (their in-step shares of these rows' kernel caps: 0.640 on H100 in the NeMo Llama 3.1 runs, 0.656 on
B200 and 0.663 on GB200 in mbridge-dense, against 0.870 for bf16; kernel cap x the bf16 share was checked and
predicts the fp8 sets far too fast), see docs/model.md §6.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from paraplan.io.parsed_cache import packaged_yaml

_DATA = (
    Path(__file__).with_name("benchmarks") / "gemm.yaml"
)  # the rows, as data (source and commit in the file)


@dataclass(frozen=True)
class GemmBenchmark:
    """One published best-shape GEMM measurement: the accelerator as the source names it, dtype, TFLOPS, (m, n, k)."""

    accelerator: str
    dtype: str
    tflops: float
    shape: tuple[int, int, int]
    software: str
    note: str = ""
    source: str = ""  # where the row is not from the file's MAMF source
    method: str = "mamf"  # how it was timed: "mamf" or "wall_clock_loop" (module docstring)


FP4Pairs = dict[str, tuple[tuple[GemmBenchmark, GemmBenchmark], ...]]


def _load() -> tuple[str, dict[str, GemmBenchmark], dict[str, GemmBenchmark], FP4Pairs]:
    """(the file's source, system -> its bf16 cap's row, system -> fp8 row, system -> its (nvfp4 row, the same
    harness's bf16 row) pairs) from catalog/benchmarks/gemm.yaml; the bf16 cap's row is in the part's half
    precision (fp16 on Volta, which has no bf16)."""
    data = packaged_yaml(_DATA.read_text())
    rows = {k: GemmBenchmark(**{**v, "shape": tuple(v["shape"])}) for k, v in data["rows"].items()}
    fp4 = {s: tuple((rows[a], rows[b]) for a, b in pairs) for s, pairs in data["fp4"].items()}
    return (
        data["source"],
        {s: rows[r] for s, r in data["bf16"].items()},
        {s: rows[r] for s, r in data["fp8"].items()},
        fp4,
    )


GEMM_BENCHMARK_SOURCE, GEMM_BENCHMARK_BF16, GEMM_BENCHMARK_FP8, GEMM_BENCHMARK_FP4 = _load()
