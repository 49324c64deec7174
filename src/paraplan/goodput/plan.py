"""One plan's goodput: its estimate, its checkpoint, failures over its world size, and its energy."""

from __future__ import annotations

import math
from dataclasses import dataclass

from paraplan.goodput import closed_forms as cf
from paraplan.goodput.checkpoint import CheckpointCost, checkpoint_cost
from paraplan.goodput.energy import JOULES_PER_MWH, power_draw, run_energy_j, step_energy_j
from paraplan.goodput.inputs import SECONDS_PER_DAY, GoodputInputs, default_inputs
from paraplan.goodput.recovery import BlastRadius, blast_radius, peer_load_time_s, rejoin_s
from paraplan.goodput.time_to_train import Recovery, TimeToTrain, time_to_train
from paraplan.units import GiB


@dataclass(frozen=True)
class PlanGoodput:
    """Time-to-train of ``tokens`` tokens under one plan, failures and energy included."""

    tokens: float
    steps: float
    gpus: int
    checkpoint: CheckpointCost
    time: TimeToTrain
    energy_j: float | None
    peak_w: float | None
    price_per_gpu_hour: float | None
    accelerator: str
    inputs: (
        GoodputInputs  # as asked: the checkpoint mode (self.checkpoint.mode: as saved), the grid
    )
    radius: BlastRadius | None = None

    @property
    def gpu_hours(self) -> float:
        """GPU-hours of the expected wall time, badput included."""
        return self.time.wall_s * self.gpus / 3600.0

    def to_dict(self) -> dict:
        t = self.time
        days = SECONDS_PER_DAY
        energy = self.energy_j
        out = {
            "tokens": self.tokens,
            "steps": self.steps,
            "effective_training_time_ratio": t.effective_training_time_ratio,
            "checkpoint_interval_s": t.interval_s,
            "checkpoint_interval_steps": t.interval_steps,
            "expected_failures": t.expected_failures,
            "mtbf_h": t.mtbf_s / 3600.0 if math.isfinite(t.mtbf_s) else None,
            "prob_any_failure": cf.prob_at_least_one_failure(1.0 / t.mtbf_s, t.wall_s),
            "useful_days": t.useful_s / days,
            "expected_days": t.wall_s / days,
            "days_p10": t.p10_s / days,
            "days_p50": t.p50_s / days,
            "days_p90": t.p90_s / days,
            "restart_s": t.restart_s,
            "planned_interruptions": t.planned_interruptions,
            "badput_s": dict(t.badput_s),
            "recovery": self._recovery_dict(),
            "checkpoint": {
                "mode": self.checkpoint.mode,
                "asked_mode": self.inputs.checkpoint.mode,
                "fallback": self.checkpoint.fallback,
                "host_gib": self.checkpoint.host_bytes / GiB,
                "rank_gib": self.checkpoint.rank_bytes / GiB,
                "total_tb": self.checkpoint.total_bytes / 1e12,
                "save_stall_s": self.checkpoint.stall_s,
                "persist_s": self.checkpoint.persist_s,
                "load_s": self.checkpoint.load_s,
            },
            "gpu_hours": self.gpu_hours,
            "cost_usd": None
            if self.price_per_gpu_hour is None
            else self.gpu_hours * self.price_per_gpu_hour,
            "energy_mwh": None if energy is None else energy / JOULES_PER_MWH,
            "average_mw": None if energy is None else energy / t.wall_s / 1e6,
            "peak_mw": None if self.peak_w is None else self.peak_w / 1e6,
            "tokens_per_joule": None if energy is None else self.tokens / energy,
            "grid_gco2_per_kwh": self.inputs.energy.grid_gco2_per_kwh,
            "emissions_tco2": None
            if energy is None
            else emissions_tco2(energy, self.inputs.energy.grid_gco2_per_kwh),
            "accelerator": self.accelerator,
        }
        return _finite(out)

    def _recovery_dict(self) -> dict:
        """The recovery policy, which failure kinds it drops replicas for, and the blast radius."""
        r = self.radius
        out = {"policy": self.time.policy, "absorbed": list(self.time.absorbed)}
        if r is not None:
            out.update(
                units=r.units,
                replicas_per_unit=r.replicas_per_unit,
                units_hit_by_gpu=r.units_hit_by_gpu,
                units_hit_by_server=r.units_hit_by_server,
                units_hit_by_domain=r.units_hit_by_domain,
                ft_dp_possible=r.ft_dp_possible,
                ft_dp_reason=r.reason,
            )
        return out


def emissions_tco2(energy_j: float, grid_gco2_per_kwh: float) -> float:
    """Tonnes of CO2: E [kWh] * I [gCO2/kWh] / 1e6, E = energy_j / 3.6e6 (the facility's energy, PUE
    included, at the grid's average intensity: location-based, no market instruments)."""
    return energy_j / 3.6e6 * grid_gco2_per_kwh / 1e6


def _finite(value):
    """JSON-safe: non-finite numbers (a run that never finishes) become None, recursively."""
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def plan_goodput(
    est,
    model_spec,
    system_spec,
    plan,
    tokens: float,
    inputs: GoodputInputs | None = None,
    price_per_gpu_hour: float | None = None,
) -> PlanGoodput:
    """The goodput of the plan whose estimate is ``est`` over ``tokens`` tokens: T_s = steps * t_step
    with steps = tokens / tokens_per_step, the plan's checkpoint (goodput.checkpoint), time_to_train,
    and the run's energy (goodput.energy) when the accelerator's power is known (else None)."""
    inputs = inputs or default_inputs()
    steps = tokens / est.tokens_per_step
    useful = steps * est.step_time_s
    ckpt = checkpoint_cost(est, model_spec, system_spec, plan, inputs.checkpoint)
    recovery = plan_recovery(system_spec, plan, est.gpus, ckpt, inputs)
    time = time_to_train(useful, est.step_time_s, est.gpus, ckpt, inputs, recovery=recovery)
    accelerator = system_spec.accelerator.name
    power = inputs.power(accelerator)
    energy = peak = None
    if power is not None:
        draw = power_draw(power, inputs.energy)
        step_j = step_energy_j(est.breakdown, draw, est.gpus)
        energy = run_energy_j(
            useful,
            est.step_time_s,
            step_j,
            time.lost_s,
            time.idle_s,
            draw,
            est.gpus,
            inputs.energy.pue,
        )
        peak = inputs.energy.pue * est.gpus * draw.peak_w
    return PlanGoodput(
        tokens=tokens,
        steps=steps,
        gpus=est.gpus,
        checkpoint=ckpt,
        time=time,
        energy_j=energy,
        peak_w=peak,
        price_per_gpu_hour=price_per_gpu_hour,
        accelerator=accelerator,
        inputs=inputs,
        radius=recovery.radius,
    )


def plan_recovery(system_spec, plan, gpus: int, ckpt: CheckpointCost, inputs) -> Recovery:
    """The plan's blast radius on the system (servers of failures.gpus_per_server GPUs, NVLink
    domains of node.gpus_per_domain) and the rejoin time of a dropped unit (goodput.recovery.rejoin_s:
    the spare wait, its swap-in, the world's communicator set-up, the state from a healthy peer)."""
    domain = system_spec.node.gpus_per_domain
    radius = blast_radius(plan, inputs.failures.gpus_per_server, domain)
    servers = cf.servers_for(gpus, inputs.failures.gpus_per_server)
    server_rate = servers * inputs.failures.server_failures_per_day / SECONDS_PER_DAY
    r = inputs.restart
    back = rejoin_s(
        cf.expected_spare_wait_s(server_rate, r.repair_s, r.spare_servers),
        r.spare_swap_s if r.spare_servers is not None else 0.0,
        r.init_s_per_gpu * gpus,
        peer_load_time_s(ckpt.rank_bytes, system_spec.network.nic_bandwidth),
    )
    return Recovery(radius, back, domain)
