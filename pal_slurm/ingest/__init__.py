"""Reading profile files (PAL artifact CSVs, pal JSON-lines) into ProfileRecords."""
