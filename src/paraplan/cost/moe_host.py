"""Host side of a dropless MoE layer in Megatron-Core: its dispatch synchronisation and the CUDA-graph
regions around it (docs/model.md, "Host time", "The dropless synchronisation").

Source: NVIDIA/Megatron-LM at core_v0.14.0 (the Megatron-Core of the NeMo 25.09 container, Megatron-Bridge
r0.1.0; core_v0.15.0 for 25.11 has the same dispatch path), megatron/core/transformer/moe/:

- token_dispatcher.py MoEAlltoAllTokenDispatcher.preprocess (l. 428-549): a dropless layer's per-rank token
  counts are device tensors; with EP > 1 the all-to-all needs its split sizes on the host, so the sync point is
  "before_ep_alltoall" (l. 523), "before_finish" without EP (l. 532). dispatch_preprocess copies the counts to
  the host on a side stream (_maybe_dtoh_and_synchronize, l. 821-858: non-blocking copies, then one
  ``d2h_event.synchronize()`` at the sync point) after issuing the count reduction, then issues permutation 1
  (l. 596), so the one sync per layer forward lands between permutation 1 and the EP all-to-all
  (token_dispatch, l. 606-632). Backward runs the all-to-all's autograd backward with the split lists saved
  forward: no sync (graph.moe_mlp builds the one host_sync op, dispatch_host_sync, forward only). Drop-and-pad
  (moe_pad_expert_input_to_capacity) keeps "no_sync".
- DeepEP (the flex dispatcher, fused_a2a.py FusedDispatch.forward l. 72-136) returns the per-expert receive
  counts as a host list (num_recv_tokens_per_expert_list): the host waits for its notify kernel, one sync too.
- experts.py TEGroupedMLP.forward (l. 818-843): ``tokens_per_expert.tolist()`` of the counts the
  sync already brought to the host (no second wait), then, with fp8, Fp8Padding of the tokens and of the probs
  before Transformer Engine's GroupedLinear fc1.

So each sync (i) drains the queue up to the count copy: the host waits for the GPU, then the GPU waits one
round trip (``sync_drain_s``); (ii) with nothing queued, the GPU then idles whenever the host, re-issuing the
layer's kernels one by one, is behind (``reissue_idle_s`` over ``post_sync_sequence``); (iii) a region inside
a CUDA graph is issued as one graph launch (``graph_launches``), which is why a scope that captures the
attention or the router shortens the host's stretch but never removes the sync.
"""

from __future__ import annotations

from collections.abc import Sequence

# Python-issued calls from the sync to the first kernel that runs long enough for the host to get ahead: the EP
# all-to-all of the tokens (token_dispatch, token_dispatcher.py l. 625; DeepEP's dispatch kernel after its
# notify, fused_a2a.py l. 104-121). Its own device time is priced with the block's collectives (cost.moe), not here.
DISPATCH_CALLS = 1
# Calls of Fp8Padding before the grouped fc1 under fp8 (experts.py TEGroupedMLP.forward: the tokens and the probs)
FP8_PADDING_CALLS = 2


def sync_drain_s(syncs: int, round_trip_s: float) -> float:
    """(i) GPU idle of ``syncs`` drains: n · t_sync, t_sync the measured device-to-host round trip on an idle GPU
    (efficiency.host_sync_latency_s: .item() of one element, the count copy and event wait of
    token_dispatcher.py _maybe_dtoh_and_synchronize): device and driver latency, not scaled by the host CPU's
    speed (host_speed). The host waits as long (host_sums' sync_wait)."""
    return syncs * round_trip_s


def reissue_idle_s(host_s: Sequence[float], device_s: Sequence[float]) -> float:
    """(ii) GPU idle while a host refills a drained queue: kernel k can start only once the host has issued it
    (after Σ_{j≤k} H_j) and the GPU has run the ones before it (Σ_{j<k} D_j), so a single stream that starts empty
    ends at max_k (Σ_{j≤k} H_j + Σ_{j≥k} D_j) and idles max(0, max_k (Σ_{j≤k} H_j − Σ_{j<k} D_j)) in all (the list
    scheduling bound of a producer-consumer queue; NVIDIA, "Getting Started with CUDA Graphs", A. Gray, 2019:
    back-to-back launches of short kernels run at the launch rate). ``host_s`` and ``device_s``: per issued call,
    in issue order."""
    idle = issued = ran = 0.0
    for h, d in zip(host_s, device_s, strict=True):
        issued += h
        idle = max(idle, issued - ran)
        ran += d
    return idle


def post_sync_sequence(
    section: Sequence[tuple[str, float, float]], call_s: float, fp8: bool
) -> tuple[list[float], list[float]]:
    """(host seconds, device seconds) per call the host issues after the sync, in order: DISPATCH_CALLS launches
    of the dispatch (their device time 0 here: the all-to-all is a collective, priced in the block's
    communication, so the idle is an upper bound where the host lags the experts), the FP8_PADDING_CALLS under
    fp8, then the expert section's ops (``section``: (name, host, device) in graph order) except permutation 1,
    which the dispatcher issues before the sync. ``call_s``: one Python-issued call's host seconds."""
    host = [call_s] * DISPATCH_CALLS
    device = [0.0] * DISPATCH_CALLS
    if fp8:
        host += [call_s] * FP8_PADDING_CALLS
        device += [0.0] * FP8_PADDING_CALLS
    for name, h, d in section:
        if name != "permute":
            host.append(h)
            device.append(d)
    return host, device


def post_clamp_sequence(
    section: Sequence[tuple[str, float, float]],
) -> tuple[list[float], list[float]]:
    """(host seconds, device seconds) per call the host issues after a clamped GLU's activation synchronisation
    (graph.moe_mlp.clamped_glu_ops: a host-to-device copy of a scalar after the clamps), in order: the expert
    ``section``'s ops ((name, host, device) in graph order) that follow ``expert_glu_clamp`` (the whole section
    when it has none); no dispatch call precedes them, unlike post_sync_sequence."""
    names = [name for name, _, _ in section]
    start = names.index("expert_glu_clamp") + 1 if "expert_glu_clamp" in names else 0
    return [h for _, h, _ in section[start:]], [d for _, _, d in section[start:]]


def graph_launches(in_graph: Sequence[bool], whole_iteration: bool) -> int:
    """(iii) CUDA-graph launches one block makes per pass: one per maximal run of consecutive graphed ops (a
    graphed callable per captured region: Megatron-Core transformer/cuda_graphs.py CudaGraphManager records one
    graph per captured module call; Transformer Engine make_graphed_callables replays each as one autograd
    Function), none for a block that a whole-iteration graph holds entirely (one launch per step, spread over
    every block). A dropless MoE layer's expert section splits a whole-iteration graph, so its block launches the
    runs before and after it."""
    runs = sum(1 for i, g in enumerate(in_graph) if g and (i == 0 or not in_graph[i - 1]))
    if whole_iteration and all(in_graph):
        return 0
    return runs
