#!/usr/bin/env python3
"""Time `pal profile import` of the four Longhorn CSVs (PAL artifact, MIT) into a fresh database.

Target: all four files in under 10 s on the 2-core CI machine, as a user imports them: four
`pal profile import` runs, interpreter start-up included (the figure compared with the target).
Usage: bench/import_speed.py [--db URL] [--artifact DIR] [--target-s 10]. Prints one line per file
and the total with the parse and database phases timed separately, in-process (no interpreter
start-up counted), then the whole CLI; exit status 1, with a "TARGET MISSED" line, when the CLI's
total is over the target.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from pal_eval.import_speed import TARGET_S, run
from pal_eval.paths import artifact_dir


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--db", help="database URL [default: a fresh SQLite file]")
    ap.add_argument("--artifact", type=Path, default=artifact_dir())
    ap.add_argument("--target-s", type=float, default=TARGET_S,
                    help=f"the target: the four CLI imports, seconds [{TARGET_S:g}]")
    args = ap.parse_args()
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
