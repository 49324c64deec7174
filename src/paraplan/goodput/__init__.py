"""Time-to-train at scale (issue 36): failures, checkpoints, restarts and energy of a plan.

``inputs`` (sourced defaults in ``defaults.yaml``), ``closed_forms`` (Young / Daly, Poisson failures),
``checkpoint`` (plan-dependent bytes and times), ``montecarlo`` (seeded percentiles), ``energy``,
``time_to_train`` (the combination) and ``plan`` (one estimate's goodput). docs/goodput.md."""
