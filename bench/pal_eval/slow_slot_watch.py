"""What bench/slow_slot.py does while its jobs run: `Watch.tick`, called on every poll of the
replay harness's `run_arm` (pal_eval.replay.harness), in the same thread.

In order, each when it is due:

1. at the change (`change_s` after the replay's start): the jobs' factors file is replaced by one
   with the slot's factor of every class times the ratio (`write_factors`: whole or not at all).
   Every job reads that file once, when its script starts, so the jobs that start from then on
   sleep the ratio longer on the slot; those running go on as they started. The classification
   in the database stays as it was: the benchmark is stale.
2. every `learn_s`: `learn(engine, cfg, apply=True)` (pal_slurm.services.passive, the code of
   `pal gpus learn --apply`) on the placer's database; every flag it opens is kept (`Flag`).
3. once the slot is flagged: `pal gpus quarantine NODE:SLOT --reason fail-slow --apply`, the CLI
   as an administrator runs it (its own process, the cluster's SLURM_CONF, the database), then
   `pal gpus quarantined --format json` for the holder's job id.
4. every `states_s`: Slurm's view of every job (`squeue --states=all`, which keeps an ended job
   MinJobAge = 300 s): each job's last state, the holder's start, and any job other than the
   holder that Slurm shows running on the slot while the holder runs (an intruder).

`tick` returns False, which stops the submissions, `after_s` after the holder took the slot, or
`watch_s` after the change when the slot was never flagged.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pal_eval.replay.harness import ArmRun, factors_path, write_factors
from pal_eval.slow_slot_model import Factors, Flag, Slot, slot_name, slowed
from pal_slurm.errors import PalError, SlurmError
from pal_slurm.placer.ledger import job_gpus
from pal_slurm.slurm import parse_json
from pal_slurm.slurm.command import SQUEUE_ALL_JOBS_JSON, run_command

log = logging.getLogger(__name__)

#: how many times the quarantine is asked for when the command fails
QUARANTINE_TRIES = 3


@dataclass(frozen=True)
class Timing:
    """When things happen, real seconds (the change after the replay's start; the rest intervals)."""

    k: float  # real seconds per trace hour
    change_s: float
    learn_s: float
    watch_s: float
    after_s: float
    states_s: float = 10.0


@dataclass
class Watch:
    """The experiment's state while the arm runs (module doc); `tick` is the harness's hook."""

    slot: Slot
    ratio: float
    timing: Timing
    work_dir: Path  # the arm's folder: its factors file
    factors: Factors  # the classification's, what the jobs sleep by before the change
    env: Mapping[str, str]  # reaches the cluster
    pal: list[str]  # `python -m pal_slurm --config FILE`: the CLI on the arm's database
    learn: Callable[[], Any]  # one `pal gpus learn --apply`; its LearnOutcome
    say: Callable[[str], None]
    t0: float | None = None
    changed_at: float | None = None
    flags: list[Flag] = field(default_factory=list)
    learns: list[dict[str, Any]] = field(default_factory=list)
    asked: list[dict[str, Any]] = field(default_factory=list)  # each quarantine command, its output
    holder: str | None = None
    holder_start: float | None = None
    states: dict[str, str] = field(default_factory=dict)
    intruders: dict[str, float] = field(default_factory=dict)  # job id -> first seen on the held slot
    _next_learn: float = 0.0
    _next_states: float = 0.0
    _quarantine: subprocess.Popen[str] | None = None

    def hours(self, t: float) -> float:
        """Trace hours since the replay's start."""
        return (t - (self.t0 or t)) / self.timing.k

    def tick(self, run: ArmRun, now: float) -> bool:
        if self.t0 is None:
            self.t0 = run.t0
            self._next_learn = run.t0 + self.timing.learn_s
        if self.changed_at is None and now - self.t0 >= self.timing.change_s:
            self.change(now)
        if now >= self._next_learn:
            self._next_learn = now + self.timing.learn_s
            self.learn_now(now)
        self.quarantine_progress(now)
        if now >= self._next_states:
            self._next_states = now + self.timing.states_s
            self.read_slurm(now)
        return not self.done(now)

    def change(self, now: float) -> None:
        write_factors(factors_path(self.work_dir), slowed(self.factors, self.slot, self.ratio))
        self.changed_at = time.time()
        self.say(f"[h {self.hours(now):5.1f}] {slot_name(self.slot)} turns {self.ratio:g}x slow: the factors file "
                 "is replaced, jobs starting from now sleep that much longer on it (the database keeps its benchmark)")

    def learn_now(self, now: float) -> None:
        from sqlalchemy.exc import SQLAlchemyError

        try:
            outcome = self.learn()
        except (PalError, SQLAlchemyError) as exc:  # the placer writing its ledger at that moment: next time
            self.say(f"[h {self.hours(now):5.1f}] pal gpus learn --apply failed ({exc}); trying again")
            return
        seen = time.time()
        slots = {u: (n, int(m)) for u, (n, m) in outcome.gpus.items()}
        opened = [Flag(slots[f.gpu], f.job_class, f.at, seen, f.jobs[-1] if f.jobs else "",
                       tuple(slots[g] for g in f.with_gpus if g in slots), f.passive_factor, f.benchmark_factor)
                  for f in outcome.opened if f.gpu in slots]
        self.flags.extend(opened)
        self.learns.append({"at_trace_h": self.hours(seen), "runs": outcome.runs, "estimates": outcome.stored,
                            "opened": [slot_name(f.slot) for f in opened]})
        if not opened:
            self.say(f"[h {self.hours(seen):5.1f}] pal gpus learn --apply: {outcome.runs} finished jobs, "
                     f"{outcome.stored} estimates, {len(self.flags)} flags so far")
        for f in opened:
            self.say(f"[h {self.hours(seen):5.1f}] fail-slow flag opened: {slot_name(f.slot)} (class {f.job_class}, "
                     f"crossed at the end of job {f.crossing}, h {self.hours(f.at):.1f}; its jobs' pace "
                     f"{f.passive:.2f}, benchmark {f.benchmark:.2f}"
                     + (f"; with {', '.join(slot_name(s) for s in f.with_slots)}" if f.with_slots else "") + ")")
        if any(f.slot == self.slot for f in self.flags) and self._may_ask():
            self.ask_quarantine(now)

    def _may_ask(self) -> bool:
        return (self.holder is None and self._quarantine is None and len(self.asked) < QUARANTINE_TRIES
                and not any(a["rc"] == 0 for a in self.asked))

    def ask_quarantine(self, now: float) -> None:
        argv = [*self.pal, "gpus", "quarantine", slot_name(self.slot), "--reason", "fail-slow", "--apply"]
        self.say(f"[h {self.hours(now):5.1f}] $ pal gpus quarantine {slot_name(self.slot)} --reason fail-slow --apply")
        self._quarantine = subprocess.Popen(argv, env={**os.environ, **self.env}, stdout=subprocess.PIPE,
                                            stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL)
        self.asked.append({"at": time.time(), "argv": argv, "rc": None})

    def quarantine_progress(self, now: float) -> None:
        """The quarantine command, once it has ended: its output kept, the holder's id read."""
        proc = self._quarantine
        if proc is None or proc.poll() is None:
            return
        out, err = proc.communicate()
        self._quarantine = None
        self.asked[-1].update(rc=proc.returncode, stdout=out, stderr=err)
        for line in (out + err).strip().splitlines():
            self.say(f"[h {self.hours(now):5.1f}]   {line}")
        if proc.returncode == 0:
            self.holder = self.holder_id()

    def holder_id(self) -> str | None:
        """The holder of the slot, as `pal gpus quarantined --format json` shows it."""
        proc = run_command([*self.pal, "gpus", "quarantined", "--format", "json"], timeout=60,
                           env={**os.environ, **self.env}, check=False)
        try:
            rows = json.loads(proc.stdout or "[]")  # one object per GPU out of service
        except ValueError:
            rows = []
        return next((str(r["holder_job"]) for r in rows if r.get("gpu") == slot_name(self.slot)), None)

    def read_slurm(self, now: float) -> None:
        """Every job's state as Slurm shows it; the holder's start; jobs on the slot beside the holder."""
        try:
            doc = parse_json.load(run_command(SQUEUE_ALL_JOBS_JSON, timeout=60, env=self.env).stdout,
                                  "squeue --json")
        except SlurmError as exc:
            log.warning("squeue not read (%s); trying again", exc)
            return
        jobs = parse_json.jobs_from_doc(doc)
        self.states.update((j.job_id, j.state) for j in jobs)
        holder = next((j for j in jobs if j.job_id == self.holder), None)
        if holder is not None and holder.running and self.holder_start is None and self.slot in job_gpus(holder):
            self.holder_start = float(holder.start_time or now)
            self.say(f"[h {self.hours(self.holder_start):5.1f}] holder job {self.holder} runs on "
                     f"{slot_name(self.slot)}: it is out of service")
        if holder is not None and holder.running:
            for j in jobs:
                if j.job_id != self.holder and j.running and self.slot in job_gpus(j):
                    self.intruders.setdefault(j.job_id, now)

    def done(self, now: float) -> bool:
        """Whether the submissions stop: `after_s` after the holder took the slot (or after it was
        asked for, when the holder never ran), or `watch_s` after a change never flagged."""
        t = self.timing
        if self.holder_start is not None:
            return now >= self.holder_start + t.after_s
        if self.asked:
            return now >= self.asked[0]["at"] + 2 * t.after_s
        return self.changed_at is not None and now >= self.changed_at + t.watch_s


def pal_cli(config: Path) -> list[str]:
    """The pal CLI as a site runs it, with this configuration (its database)."""
    return [sys.executable, "-m", "pal_slurm", "--config", str(config)]
