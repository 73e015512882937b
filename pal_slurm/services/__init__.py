"""The use cases that touch the database, above the pure cores they call and the stores they use.

`classification` runs a classification and stores it; `ingest` imports profile files;
`jobs` imports sacct job history. Each opens its own transaction and checks the schema is
current, so the CLI, the demo and the replay call one function per use case. The pure cores
(pal_slurm.classification, .ingest, .jobs) know nothing of the database; the stores
(pal_slurm.db.*_store) know nothing of files, commands or the order of steps.
"""
