"""The node telemetry agent (`pal agent`): per-job GPU profiles, drift flags, Prometheus metrics.

* `jobmap`: which Slurm job uses which GPU (files of spank_hooks/pal-prolog.sh, pal-epilog.sh);
* `aggregate`, `drift`: bounded per-job aggregates and the clock-drift rule (pure);
* `core`: one sampling cycle; `service`: the timed loop, systemd, state file;
* `pending`, `dbworker`, `job_profile_store`: the bounded write queue and the database thread;
* `metrics`: Prometheus text exposition over http.server; `simload`: load for the sim backend.

See docs/agent.md.
"""
