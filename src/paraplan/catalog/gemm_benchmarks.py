"""Published GEMM benchmarks: the component data behind the catalog's bf16 GEMM caps (docs/model.md §2, §6).

Source: S. Bekman, *Machine Learning Engineering Open Book*, compute/accelerator/README.md, "Maximum Achievable
Matmul FLOPS comparison table" (https://github.com/stas00/ml-engineering, read at commit
744d01e18b79512572f64a6bbd8b5f4a725203a7, 2026-08-22). MAMF is the best mean TFLOPS of ``torch.mm`` (bf16) or
``torch._scaled_mm`` (fp8 e4m3, per-tensor scales) over a sweep of (m, n, k) shapes, no sparsity; each shape is
timed kernel by kernel between CUDA events after an L2 flush, mean of 100 iterations after 50 warm-up
(compute/accelerator/benchmarks/mamf-finder.py, ``benchmark_mm``). The timed region is one GEMM kernel on a
stream the host runs ahead of: launch latency is hidden, the kernel's own fill and tail are included.

How the catalog uses a row (cost.compute.gemm_benchmark_cap): the *kernel cap* is the cap at which
``gemm_time_s`` with zero ramp reproduces the row's TFLOPS at the row's shape (the model's tile/wave and depth
factors and the 4 µs kernel overhead included). A system's catalog ``gemm`` is that kernel cap times the bf16
*in-step share*, one number for every listed system, fitted on the step times of korthikanti2022 and
nemo-llama31-h100 (validate.fitted ``gemm.bf16``): the share of an isolated kernel's rate a framework's GEMMs keep
inside a training step (clocks under a full node's power draw, SMs lent to overlapped collectives, off-best
shapes beyond the tile model). The fp8 rows are recorded for comparison only: the fp8 caps stay fitted to step
times (their in-step shares differ by GPU: ~0.69 on H100 in the NeMo Llama 3.1 runs, ~0.39 on B200 in moe-visible),
see docs/model.md §6.
"""

from __future__ import annotations

from dataclasses import dataclass

MAMF_SOURCE = (
    "S. Bekman, ML Engineering Open Book, compute/accelerator/README.md 'Maximum Achievable Matmul FLOPS comparison "
    "table' (github.com/stas00/ml-engineering @ 744d01e18b79512572f64a6bbd8b5f4a725203a7)"
)


@dataclass(frozen=True)
class GemmBenchmark:
    """One published best-shape GEMM measurement: the accelerator as the source names it, dtype, TFLOPS, (m, n, k)."""

    accelerator: str
    dtype: str
    tflops: float
    shape: tuple[int, int, int]
    software: str
    note: str = ""


_A100 = GemmBenchmark("NVIDIA A100 SXM", "bf16", 271.2, (1024, 10240, 5120), "torch 2.6.0+cu126")
_H100 = GemmBenchmark("NVIDIA H100 SXM", "bf16", 794.5, (2048, 2048, 13312), "torch 2.7.0+cu126",
                      "the source: 'H200 is the same'; H800 SXM has the H100 SXM compute datasheet")
_B200 = GemmBenchmark("NVIDIA B200 SXM", "bf16", 1745.0, (1792, 16128, 3072), "torch 2.7.1+cu128")
_GB200 = GemmBenchmark("NVIDIA GB200 SXM", "bf16", 1822.0, (4096, 9728, 2048), "torch 2.10.0.dev20250916+cu130")
_B300 = GemmBenchmark("NVIDIA B300 SXM", "bf16", 1769.0, (12288, 18432, 1024), "torch 2.9.1+cu130")
_MI300X = GemmBenchmark("AMD MI300X", "bf16", 668.4, (10240, 15360, 8192), "torch 2.5.1+rocm 6.3.42131",
                        "PYTORCH_TUNABLEOP_ENABLED=1")

# catalog system -> its bf16 row (the systems whose ``gemm`` is kernel cap x in-step share)
MAMF_BF16: dict[str, GemmBenchmark] = {
    "dgx-a100-80gb": _A100,
    "dgx-a100-40gb": _A100,
    "dgx-h100-80gb": _H100,
    "dgx-h200": _H100,
    "dgx-h800": _H100,
    "dgx-b200": _B200,
    "gb200-nvl72": _GB200,
    "dgx-b300": _B300,
    "mi300x-8": _MI300X,
}

# fp8 (float8_e4m3fn) rows, for comparison with the fitted fp8 caps; not used by the model
MAMF_FP8: dict[str, GemmBenchmark] = {
    "dgx-h100-80gb": GemmBenchmark("NVIDIA H100 SXM", "fp8", 1402.6, (1024, 9216, 14336), "torch 2.7.0+cu126"),
    "dgx-h200": GemmBenchmark("NVIDIA H200 SXM", "fp8", 1453.4, (1280, 4096, 12032), "torch 2.7.1+cu128"),
    "dgx-b200": GemmBenchmark("NVIDIA B200 SXM", "fp8", 3432.5, (15360, 4096, 3072), "torch 2.7.1+cu128"),
    "gb200-nvl72": GemmBenchmark("NVIDIA GB200 SXM", "fp8", 3615.6, (19456, 5120, 1536), "torch 2.10.0.dev20250916+cu130"),
    "dgx-b300": GemmBenchmark("NVIDIA B300 SXM", "fp8", 3353.3, (3072, 6144, 7168), "torch 2.9.1+cu130"),
}


def kernel_cap(system_name: str, dtype: str = "bf16") -> float:
    """The system's kernel cap from its MAMF row: cost.compute.gemm_benchmark_cap at the row's TFLOPS and shape."""
    from paraplan.catalog import load_system
    from paraplan.cost.compute import gemm_benchmark_cap

    row = (MAMF_FP8 if dtype == "fp8" else MAMF_BF16)[system_name]
    return gemm_benchmark_cap(row.tflops, row.shape, load_system(system_name).accelerator, row.dtype)
