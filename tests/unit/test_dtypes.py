"""Training datatypes: fp32 (CUDA cores), tf32 (TF32 tensor cores), FP4 (nvfp4, mxfp4) on Blackwell only."""

from __future__ import annotations

import pytest

from paraplan.catalog import load_framework, load_model, load_system
from paraplan.cost import memory as mem
from paraplan.cost.frameworks import apply_framework
from paraplan.specs.errors import InputError
from paraplan.specs.plan import PlanSpec
from paraplan.step.estimate import estimate

H100 = load_system("dgx-h100-80gb")
B200 = load_system("dgx-b200")
GPT = load_model("gpt3-350m")


def _plan(dtype: str, **fields) -> PlanSpec:
    return PlanSpec(gpus=1, micro_batch=4, global_batch=4, seq_length=2048, dtype=dtype, **fields)


def test_fp32_and_tf32_take_their_own_datasheet_peaks():
    acc = H100.accelerator
    assert acc.peak_matrix_flops("fp32") == pytest.approx(66.9e12)
    assert acc.peak_matrix_flops("tf32") == pytest.approx(494.7e12)
    # element-wise work of both runs in fp32 (the fp32 vector rate, not the bf16 one)
    assert acc.peak_vector_flops("tf32") == acc.peak_vector_flops("fp32") == pytest.approx(66.9e12)


def test_tf32_is_faster_than_fp32_and_slower_than_bf16_with_fp32_state():
    times = {d: estimate(GPT, H100, _plan(d)).step_time_s for d in ("fp32", "tf32", "bf16")}
    assert times["bf16"] < times["tf32"] < times["fp32"]
    assert mem.state_bytes_per_param("tf32") == mem.state_bytes_per_param("fp32")
    tf32, bf16 = (estimate(GPT, H100, _plan(d)).stages[0] for d in ("tf32", "bf16"))
    assert (
        tf32.activations_bytes > 1.7 * bf16.activations_bytes
    )  # 4-byte activations (fp32 logits alike)


@pytest.mark.parametrize("dtype", ["nvfp4", "mxfp4"])
def test_fp4_runs_on_blackwell_at_its_peak(dtype):
    acc = B200.accelerator
    assert acc.peak_matrix_flops(dtype) == pytest.approx(2 * acc.peak_matrix_flops("fp8"))
    fp4 = estimate(GPT, B200, _plan(dtype)).step_time_s
    assert fp4 < estimate(GPT, B200, _plan("fp8")).step_time_s


@pytest.mark.parametrize("dtype", ["nvfp4", "mxfp4"])
def test_fp4_elsewhere_is_one_line_naming_the_field(dtype):
    with pytest.raises(InputError) as info:
        estimate(GPT, H100, _plan(dtype))
    message = str(info.value)
    assert "\n" not in message and "dtype" in message and dtype in message


def test_quantised_gemm_inputs_are_smaller_in_fp4():
    fp8, nvfp4, mxfp4 = (estimate(GPT, B200, _plan(d)).stages[0] for d in ("fp8", "nvfp4", "mxfp4"))
    assert mxfp4.activations_bytes < nvfp4.activations_bytes < fp8.activations_bytes


def test_eager_profiles_set_their_optimizer_traffic_and_eager_kernels():
    eager = load_framework("pytorch-eager")
    system, fields = apply_framework(eager, H100, {})
    eff = system.accelerator.efficiency
    # fused AdamW + autocast weight copies (34 B) streamed at the plain HBM rate; the eager factor
    # multiplies the element-wise ops' traffic only (cost.compute.memory_time_s)
    assert eff.hbm == H100.accelerator.efficiency.hbm
    assert eff.eager_traffic_factor == eager.eager_traffic_factor
    assert eff.optimizer_step_bytes == pytest.approx(34)
    assert (
        fields["attention"] == "flash" and system.accelerator.efficiency.attention_kernel == "fa2"
    )

    def optimizer_s(name):
        sys_ = apply_framework(load_framework(name), H100, {})[0]
        return estimate(GPT, sys_, _plan("bf16")).breakdown.optimizer_s

    amp = optimizer_s("pytorch-eager")
    assert optimizer_s("pytorch-eager-bf16") == pytest.approx(amp * 14 / 34)
    assert optimizer_s("hf-transformers") == pytest.approx(amp * 46 / 34)  # + gradient clipping
    assert optimizer_s("pytorch-compile") == pytest.approx(amp)  # fused kernels, same optimizer


@pytest.mark.parametrize("dtype", ["tf32", "nvfp4", "mxfp4"])
def test_exporters_refuse_the_datatypes_they_cannot_state(dtype):
    from paraplan.export import FRAMEWORKS, ExportRefused, export_plan

    plan = _plan(dtype)
    for framework in FRAMEWORKS:
        with pytest.raises(ExportRefused, match=rf"^plan\.dtype='{dtype}'"):
            export_plan(framework, plan, GPT)
