"""Reading profile files (PAL artifact CSVs, pal JSON-lines) into ProfileRecords, and `service`,
the import use case that stores them."""
