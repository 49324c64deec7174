"""Closed forms of failures, checkpoint intervals and expected wall time (docs/goodput.md).

Failures arrive as a Poisson process (exponential inter-arrival times) of rate ``rate_per_s`` = 1 / M,
M the job's mean time between interruptions; each interruption rolls the job back to its last
checkpoint. Notation of Daly 2006: T_s useful (solve) time, tau checkpoint interval, delta the time
a save stalls training, R the restart time."""

from __future__ import annotations

import math

from paraplan.goodput.inputs import SECONDS_PER_DAY, FailureInputs, RestartInputs


def servers_for(gpus: int, gpus_per_server: int) -> int:
    """Servers a job of ``gpus`` GPUs occupies: ceil(gpus / gpus_per_server)."""
    return -(-gpus // gpus_per_server)


FAILURE_KINDS = ("gpu", "server", "domain")  # what one interruption takes out (goodput.recovery)


def failure_rates_per_s(
    gpus: int, failures: FailureInputs, gpus_per_domain: int | None = None
) -> dict[str, float]:
    """Interruption rates by kind, per second of wall time: N_gpu * r_gpu, N_server * r_server and
    N_domain * r_domain over 86,400 s, with N_server = ceil(N / gpus_per_server) and N_domain =
    ceil(N / gpus_per_domain) (no domain term without a domain size)."""
    servers = servers_for(gpus, failures.gpus_per_server)
    domains = servers_for(gpus, gpus_per_domain) if gpus_per_domain else 0
    return {
        "gpu": gpus * failures.gpu_failures_per_day / SECONDS_PER_DAY,
        "server": servers * failures.server_failures_per_day / SECONDS_PER_DAY,
        "domain": domains * failures.domain_failures_per_day / SECONDS_PER_DAY,
    }


def job_failure_rate_per_s(
    gpus: int, failures: FailureInputs, gpus_per_domain: int | None = None
) -> float:
    """lambda = (N_gpu * r_gpu + N_server * r_server + N_domain * r_domain) / 86,400 s: a synchronous
    job stops when any of its components fails, so independent exponential rates add (series system;
    Kokolis et al. 2025, "Revisiting Reliability in Large-Scale ML Research Clusters", model
    MTTF ~ 1 / (N * r))."""
    return sum(failure_rates_per_s(gpus, failures, gpus_per_domain).values())


def prob_at_least_one_failure(rate_per_s: float, duration_s: float) -> float:
    """P(N >= 1) = 1 - exp(-lambda * T) for Poisson arrivals over T seconds."""
    return -math.expm1(-rate_per_s * duration_s)


def annual_rate_to_per_day(annual_fraction: float) -> float:
    """An annualised failure rate (fraction of units failing per 365-day year) as failures per unit-day."""
    return annual_fraction / 365.0


def young_interval_s(save_s: float, mtbf_s: float) -> float:
    """Young 1974, "A first order approximation to the optimum checkpoint interval":
    tau = sqrt(2 * delta * M)."""
    return math.sqrt(2.0 * save_s * mtbf_s)


def daly_interval_s(save_s: float, mtbf_s: float) -> float:
    """Daly 2006, "A higher order estimate of the optimum checkpoint interval for restart dumps",
    eq. (37): tau = sqrt(2 delta M) * [1 + sqrt(delta / 2M) / 3 + (delta / 2M) / 9] - delta for
    delta < 2M, else tau = M."""
    if math.isinf(mtbf_s):
        return math.inf
    if save_s >= 2.0 * mtbf_s:
        return mtbf_s
    x = save_s / (2.0 * mtbf_s)
    return math.sqrt(2.0 * save_s * mtbf_s) * (1.0 + math.sqrt(x) / 3.0 + x / 9.0) - save_s


def expected_segment_s(segment_s: float, restart_s: float, mtbf_s: float) -> float:
    """Expected wall time to finish one segment of ``segment_s`` seconds that restarts from its start on
    a failure, each failure followed by a restart of ``restart_s`` that itself restarts on a failure:
    E = M * e^(R/M) * (e^(s/M) - 1) (Daly 2006, eq. (13) per segment); M -> inf gives s."""
    if math.isinf(mtbf_s):
        return segment_s
    if (restart_s + segment_s) / mtbf_s > 700:  # beyond a float: never finishes in practice
        return math.inf
    return mtbf_s * math.exp(restart_s / mtbf_s) * math.expm1(segment_s / mtbf_s)


def expected_rollbacks(useful_s: float, interval_s: float, save_s: float, mtbf_s: float) -> float:
    """Failures that interrupt training (not a restart): per segment of s = tau + delta, the failed tries
    before one succeeds are geometric with success e^(-s/M), so (T_s / tau) * (e^(s/M) - 1) in all
    (Daly 2006's model). Each is followed by a restart phase of M (e^(R/M) - 1) on average
    (expected_segment_s(R, 0, M)), the restart's own failures included."""
    if math.isinf(mtbf_s):
        return 0.0
    return useful_s / interval_s * math.expm1((interval_s + save_s) / mtbf_s)


def expected_wall_s(
    useful_s: float, interval_s: float, save_s: float, restart_s: float, mtbf_s: float
) -> float:
    """Daly 2006, eq. (13): T_w = M e^(R/M) (e^((tau + delta)/M) - 1) * T_s / tau, the expected wall
    time of T_s seconds of work checkpointed every tau seconds (continuous in T_s / tau)."""
    return expected_segment_s(interval_s + save_s, restart_s, mtbf_s) * useful_s / interval_s


def expected_spare_wait_s(
    server_rate_per_s: float, repair_s: float, spare_servers: int | None
) -> float:
    """Wait for a replacement server per interruption. Failed servers in repair form an M/M/inf queue:
    their number is Poisson with mean m = lambda_server * t_repair (Erlang); a failure finds all s
    spares in use with probability P(Poisson(m) >= s) and then waits for the first of s + 1 repairs,
    t_repair / (s + 1) on average: wait = P(Poisson(m) >= s) * t_repair / (s + 1). None: ample spares."""
    if spare_servers is None:
        return 0.0
    mean = server_rate_per_s * repair_s
    below = sum(math.exp(-mean) * mean**k / math.factorial(k) for k in range(spare_servers))
    return max(0.0, 1.0 - below) * repair_s / (spare_servers + 1)


def restart_time_s(
    gpus: int, restart: RestartInputs, load_s: float, server_rate_per_s: float
) -> float:
    """R = t_detect + t_spare + t_init_per_gpu * N + t_load: the watchdog's timeout, the wait for a
    spare server (expected_spare_wait_s) or its swap-in, communicator set-up growing with the world
    size N, and the checkpoint reload (goodput.checkpoint.load_time_s)."""
    spare = expected_spare_wait_s(server_rate_per_s, restart.repair_s, restart.spare_servers)
    swap = restart.spare_swap_s if restart.spare_servers is not None else 0.0
    return restart.detect_s + spare + swap + restart.init_s_per_gpu * gpus + load_s


def planned_restart_s(gpus: int, restart: RestartInputs, load_s: float) -> float:
    """A planned interruption (maintenance) is taken at a checkpoint, so it loses no progress and
    needs no failure detection nor spare: R_planned = t_init_per_gpu * N + t_load."""
    return restart.init_s_per_gpu * gpus + load_s


def pause_growth(pauses: list[tuple[float, float]], restart_s: float, mtbf_s: float) -> float:
    """x = sum_k rho_k * E[pause_k]: pauses (planned interruptions, failures ft-dp absorbs) arrive at
    rate rho_k per second of wall time, their own time included, and each lasts c_k, restarting on a
    rollback failure (expected_segment_s(c_k, R, M)); the wall time W of the rest grows to
    W / (1 - x) (a branching sum W (1 + x + x^2 + ...)); x >= 1 never finishes."""
    return sum(rate * expected_segment_s(c, restart_s, mtbf_s) for rate, c in pauses if rate > 0)


def with_pauses_s(wall_s: float, growth: float) -> float:
    """W / (1 - x) (pause_growth); inf for x >= 1."""
    return wall_s / (1.0 - growth) if growth < 1.0 else math.inf


def poisson_quantile(mean: float, q: float) -> int:
    """The smallest n with P(Poisson(mean) <= n) >= q: the pmf summed from 0 with the recurrence
    ln p_n = ln p_(n-1) + ln(mean) - ln(n) (terms below a double's range add nothing)."""
    if mean <= 0:
        return 0
    log_p = -mean
    total = math.exp(log_p)
    n = 0
    while total < q and n < 10 * mean + 100:
        n += 1
        log_p += math.log(mean) - math.log(n)
        total += math.exp(log_p)
    return n
