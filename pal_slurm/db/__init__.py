"""Database adapter: SQLAlchemy 2 models, engine creation, Alembic migrations, and the stores.

The schema is defined and migrated only here (`models`, `migrations`), and the stores here
(`measurement_store` with `gpu_identity`, `classification_store`, `variability_store`, `inventory_store`,
`sensitivity_store`, `class_rules_store`, `history_store`) hand plain dataclasses to the rest:
job identities and profiles, admin class rules and learned classes, the class-rule table the
placer resolves a job's class in (`pal_slurm.jobs.rules`), the imported job history.
This package is not the only one that speaks SQL, though: a program with tables of its own keeps
its queries beside its logic, written against these models (never as SQL text):

- `placer/audit`: the `placements` table the placer writes and `pal explain` reads;
- `agent/job_profile_store`: the node agent's finished job profiles and GPU flags;
- `profiler/run_store`, `profiler/inventory`: a profiling run's failures and the node and GPU
  inventory it upserts;
- `demo/recovery`: reads a stored classification back to check it against a simulated fleet;

Elsewhere SQLAlchemy appears only as an `Engine` passed around or a `SQLAlchemyError` caught
(`pal_slurm.services`, the programs' `service` modules, cli, placer/factors, agent/dbworker, profiler/service), and `config.mask_url` parses
a URL with it to hide the password. Pure modules never import it (tests/test_structure.py).
"""
