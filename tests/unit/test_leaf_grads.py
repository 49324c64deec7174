"""Autograd work on leaf tensors in measured fwd+bwd rows, left out of a step's kernels (cost.leaf_grads)."""

from __future__ import annotations

import shutil
from importlib import resources
from pathlib import Path

import pytest

from paraplan.catalog import load_framework, load_system
from paraplan.cost import kernel_tables as kt
from paraplan.cost import table_attention
from paraplan.cost.compute import attention_time_s, op_times_s
from paraplan.cost.frameworks import framework_system
from paraplan.cost.leaf_grads import (
    accumulation_bytes,
    attention_leaf_bytes,
    sliced_halves_bytes,
)
from paraplan.graph.ops import Op
from paraplan.specs.errors import InputError
from paraplan.specs.fields import with_fields

H100 = "h100-sxm5-80gb"


def _attached(ref: str):
    system = load_system("dgx-h100-80gb")
    return with_fields(system, {"accelerator.kernel_tables": ref})


def test_the_byte_counts_by_hand():
    # x.grad += dx over 10 bf16 elements: read 2 x 20 B, write 20 B
    assert accumulation_bytes(10) == 60
    assert accumulation_bytes(10, 4) == 120
    # q, k, v of 16 x 32 x 1024 x 128 = 67,108,864 elements each: 3 x 6 B x 67,108,864
    assert attention_leaf_bytes(16, 32, 1024, 128) == 3 * 6 * 67_108_864
    # two halves of n: fills 2 x 2n, copies 2 x 2n (read + write n), sum of halves 3 x 2n = 14n elements
    assert sliced_halves_bytes(1000) == 14 * 2 * 1000
    acc = load_system("dgx-h100-80gb").accelerator
    assert acc.hbm_rate() == pytest.approx(3.35e12 * 0.85)


def test_swiglu_backward_leaves_out_the_leaf_and_its_halves_slice_backwards():
    acc = framework_system(load_framework("pytorch-eager-bf16"), _attached(H100)).accelerator
    op = Op("mlp_activation", "memory", 0.0, 1e8, 0.0, 2e8, kernel=("swiglu", 4096.0, 8192.0))
    fwd, bwd = op_times_s(op, acc, "bf16")
    # kernels.csv: swiglu_fwd 4096x8192 195.5416 us, swiglu_fwd_bwd 1000.8160 us; the leaf u is 4096 x 16384
    n = 4096 * 8192
    rate = 3.35e12 * 0.85
    leaf = (6 * 2 * n + 28 * n) / rate
    assert fwd == pytest.approx(195.5416e-6)
    assert bwd == pytest.approx(1000.8160e-6 - 195.5416e-6 - leaf)
    assert bwd < 1000.8160e-6 - 195.5416e-6 - 6 * 2 * n / rate  # less than the leaf alone left


def _table_with_leaf_gradients(tmp_path: Path, kinds: str) -> Path:
    src = Path(str(resources.files("paraplan.catalog") / "kernels" / H100))
    dst = tmp_path / "h100-leaf"
    shutil.copytree(src, dst)
    text = (dst / "table.yaml").read_text()
    (dst / "table.yaml").write_text(
        text.replace("files:\n", f"leaf_gradients: [{kinds}]\nfiles:\n")
    )
    return dst


def test_attention_bwd_rows_of_a_listed_file_are_read_less_q_k_v_accumulation(tmp_path):
    folder = _table_with_leaf_gradients(tmp_path, "attention_cudnn")
    acc = _attached(str(folder)).accelerator
    assert acc.efficiency.attention_kernel == "cudnn"
    # attention_cudnn.csv: 8 x 32 x 2048 x 128 causal, fwd 507.0893 us, bwd 2093.5560 us (measured shape)
    leaf = 3 * 6 * 8 * 32 * 2048 * 128 / (3.35e12 * 0.85)
    call = (2048, 2048, 128, True)
    for direction, row_s, less in (("fwd", 507.0893e-6, 0.0), ("bwd", 2093.5560e-6, leaf)):
        work = kt.attention_work(8, 32, 2048, 128, True, direction)
        t = attention_time_s(work, 1.0, acc, "bf16", call, direction)
        assert t == pytest.approx(row_s - less, rel=1e-9), direction
    # the shipped table does not list its files: rows as measured
    plain = _attached(H100).accelerator
    work = kt.attention_work(8, 32, 2048, 128, True, "bwd")
    assert attention_time_s(work, 1.0, plain, "bf16", call, "bwd") == pytest.approx(2093.5560e-6)
    kt.clear_caches()


def test_a_row_shorter_than_its_accumulation_is_refused_naming_it(tmp_path):
    folder = _table_with_leaf_gradients(tmp_path, "attention_cudnn")
    lines = (folder / "attention_cudnn.csv").read_text().splitlines()
    lines[2] = lines[2].rsplit(",", 1)[0] + ",1.0"  # the 1024 bwd row at 1 us
    (folder / "attention_cudnn.csv").write_text("\n".join(lines) + "\n")
    table = kt.load_table(str(folder))
    with pytest.raises(InputError, match="attention_cudnn.csv row 2.*leaf_gradients"):
        table_attention.row_kernel_s(table, "attention_cudnn", 3.35e12 * 0.85)
    kt.clear_caches()
