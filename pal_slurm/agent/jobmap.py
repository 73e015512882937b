"""Which Slurm job uses which GPU: the files spank_hooks/pal-prolog.sh and pal-epilog.sh write.

The way dcgm-exporter's HPC job mapping works: Slurm's Prolog (root, in slurmd, before the
job starts on the node) knows the job's GPUs and writes them to a directory the agent
watches; no Slurm command runs on the node and the agent never asks slurmctld. Here it is
one small file per job, `<jobid>.job`, written atomically (temporary file + rename), so the
agent never reads half a file. The Epilog appends `end=`; the agent writes the job's
profile and removes the file.

Format `pal-jobmap/1`, one `key=value` per line (the first `=` splits; later lines win)::

    format=pal-jobmap/1
    job_id=4711
    user=alice
    gpus=0,2          # SLURM_JOB_GPUS (else CUDA_VISIBLE_DEVICES): GPU ids on this node
    start=1764495000  # Unix seconds
    end=1764498600    # only once the job ended (empty: the file's mtime)
    partition=gpu  account=proj1  name=train  uid=1000   # when Slurm gave them

Parsing is pure (`parse_jobmap`); `JobMapDir` is the adapter that scans the directory,
re-reads only files whose (mtime, size) changed, and warns once per corrupt file version.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from pal_slurm.errors import InputError

__all__ = ["FORMAT", "JobMapDir", "JobMapEntry", "JobMapScan", "expand_dir", "parse_jobmap"]

log = logging.getLogger(__name__)

FORMAT = "pal-jobmap/1"
SUFFIX = ".job"
MAX_FILE_BYTES = 16384  # a mapping file is ~200 bytes; anything bigger is not ours
_MAX_GPU_ID = 1023


@dataclass(frozen=True, slots=True)
class JobMapEntry:
    """One job on this node: its id, owner, GPU ids (device minor numbers by default) and times."""

    job_id: str
    user: str | None
    gpus: tuple[int, ...]
    start: float
    end: float | None = None
    partition: str | None = None
    account: str | None = None
    name: str | None = None

    @property
    def key(self) -> tuple[str, float]:
        """A job id is reused after a requeue or a controller reset; with its start it is not."""
        return (self.job_id, self.start)


def _parse_gpus(value: str, source: str, line: int) -> tuple[int, ...]:
    """`0,2`, `0-3`, `GPU-...` is refused (UUIDs are not written by our prolog); empty -> ()."""
    out: list[int] = []
    for part in (p.strip() for p in value.split(",")):
        if not part:
            continue
        lo_hi = part.split("-", 1)
        if not all(x.isdigit() for x in lo_hi):
            raise InputError(f"gpus: {part!r} is not a GPU id or id range", source=source, line=line)
        lo, hi = int(lo_hi[0]), int(lo_hi[-1])
        if hi < lo or hi > _MAX_GPU_ID:
            raise InputError(f"gpus: bad range {part!r}", source=source, line=line)
        out.extend(range(lo, hi + 1))
    return tuple(sorted(set(out)))


def _number(value: str, key: str, source: str, line: int) -> float:
    try:
        number = float(value)
    except ValueError:
        raise InputError(f"{key}: {value!r} is not a number of seconds", source=source, line=line) from None
    if not 0 < number < 1e11:
        raise InputError(f"{key}: {value!r} is not a Unix time", source=source, line=line)
    return number


def parse_jobmap(text: str, source: str = "<jobmap>", *, fallback_start: float | None = None) -> JobMapEntry:
    """One mapping file's content -> JobMapEntry; InputError naming file:line on anything wrong.

    `fallback_start` (the file's mtime) is used when the prolog could not write `start`.
    """
    fields: dict[str, tuple[str, int]] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        key, sep, value = line.partition("=")
        if not sep or not key.strip().replace("_", "").isalnum():
            raise InputError(f"not a key=value line: {line[:60]!r}", source=source, line=number)
        fields[key.strip()] = (value.strip(), number)
    fmt = fields.get("format", ("", 0))
    if fmt[0] != FORMAT:
        raise InputError(f"format {fmt[0]!r} is not {FORMAT!r}", source=source, line=fmt[1] or None)
    job_id, job_line = fields.get("job_id", ("", 0))
    if not job_id or not job_id.replace("_", "").isdigit():
        raise InputError(f"job_id {job_id!r} is missing or not a Slurm job id", source=source, line=job_line or None)
    gpus_value, gpus_line = fields.get("gpus", ("", 0))
    gpus = _parse_gpus(gpus_value, source, gpus_line)
    if "start" in fields:
        start = _number(fields["start"][0], "start", source, fields["start"][1])
    elif fallback_start is not None:
        start = fallback_start
    else:
        raise InputError("start is missing", source=source)
    end: float | None = None
    if "end" in fields:  # present = ended; empty when the epilog had no clock: the file's mtime
        value, line = fields["end"]
        end = _number(value, "end", source, line) if value else fallback_start
        if end is None:
            raise InputError("end is empty and the file has no mtime", source=source, line=line)

    def text_field(key: str) -> str | None:
        value = fields.get(key, ("", 0))[0]
        return value or None

    return JobMapEntry(job_id=job_id, user=text_field("user"), gpus=gpus, start=start, end=end,
                       partition=text_field("partition"), account=text_field("account"), name=text_field("name"))


def expand_dir(template: str | os.PathLike[str], node: str) -> Path:
    """`%n` in the configured directory is the node name (several slurmds on one test host)."""
    return Path(str(template).replace("%n", node))


@dataclass(frozen=True, slots=True)
class JobMapScan:
    """The current jobs (file name -> entry) and how many files were skipped as corrupt."""

    entries: Mapping[str, JobMapEntry]
    corrupt: int
    changed: bool


class JobMapDir:
    """Reads the mapping directory incrementally: a file is parsed again only when it changed.

    A missing directory is normal (no job ran since boot) and gives no jobs. A corrupt file
    is skipped with one warning per version of the file (same name, mtime and size), so a
    broken file does not flood the journal once a second.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        # file name -> (mtime_ns, size, entry or None when unreadable/corrupt, corrupt?)
        self._seen: dict[str, tuple[int, int, JobMapEntry | None, bool]] = {}
        self.corrupt_total = 0

    def scan(self) -> JobMapScan:
        try:
            listing = [(e.name, e) for e in os.scandir(self.path) if e.name.endswith(SUFFIX)]
        except FileNotFoundError:
            listing = []
        except OSError as exc:
            log.warning("cannot read the job mapping directory %s: %s", self.path, exc.strerror or exc)
            listing = []
        changed = False
        seen: dict[str, tuple[int, int, JobMapEntry | None, bool]] = {}
        for name, entry in listing:
            try:
                st = entry.stat()
            except OSError:
                continue  # removed between listing and stat
            old = self._seen.get(name)
            if old is not None and old[0] == st.st_mtime_ns and old[1] == st.st_size:
                seen[name] = old
                continue
            changed = True
            seen[name] = (st.st_mtime_ns, st.st_size, *self._read(self.path / name, st.st_size, st.st_mtime))
        if set(seen) != set(self._seen):
            changed = True
        self._seen = seen
        entries = {name: v[2] for name, v in seen.items() if v[2] is not None}
        return JobMapScan(entries=entries, corrupt=sum(1 for v in seen.values() if v[3]), changed=changed)

    def _read(self, path: Path, size: int, mtime: float) -> tuple[JobMapEntry | None, bool]:
        """(entry, False), or (None, True) for a corrupt file; (None, False) when it vanished."""
        try:
            if size > MAX_FILE_BYTES:
                raise InputError(f"{size} bytes is too big for a job mapping file", source=str(path))
            text = path.read_text(encoding="utf-8", errors="replace")
            return parse_jobmap(text, str(path), fallback_start=mtime), False
        except FileNotFoundError:
            return None, False
        except (InputError, OSError) as exc:
            self.corrupt_total += 1
            log.warning("skipping job mapping file: %s", exc)
            return None, True

    def remove(self, name: str) -> None:
        """Delete a finished job's file (its profile was queued); a missing file is fine."""
        try:
            (self.path / name).unlink()
        except FileNotFoundError:
            pass
        except OSError as exc:
            log.warning("cannot remove %s: %s", self.path / name, exc.strerror or exc)
        self._seen.pop(name, None)
