"""Each pipeline schedule's instruction order: every stage's passes in the order it runs them (the
``order`` of its entry in step.schedules.SCHEDULES), plain integers, which the plan explorer's
timeline places in time (web/timeline.py) along the routes micro-batches take (``route_position``).
tests/unit/test_schedule_orders.py checks each order against its schedule's bubble and activations.
"""

from __future__ import annotations

from paraplan.specs.rules import dualpipe_rule, interleave_batch_rule

# A pass is (kind, micro-batch, model chunk): "F" forward, "B" backward ("B" the input-gradient part
# alone where the schedule splits the backward, with "W" its weight-gradient part), chunk 0 .. v − 1
# (DualPipe: the direction, 0 or 1, with micro-batches counted per direction).
Pass = tuple[str, int, int]


def one_f_one_b_warmup(pp, stage):
    """Forwards stage s of 1F1B runs before its first backward, p − s − 1 (Narayanan et al. 2021 §2.2.1), before
    the cap at m; one more is in flight at its peak (step.schedules.one_f_one_b_in_flight). Floats or arrays."""
    return pp - stage - 1


def interleaved_warmup(pp, vpp, stage):
    """Model chunks stage s of the interleaved schedule runs forward before its first backward, 2·(p − s − 1) +
    (v − 1)·p (Megatron-LM's num_warmup_microbatches, core_v0.14.0; Korthikanti et al. 2022 §4.3), before the cap
    at m·v; one more is in flight at its peak (step.schedules' interleaved in-flight count). Floats or arrays."""
    return (pp - stage - 1) * 2 + (vpp - 1) * pp


def gpipe_order(pp: int, vpp: int, microbatches: int, stage: int) -> list[Pass]:
    """GPipe: every forward, then every backward (Huang et al. 2019 §2.3)."""
    m = microbatches
    return [("F", i, 0) for i in range(m)] + [("B", i, 0) for i in range(m)]


def one_f_one_b_order(pp: int, vpp: int, microbatches: int, stage: int) -> list[Pass]:
    """1F1B: min(p − s − 1, m) warm-up forwards on stage s, then one forward / one backward, then the
    remaining backwards (Narayanan et al. 2021 §2.2.1, Fig. 4 top)."""
    m = microbatches
    warm = min(one_f_one_b_warmup(pp, stage), m)
    order = [("F", i, 0) for i in range(warm)]
    for i in range(m - warm):
        order += [("F", warm + i, 0), ("B", i, 0)]
    return order + [("B", i, 0) for i in range(m - warm, m)]


def interleaved_order(pp: int, vpp: int, microbatches: int, stage: int) -> list[Pass]:
    """Interleaved 1F1B (m a multiple of p, specs.rules.interleave_batch_rule): model chunks taken p
    micro-batches at a time, backwards in reverse chunk order; min((p − s − 1)·2 + (v − 1)·p, m·v)
    warm-up forwards on stage s, then one forward / one backward (Megatron-LM,
    ``forward_backward_pipelining_with_interleaving``, core_v0.14.0; Narayanan et al. 2021 §2.2.2).
    vpp = 1 runs 1F1B's order; ValueError for a micro-batch count the rule refuses (no silent 1F1B)."""
    if vpp <= 1:
        return one_f_one_b_order(pp, 1, microbatches, stage)
    if rule := interleave_batch_rule(microbatches, pp):
        raise ValueError(rule)
    total = microbatches * vpp
    warm = min(interleaved_warmup(pp, vpp, stage), total)

    def ident(k: int, backward: bool) -> tuple[int, int]:
        chunk = (k // pp) % vpp
        return (k // (pp * vpp)) * pp + k % pp, (vpp - 1 - chunk if backward else chunk)

    order = [("F", *ident(k, False)) for k in range(warm)]
    for k in range(total - warm):
        order += [("F", *ident(warm + k, False)), ("B", *ident(k, True))]
    return order + [("B", *ident(k, True)) for k in range(total - warm, total)]


def zb_h1_order(pp: int, vpp: int, microbatches: int, stage: int) -> list[Pass]:
    """ZB-H1: 1F1B's order of forwards and input-gradient backwards B; stage s runs its
    weight-gradient pass W of micro-batch i after the B of micro-batch i + s (the last stage defers
    p − 1, the first none: each stage holds at most p micro-batches, 1F1B's peak), the deferred W
    passes at the end of the cool-down (Qi et al. 2023, arXiv:2401.10241 §3.1, Fig. 3). With equal
    stages and W <= F this order takes m·(F + B) + (p − 1)·(F + B − c·W), the bubble of
    ``step.schedules._zb_h1_bubble_s`` (tests/unit/test_schedule_orders.py)."""
    m = microbatches
    done = 0
    order: list[Pass] = []
    for kind, mb, chunk in one_f_one_b_order(pp, 1, m, stage):
        order.append((kind, mb, chunk))
        while kind == "B" and done <= mb - stage:
            order.append(("W", done, 0))
            done += 1
    return order + [("W", i, 0) for i in range(done, m)]


class _DualPipeRank:
    """The passes one rank of DualPipe runs, in deepseek-ai/DualPipe's order (dualpipe.py,
    ``DualPipe.step``, steps 1-8; read at commit 3da1bbe, our own restatement). Its two "phases"
    are the directions of ``dualpipe_order``, swapped on the second half of the ranks
    (``phase ^= is_in_second_half``); micro-batches are counted per direction, forwards and backwards
    each in order; a backward with zero bubble enabled leaves its W in a first-in first-out queue
    that ``_weight_chunk`` empties, any other backward is B followed at once by its W."""

    def __init__(self, pp: int, rank: int) -> None:
        self.second = int(rank >= pp // 2)
        self.forwards, self.backwards = [0, 0], [0, 0]
        self.queue: list[tuple[int, int]] = []
        self.out: list[Pass] = []
        self.pairs: list[int] = []  # where each overlapped pair's F, B, W passes start in ``out``

    def pair(self, phase0: int, phase1: int) -> None:
        """``_forward_backward_chunk``: a forward and a whole backward run as one overlapped pair."""
        self.pairs.append(len(self.out))
        self.forward(phase0)
        self.backward(phase1)

    def forward(self, phase: int) -> None:
        d = phase ^ self.second
        self.out.append(("F", self.forwards[d], d))
        self.forwards[d] += 1

    def backward(self, phase: int, zero_bubble: bool = False) -> None:
        d = phase ^ self.second
        mb = self.backwards[d]
        self.backwards[d] += 1
        self.out.append(("B", mb, d))
        if zero_bubble:
            self.queue.append((mb, d))
        else:
            self.out.append(("W", mb, d))

    def weight(self) -> None:
        mb, d = self.queue.pop(0)
        self.out.append(("W", mb, d))


def dualpipe_order(pp: int, vpp: int, microbatches: int, stage: int) -> list[Pass]:
    """DualPipe (DeepSeek-V3 report §3.2.1, Fig. 5; deepseek-ai/DualPipe dualpipe.py, whose
    ``DualPipe.step`` asserts an even rank count and m >= 2p micro-batches, m/2 fed from each end):
    direction 0 enters at stage 0 and runs stage s's layers on rank s, direction 1 enters at stage
    p − 1 (rank p − 1 − s runs stage s's layers: the second copy of the weights). A pass is
    (kind, micro-batch within its direction, direction); the overlapped pairs (``dualpipe_pairs``)
    are an F, B and W in a row. ValueError for m < 2p or an odd p or m (the reference implementation
    asserts them; specs.rules.dualpipe_rule)."""
    return _dualpipe_rank(pp, microbatches, stage).out


def dualpipe_pairs(pp: int, vpp: int, microbatches: int, stage: int) -> list[int]:
    """Where in ``dualpipe_order`` each overlapped forward-backward pair starts (its F, then the B
    and W of a whole backward): ``_forward_backward_chunk`` of steps 4 and 5 of ``DualPipe.step``, the
    middle ranks' first one of step 4 run unpaired (step.dualpipe.overlapped_pairs counts them)."""
    return _dualpipe_rank(pp, microbatches, stage).pairs


def _dualpipe_rank(pp: int, m: int, stage: int) -> _DualPipeRank:
    """The passes of rank ``stage`` through the eight steps of ``DualPipe.step`` (``dualpipe_order``)."""
    half = pp // 2
    if rule := dualpipe_rule(pp, m):
        raise ValueError(f"DualPipe (m >= 2p): {rule}")
    h = min(stage, pp - 1 - stage)  # half_rank
    rank = _DualPipeRank(pp, stage)
    f, b, w = rank.forward, rank.backward, rank.weight
    for _ in range((half - h - 1) * 2):  # step 1: nF0
        f(0)
    for _ in range(h + 1):  # step 2: nF0F1
        f(0)
        f(1)
    for _ in range(half - h - 1):  # step 3: nB1W1F1 (zero bubble)
        b(1, True)
        w()
        f(1)
    for i in range(m // 2 - pp + h + 1):  # step 4: nF0B1F1B0, the middle ranks' first F0B1 apart
        if i == 0 and h == half - 1:
            f(0)
            b(1)
        else:
            rank.pair(0, 1)
        rank.pair(1, 0)
    for _ in range(half - h - 1):  # step 5: nB1F1B0
        b(1)
        rank.pair(1, 0)
    zero_bubble = False
    for i in range(h + 1):  # step 6: nB1B0, the second half with zero bubble
        zero_bubble = zero_bubble or (i == (h + 1) // 2 and h % 2 == 1)
        b(1, zero_bubble)
        zero_bubble = zero_bubble or (i == (h + 1) // 2 and h % 2 == 0)
        b(0, zero_bubble)
    for _ in range(half - h - 1):  # step 7: nWB0 (zero bubble)
        w()
        b(0, True)
    for _ in range(h + 1):  # step 8: nW
        w()
    return rank


def route_position(directions: int, pp: int, vpp: int, stage: int, chunk: int) -> tuple[int, int]:
    """(route, position) of a pass of model chunk ``chunk`` on ``stage``; the position runs 0 ..
    ``route_length`` − 1 and a micro-batch's forward goes up it, its backward down. One route: chunk c
    of stage s is virtual stage c·p + s (Megatron-LM's interleaving, Narayanan et al. 2021 §2.2.2).
    DualPipe's two (``chunk`` the direction): stage s at position s going one way, p − 1 − s the
    other."""
    if directions == 2:
        return chunk, stage if chunk == 0 else pp - 1 - stage
    return 0, chunk * pp + stage


def route_length(directions: int, pp: int, vpp: int) -> int:
    """Positions on a route (``route_position``): p·v, or p for DualPipe's."""
    return pp if directions == 2 else pp * vpp
