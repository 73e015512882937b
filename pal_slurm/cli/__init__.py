"""The `pal` command line: commands parse input, call the use cases (each area's `service`:
ingest/, classification/, report/, placer/), and render."""
