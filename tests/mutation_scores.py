"""The scores of `make mutation`, per module, and the survivors nobody has explained.

Run from the repository root after `mutmut run` (the Makefile does both). Reads mutmut's
results in mutants/ and prints, per mutated module, the mutants in all and how many the
tests killed, how many survived, timed out or had no test that calls them. Then every
survivor: one that docs/mutation.md lists as equivalent (by name, with the line it changes,
so a renumbered mutant is not excused by its old entry) is counted apart; any other is
printed with its diff, and the exit status is 1. The habit this keeps: a surviving mutant
gets a test that kills it, or a line in docs/mutation.md that says why nothing can (kind
`equivalent`: no input changes what the code does) or why no test is worth it (kind
`accepted`, counted apart so the list of those stays short).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import re
import sys
from collections import Counter
from pathlib import Path

from mutmut.__main__ import get_diff_for_mutant
from mutmut.configuration import config
from mutmut.mutation.data import SourceFileMutationData
from mutmut.stats import status_by_exit_code
from mutmut.utils.file_utils import walk_mutatable_files

COLUMNS = ("killed", "survived", "timeout", "no tests", "other")
KINDS = ("equivalent", "accepted")
#: a row of docs/mutation.md's tables: | `name` | `changed line` | kind | why |
CELL = re.compile(r"(?<!\\)\|")
CODE = re.compile(r"^(`+) ?(.*?) ?\1$")


def equivalents(doc: Path) -> dict[str, tuple[str, str]]:
    """Mutant name -> (the mutated line, stripped; its kind), from the doc's table rows."""
    if not doc.exists():
        return {}
    out = {}
    for line in doc.read_text(encoding="utf-8").splitlines():
        cells = [c.strip() for c in CELL.split(line)]
        if len(cells) < 5 or cells[0] or not cells[1].endswith("`") or "__mutmut_" not in cells[1]:
            continue
        name, code = CODE.match(cells[1]), CODE.match(cells[2])
        if name and code and cells[3] in KINDS:
            out[name.group(2)] = (code.group(2).replace("\\|", "|").strip(), cells[3])
    return out


def diff_of(name: str, path: Path) -> str:
    with contextlib.redirect_stdout(io.StringIO()):
        return get_diff_for_mutant(name, path=path)


def changed_line(diff: str) -> str:
    """The mutant's line as the diff shows it (the first added line, stripped)."""
    added = [ln[1:].strip() for ln in diff.splitlines() if ln.startswith("+") and not ln.startswith("+++")]
    return added[0] if added else ""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--equivalents", type=Path, default=Path("docs/mutation.md"))
    args = parser.parse_args()
    if not Path("mutants").is_dir():
        print("no mutants/: run `make mutation` first", file=sys.stderr)
        return 2
    known = equivalents(args.equivalents)
    config()
    unexplained: list[tuple[str, Path]] = []
    excused: Counter[tuple[str, str]] = Counter()
    print(f"{'module':<40} {'mutants':>7} " + " ".join(f"{c:>8}" for c in COLUMNS)
          + f" {'score':>6} {'equiv.':>6} {'accept.':>7}")
    totals: Counter[str] = Counter()
    for path in walk_mutatable_files():
        data = SourceFileMutationData(path=path)
        data.load()
        if not data.exit_code_by_key:
            continue
        counts: Counter[str] = Counter()
        for name, code in data.exit_code_by_key.items():
            status = status_by_exit_code[code]
            counts[status if status in COLUMNS else "other"] += 1
            if status in ("survived", "no tests"):
                line, kind = known.get(name, ("", ""))
                if kind and changed_line(diff_of(name, path)) == line:
                    excused[(str(path), kind)] += 1
                else:
                    unexplained.append((name, path))
        total = sum(counts.values())
        totals.update(counts)
        totals["total"] += total
        for kind in KINDS:
            totals[kind] += excused[(str(path), kind)]
        score = 100.0 * counts["killed"] / total if total else 100.0
        print(f"{str(path):<40} {total:>7} " + " ".join(f"{counts[c]:>8}" for c in COLUMNS)
              + f" {score:>5.1f}% {excused[(str(path), 'equivalent')]:>6} {excused[(str(path), 'accepted')]:>7}")
    score = 100.0 * totals["killed"] / totals["total"] if totals["total"] else 100.0
    print(f"{'all':<40} {totals['total']:>7} " + " ".join(f"{totals[c]:>8}" for c in COLUMNS)
          + f" {score:>5.1f}% {totals['equivalent']:>6} {totals['accepted']:>7}")
    print("score: killed / mutants; equiv.: survivors docs/mutation.md shows to be equivalent; accept.: survivors "
          "it accepts, with the reason")
    if unexplained:
        print(f"\n{len(unexplained)} mutant(s) that survived or that no test reaches, not listed as equivalent in "
              f"{args.equivalents}:")
        for name, path in unexplained:
            print(f"\n{name}\n{diff_of(name, path)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
