"""Host-side launch costs of PyTorch on one GPU (component data for paraplan's host model, cost/host.py).

Measures, each as a median over repeats (wall clock around a synchronised loop):
- eager dispatch: N in-place adds on a tiny tensor (device time ~2 us each, so the loop runs at the host's
  issue rate): seconds per op, no autograd;
- eager dispatch with autograd: forward of N tiny Linear layers + backward (kernels counted by the profiler):
  host seconds per kernel;
- CUDA-graph replay: the same N adds captured in one graph and replayed: seconds per kernel;
- synchronisation round trip: tensor.item() on an idle GPU;
- tiny training steps: a 12-layer GPT-style model (hidden 256) at micro-batch 1, sequence 128, eager: step time
  and the number of kernels one step launches (torch.profiler), so host-bound steps can be checked.

Run: python benchmarks/gpu/host_probe.py OUTDIR   (about 30 s; needs torch and a CUDA GPU)
Writes OUTDIR/host_probe.json. Held-out / component data: never fit step-time constants to it.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


def timed(fn, repeats=7):
    times = []
    for _ in range(repeats):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def eager_adds(n):
    x = torch.zeros(256, device="cuda")
    return lambda: [x.add_(1.0) for _ in range(n)]


def graph_adds(n):
    x = torch.zeros(256, device="cuda")
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            for _ in range(n):
                x.add_(1.0)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(n):
            x.add_(1.0)
    return g.replay


def count_kernels(fn):
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    return sum(1 for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA)


class Block(nn.Module):
    def __init__(self, h, heads):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(h), nn.LayerNorm(h)
        self.qkv, self.proj = nn.Linear(h, 3 * h), nn.Linear(h, h)
        self.fc1, self.fc2 = nn.Linear(h, 4 * h), nn.Linear(4 * h, h)
        self.heads = heads

    def forward(self, x):
        b, s, h = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, s, 3, self.heads, h // self.heads).unbind(2)
        a = F.scaled_dot_product_attention(
            q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True
        )
        x = x + self.proj(a.transpose(1, 2).reshape(b, s, h))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


def tiny_step(layers, h, heads, seq, vocab, mb):
    torch.manual_seed(0)
    emb = nn.Embedding(vocab, h).cuda()
    blocks = nn.ModuleList(Block(h, heads) for _ in range(layers)).cuda()
    ln = nn.LayerNorm(h).cuda()
    params = list(emb.parameters()) + list(blocks.parameters()) + list(ln.parameters())
    opt = torch.optim.AdamW(params, lr=1e-4, fused=True)
    tokens = torch.randint(0, vocab, (mb, seq), device="cuda")

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            x = emb(tokens)
            for blk in blocks:
                x = blk(x)
            logits = ln(x) @ emb.weight.t()
        loss = F.cross_entropy(logits.float().view(-1, vocab), tokens.view(-1))
        loss.backward()
        opt.step()

    for _ in range(3):
        step()
    per_step = timed(lambda: [step() for _ in range(10)], repeats=5) / 10
    kernels = count_kernels(step)
    return {
        "layers": layers,
        "hidden": h,
        "heads": heads,
        "seq": seq,
        "vocab": vocab,
        "micro_batch": mb,
        "params": sum(p.numel() for p in params),
        "weight_tensors": len(params),
        "step_time_s": per_step,
        "kernels_per_step": kernels,
    }


def main(out):
    # Kineto leaves CUPTI attached after a torch.profiler session unless TEARDOWN_CUPTI=1 (pytorch/kineto
    # libkineto/src/CuptiActivityApi.cpp cuptiTearDown_; pytorch/pytorch#144455): count_kernels runs
    # between the timings below, which, before 2026-11-28, then ran with CUPTI attached
    os.environ.setdefault("TEARDOWN_CUPTI", "1")
    os.makedirs(out, exist_ok=True)
    n = 2000
    res = {"torch": torch.__version__, "gpu": torch.cuda.get_device_name(), "ops_per_loop": n}
    res["teardown_cupti"] = os.environ["TEARDOWN_CUPTI"]
    eager_adds(10)()
    res["eager_add_per_op_s"] = timed(eager_adds(n)) / n
    g = graph_adds(n)
    g()
    res["graph_add_per_kernel_s"] = timed(g) / n
    x = torch.zeros(1, device="cuda")
    res["item_round_trip_s"] = timed(lambda: [x.item() for _ in range(200)]) / 200

    lin = nn.Sequential(*[nn.Linear(64, 64) for _ in range(200)]).cuda()
    inp = torch.randn(8, 64, device="cuda", requires_grad=True)

    def fb():
        lin(inp).sum().backward()

    fb()
    kern = count_kernels(fb)
    res["autograd_linear_kernels"] = kern
    res["autograd_linear_per_kernel_s"] = timed(fb) / kern
    res["tiny_steps"] = [
        tiny_step(12, 256, 4, 128, 8192, 1),
        tiny_step(12, 768, 12, 128, 50304, 1),
        tiny_step(12, 768, 12, 2048, 50304, 8),
    ]
    with open(os.path.join(out, "host_probe.json"), "w") as f:
        json.dump(res, f, indent=1)
    print(json.dumps(res, indent=1))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "/tmp/host_probe")
