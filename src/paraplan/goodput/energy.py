"""Energy of a training run from the step's time breakdown (docs/goodput.md, "Energy").

A GPU draws its thermal design power P_tdp while it computes (forward, backward, recompute, optimizer
step: the busy parts of step.result.TimeBreakdown) and f * P_tdp while it waits (exposed communication,
pipeline bubble, offload, save stalls, restarts); the rest of its server (CPUs, NICs, fans) draws
P_host = P_system / GPU - P_tdp throughout; the facility multiplies everything by its PUE."""

from __future__ import annotations

from dataclasses import dataclass

from paraplan.goodput.inputs import AcceleratorPower, EnergyInputs

BUSY_PARTS = ("forward_s", "backward_s", "recompute_s", "optimizer_s")
JOULES_PER_MWH = 3.6e9


@dataclass(frozen=True)
class PowerDraw:
    """Watts of one GPU slot: computing, waiting, and its share of the server besides the GPU."""

    busy_w: float
    wait_w: float
    host_w: float

    @property
    def peak_w(self) -> float:
        return self.busy_w + self.host_w


def power_draw(power: AcceleratorPower, energy: EnergyInputs) -> PowerDraw:
    """P_busy = P_tdp, P_wait = f * P_tdp, P_host = P_system/GPU - P_tdp (0 without a system figure)."""
    host = 0.0 if power.system_w_per_gpu is None else max(0.0, power.system_w_per_gpu - power.tdp_w)
    return PowerDraw(power.tdp_w, energy.wait_power_fraction * power.tdp_w, host)


def step_energy_j(breakdown, draw: PowerDraw, gpus: int) -> float:
    """E_step = N * (P_busy * t_busy + P_wait * (t_step - t_busy) + P_host * t_step), before PUE."""
    step_s = breakdown.total_s()
    busy_s = sum(getattr(breakdown, part) for part in BUSY_PARTS)
    return gpus * (draw.busy_w * busy_s + draw.wait_w * (step_s - busy_s) + draw.host_w * step_s)


def run_energy_j(
    useful_s: float,
    step_s: float,
    step_j: float,
    lost_s: float,
    idle_s: float,
    draw: PowerDraw,
    gpus: int,
    pue: float,
) -> float:
    """E = PUE * [(T_s + T_lost) / t_step * E_step + N * (P_wait + P_host) * T_idle]: steps that count
    and steps redone after a rollback at the step's energy, saves, restarts and start-up waiting."""
    it = (useful_s + lost_s) / step_s * step_j + gpus * (draw.wait_w + draw.host_w) * idle_s
    return pue * it
