"""The cuDNN SDPA attention tables of GB200 and GB300 (issue 32, "Tables to ship")."""

from __future__ import annotations

import pytest

from paraplan.catalog import load_system
from paraplan.cost import kernel_tables as kt
from paraplan.cost import table_attention
from paraplan.cost.attention import window_tile_factor
from paraplan.cost.compute import attention_time_s
from paraplan.graph.mla import window_fraction
from paraplan.specs.fields import with_fields

GB200, GB300 = "gb200-cudnn-sdpa", "gb300-cudnn-sdpa"

# rows copied by hand from NVIDIA/cudnn-frontend benchmark/sdpa_benchmark_training/results/llama3.1
# (commit fb682ce): (table, source line, attn_mask, seq, pass, time_ms, tflops); batch 2, 64 / 8 heads, d 128
SOURCE_ROWS = [
    (GB200, 2, "top_left", 32768, "fwd", 21.692, 1622.0),
    (GB200, 3, "top_left", 32768, "bwd", 71.756, 1226.0),
    (GB200, 42, "no_mask", 8192, "bwd", 7.831, 1404.0),
    (GB200, 74, "top_left", 2048, "fwd", 0.125, 1097.0),
    (GB300, 38, "top_left", 8192, "fwd", 1.185, 1856.0),
    (GB300, 39, "top_left", 8192, "bwd", 3.832, 1435.0),
    (GB300, 23, "no_mask", 16384, "fwd", 8.734, 2014.0),
]


def _rows(ref: str, source: str = "llama3.1/") -> dict[int, dict[str, str]]:
    return {
        int(r["source_row"].rsplit(":", 1)[1]): r
        for r in kt.load_table(ref).rows["attention_cudnn"]
        if r["source_row"].startswith(source)
    }


@pytest.mark.parametrize("row", SOURCE_ROWS)
def test_the_table_reproduces_its_source_rows(row):
    ref, line, mask, seq, direction, ms, tflops = row
    got = _rows(ref)[line]
    assert (got["batch"], got["heads"], got["kv_heads"], got["head_dim"]) == ("2", "64", "8", "128")
    assert int(got["seq_len"]) == seq and got["direction"] == direction and got["dtype"] == "bf16"
    assert got["causal"] == ("1" if mask == "top_left" else "0")
    assert float(got["time_us"]) == pytest.approx(ms * 1000, rel=1e-9)
    # the benchmark's FLOP count is the table's: 4·b·h·s²·d forward, 2.5x backward, causal (s+1)/2s
    work = kt.attention_work(2, 64, seq, 128, mask == "top_left", direction)
    assert work / (ms * 1e-3) / 1e12 == pytest.approx(tflops, rel=5e-3)


@pytest.mark.parametrize("ref", [GB200, GB300])
def test_every_row_has_provenance_and_the_benchmarks_flop_count(ref):
    table = kt.load_table(ref)
    rows = table.rows["attention_cudnn"]
    models = [r["source_row"].split("/", 1)[0] for r in rows]
    counts = {m: models.count(m) for m in dict.fromkeys(models)}
    assert counts == {"llama3.1": 20, "gpt_oss": 10, "qwen35": 5, "wan22": 10, "ltx2": 10}
    assert "fb682ce761a2705e40f9b5d528737a3e0eb33cec" in table.provenance["source"]
    for r in (r for r in rows if not r["window"]):
        b, h, s, d = (float(r[k]) for k in ("batch", "heads", "seq_len", "head_dim"))
        work = kt.attention_work(b, h, s, d, r["causal"] == "1", r["direction"])
        # 3-decimal ms in the source (0.5 us of rounding: 0.5 % at 0.1 ms, 0.9 % at qwen35's 0.053 ms)
        us = float(r["time_us"])
        assert work / (us * 1e-6) / 1e12 == pytest.approx(float(r["tflops"]), rel=1e-3 + 0.5 / us)


def test_the_tables_are_listed_for_their_accelerators_and_opt_in():
    # opt-in on both parts: gb200-nvl72 with its table gets worse (mbridge-dense-gb200 3.57 -> 7.67 %,
    # mbridge-gb200-more 4.74 -> 6.43 %); gb300-nvl72 with its table alone gets better (mbridge-gb300
    # 6.59 -> 5.76 %) but prices GB300 attention 1.37x the GB200's where the same benchmark measures
    # 1.10x (test_power_bound_rate.test_gb300_attention_gain_matches_the_cudnn_benchmark)
    # (the Azure cuBLASLt GEMM tables, nd-*, are listed after them: validate.tables.with_tables attaches the first)
    assert kt.tables_measured_on("B200-GB200-186GB") == [GB200, "nd-gb200-v6-cublaslt"]
    assert kt.tables_measured_on("B300-GB300-288GB") == [GB300, "nd-gb300-v6-cublaslt"]
    assert load_system("gb200-nvl72").accelerator.kernel_tables is None
    assert load_system("gb300-nvl72").accelerator.kernel_tables is None


def _t(ref, seq, causal, direction, dtype="bf16"):
    work = kt.attention_work(2, 64, seq, 128, causal, direction)
    call = (seq, seq, 128, causal)
    return table_attention.attention_time_s(ref, None, "cudnn", work, call, direction, dtype)


def test_inside_the_table_the_ratio_to_the_shape_factor_is_linear_in_log_sequence():
    # cuDNN shape factor (cost.attention: s_half 134, causal s/(s + 128)), head dim 128, causal:
    # f(8192) = 8192/8326 · 8192/8320 = 0.968769, f(16384) = 0.984199, f(12288) = 0.979015.
    # GB200 causal forward: 8192 at 1574.30 TFLOP/s (1.397 ms), 16384 at 1708.08 (5.150 ms): ratios
    # 1574.30/0.968769 = 1625.05 and 1708.08/0.984199 = 1735.51; 12288 = 2^13.585:
    # 0.979015 · 2^(log2 1625.05 + 0.585 (log2 1735.51 - log2 1625.05)) = 1653.34 TFLOP/s
    # on 4.9857e15 FLOPs (4·2·64·12288²·128 × 12289/24576) = 2.99285 ms
    assert _t(GB200, 12288, True, "fwd") == pytest.approx(2.99285e-3, rel=1e-4)
    assert _t(GB200, 8192, True, "fwd") == pytest.approx(1.397e-3, rel=1e-9)


def test_outside_the_table_the_edge_ratio_is_kept_and_the_shape_factor_follows():
    # 65536 past the 32768 edge: 21.692 ms × 4 × causal-share ratio (65537/131072)/(32769/65536)
    # × f(32768)/f(65536) = 0.992052/0.996014 (the ratio measured / shape factor held at the edge)
    assert _t(GB200, 65536, True, "fwd") == pytest.approx(86.4215e-3, rel=1e-5)
    # 1024 below the 2048 edge, no mask: 0.611 ms / 4 × f(2048)/f(1024) = 2048/2182 / (1024/1158)
    assert _t(GB200, 1024, False, "bwd") == pytest.approx(0.611e-3 / 4 * 1.061412, rel=1e-6)


def test_fp8_recipes_read_the_bf16_rows_and_the_system_prices_the_table():
    assert _t(GB300, 8192, True, "fwd", "fp8") == pytest.approx(1.185e-3, rel=1e-9)
    acc = with_fields(load_system("gb300-nvl72"), {"accelerator.kernel_tables": GB300}).accelerator
    flops = kt.attention_flops(2, 64, 8192, 128, "bwd")
    share = kt.causal_share(8192, True)
    got = attention_time_s(flops, share, acc, "bf16", (8192, 8192, 128, True), "bwd")
    assert got == pytest.approx(3.832e-3, rel=1e-9)


def test_docs_report_the_catalog_analytical_form_against_the_table():
    from paraplan.validate.tables import _analytical, shipped_table_residuals

    table = kt.load_table(GB200)
    rows = kt.attention_rows(table.rows["attention_cudnn"], GB200, "attention_cudnn.csv")
    acc = load_system("gb200-nvl72").accelerator
    got = dict(zip([(r.point, r.group) for r in rows], _analytical(acc, rows)))
    # 8192 causal forward: 4·2·64·8192²·128 × 8193/16384 = 2.19929e12 FLOPs at 2.5 PFLOPS × 0.45,
    # shape factor 1 at head dim 128, + 4 us overhead = 1.95893 ms (measured 1.397 ms)
    assert got[((8192.0,), (128, True, "fwd", None))] == pytest.approx(1.958926e-3, rel=1e-6)
    system, residuals = shipped_table_residuals()[GB200]
    assert system == "gb200-nvl72"
    whats = [r.what for r in residuals]
    assert "fused attention (cudnn), catalog analytical form" in whats


# windowed rows copied by hand from results/gpt_oss (same commit): (table, line, seq, pass, time_ms, tflops);
# batch 2, 128 query / 128 K/V heads, head dim 64, causal top_left, sliding window 128
WINDOW_ROWS = [
    (GB200, 29, 4096, "fwd", 0.210, 161.0),
    (GB200, 30, 4096, "bwd", 0.465, 182.0),
    (GB200, 20, 8192, "fwd", 0.414, 165.0),
    (GB300, 21, 8192, "bwd", 0.862, 198.0),
]


@pytest.mark.parametrize("row", WINDOW_ROWS)
def test_the_windowed_rows_reproduce_their_source_and_its_flop_count(row):
    ref, line, seq, direction, ms, tflops = row
    got = _rows(ref, "gpt_oss/")[line]
    assert (got["heads"], got["kv_heads"], got["head_dim"], got["window"]) == (
        "128",
        "128",
        "64",
        "128",
    )
    assert int(got["seq_len"]) == seq and got["direction"] == direction and got["causal"] == "1"
    assert float(got["time_us"]) == pytest.approx(ms * 1000, rel=1e-9)
    # the benchmark counts the scores the window keeps: 4·b·h·d·(w·s − w(w−1)/2) forward, 2.5x backward
    fwd = 4.0 * 2 * 128 * 64 * (128 * seq - 128 * 127 / 2)
    work = fwd if direction == "fwd" else 2.5 * fwd
    assert work / (ms * 1e-3) / 1e12 == pytest.approx(tflops, rel=6e-3)
    parsed = kt.load_table(ref).attention["attention_cudnn"]
    (match,) = [m for m in parsed if m.group == (64, True, direction, 128) and m.point == (seq,)]
    assert match.work == pytest.approx(work, rel=1e-12)


def _tw(ref, seq, head_dim, direction, window):
    fwd = 4.0 * 2 * 128 * seq * seq * head_dim
    flops = fwd if direction == "fwd" else 2.5 * fwd
    work = flops * window_fraction(window, seq, 1)
    call = (seq, seq, head_dim, True)
    return table_attention.attention_time_s(
        ref, None, "cudnn", work, call, direction, "bf16", None, window
    )


def test_windowed_calls_read_the_windowed_rows_and_full_calls_the_full_ones():
    # a measured windowed shape returns its time; the full-causal rows do not see the windowed ones
    assert _tw(GB200, 4096, 64, "fwd", 128) == pytest.approx(0.210e-3, rel=1e-9)
    assert _tw(GB300, 8192, 64, "bwd", 128) == pytest.approx(0.862e-3, rel=1e-9)
    assert _t(GB200, 8192, True, "fwd") == pytest.approx(1.397e-3, rel=1e-9)
    # a window the table lacks (256) scales the nearest window's rate by the ratio of tile factors:
    # rate(128) x f(256)/f(128), f = window_tile_factor(cudnn, 4096, w) (same head dim and mask)
    ratio = window_tile_factor("cudnn", 4096, 256) / window_tile_factor("cudnn", 4096, 128)
    w128 = 4.0 * 2 * 128 * 64 * (128 * 4096 - 128 * 127 / 2)
    w256 = 4.0 * 2 * 128 * 64 * (256 * 4096 - 256 * 255 / 2)
    expect = w256 / (w128 / 0.210e-3 * ratio)
    assert _tw(GB200, 4096, 64, "fwd", 256) == pytest.approx(expect, rel=1e-9)
    # a window as long as the sequence is a full layer: the full rows
    work = kt.attention_work(2, 64, 4096, 128, True, "fwd")
    call = (4096, 4096, 128, True)
    got = table_attention.attention_time_s(
        GB200, None, "cudnn", work, call, "fwd", "bf16", None, 4096
    )
    assert got == pytest.approx(0.391e-3, rel=1e-9)


H200 = "h200-sxm-cudnn-sdpa"


def test_the_h200_table_splits_each_both_row_and_counts_the_benchmarks_flops():
    # results/h200_919_only_cudnn (cuDNN 9.19.1): one source row times both passes; the gpt_oss rows have a
    # 1,024-key window and 64 / 8 heads at head dim 64, the llama3.1 rows batch 1
    table = kt.load_table(H200)
    rows = table.rows["attention_cudnn"]
    assert len(rows) == 30 and sum(bool(r["window"]) for r in rows) == 10
    assert "df73764adb98b7445b77662ce07b1ea434c8f3ee" in table.provenance["source"]
    by_line = {(r["source_row"], r["direction"]): r for r in rows}
    gpt = by_line[("results/h200_919_only_cudnn/gpt_oss_20260227_034819.csv:18", "bwd")]
    assert (gpt["seq_len"], gpt["window"], gpt["time_us"]) == ("8192", "1024", "2149")
    for r, m in zip(rows, table.attention["attention_cudnn"]):
        us, tflops = float(r["time_us"]), float(r["tflops"])
        # 3-decimal ms and whole TFLOP/s in the source
        assert m.work / m.time_s / 1e12 == pytest.approx(tflops, rel=1e-3 + 0.5 / us + 0.5 / tflops)
    # 8192 window-1024 forward by hand: 4·2·64·64·(1024·8192 − 1024·1023/2) = 2.57715e11 FLOPs in 0.738 ms
    fwd = [m for m in table.attention["attention_cudnn"] if m.group == (64, True, "fwd", 1024)]
    (m8k,) = [m for m in fwd if m.point == (8192.0,)]
    assert m8k.work == pytest.approx(4.0 * 2 * 64 * 64 * (1024 * 8192 - 1024 * 1023 / 2), rel=1e-12)


def test_the_h200_table_is_listed_after_the_measured_one_and_opt_in():
    # validate.tables.with_tables attaches the first listed: the shipped H200 measurements stay first
    assert kt.tables_measured_on("H200-SXM-141GB") == [
        "h200-sxm-141gb",
        H200,
        "nd-h200-v5-cublaslt",
    ]
    assert load_system("dgx-h200").accelerator.kernel_tables is None


def test_the_analytical_form_prices_a_table_kernel_at_its_converted_fraction():
    """dgx-h100-80gb's 0.45 is cuDNN's fraction; its FlashAttention-2 rows are priced at 0.45 × the FA2 / cuDNN
    ratio at the reference shape (cost.attention.kernel_relative_speed, as a profile running FA2 gets it)."""
    from paraplan.cost.frameworks import as_attention_kernel
    from paraplan.validate.tables import _analytical

    acc = as_attention_kernel(load_system("dgx-h100-80gb").accelerator, "fa2")
    # Figure 5 plateaus × shape factors at causal 8k, head dim 128 (s_half 107 / 134, tile rows 128)
    ratio = (378 * 8192 / 8299) / (627 * 8192 / 8326)
    assert acc.efficiency.attention == pytest.approx(0.45 * ratio, rel=1e-9)
    assert acc.efficiency.attention_kernel == "fa2"
    table = kt.load_table("h100-sxm5-80gb")
    rows = kt.attention_rows(table.rows["attention_fa2"], "h100-sxm5-80gb", "attention_flash.csv")
    row = next(r for r in rows if r.point == (8192.0,) and r.group == (128, True, "fwd", None))
    # 4·2·32·8192²·128 × 8193/16384 FLOPs at 989.4 TFLOPS × 0.2722 (shape scale 1) + 4 us
    work = 4 * 2 * 32 * 8192**2 * 128 * 8193 / 16384
    want = work / (989.4e12 * 0.45 * ratio) + 4e-6
    assert _analytical(acc, [row])[0] == pytest.approx(want, rel=1e-6)
