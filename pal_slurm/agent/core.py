"""The node agent's sampling cycle: jobs from the mapping directory, one sample per GPU, aggregates.

One cycle reads as the algorithm:

1. sync jobs: new mapping files start a job's aggregate, ended or vanished ones finish it
   and queue its profile for the database; every 10 s, GPUs running a known job's
   processes are added to it (the prolog may list too few: see `procmap`);
2. sample every GPU once through the GPU interface (a failing GPU is counted and the
   others go on), feeding the GPU's gauges, its job's aggregate and the drift monitor;
3. a drift episode queues a GPU flag.

Everything the cycle touches is bounded: one aggregate per running job, one gauge set and
one drift state per GPU, a bounded queue of pending writes. No database, HTTP or clock
call happens here except through injected objects, so the bench can run an hour of
cycles in seconds with a simulated clock.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Literal

from pal_slurm.agent.aggregate import JobAggregate
from pal_slurm.agent.drift import DriftMonitor
from pal_slurm.agent.jobmap import JobMapDir, JobMapEntry
from pal_slurm.agent.metrics import AgentHealth, GpuGauges
from pal_slurm.agent.pending import PendingQueue
from pal_slurm.agent.procmap import read_job_id
from pal_slurm.agent.job_profile_store import GpuFlagRecord, NodeFacts, WriteItem
from pal_slurm.gpu.interface import GpuBackend, GpuError

__all__ = ["Agent", "Device"]

log = logging.getLogger(__name__)

GpuIdKind = Literal["minor", "index"]
_INVENTORY_RETRY_S = 60.0


@dataclass(frozen=True, slots=True)
class Device:
    index: int
    uuid: str
    minor: int | None
    nvml_index: int | None
    model: str


@dataclass
class _ActiveJob:
    entry: JobMapEntry
    agg: JobAggregate
    indices: tuple[int, ...]


class Agent:
    """State of one node's agent; `cycle()` is called once per interval by the service loop."""

    def __init__(self, backend: GpuBackend, node: str, jobmap: JobMapDir, queue: PendingQueue[WriteItem],
                 health: AgentHealth, drift: DriftMonitor, *, gpu_id: GpuIdKind = "minor",
                 clock: Callable[[], float] = time.time,
                 on_jobs: Callable[[Mapping[int, JobMapEntry]], None] | None = None,
                 restored: Mapping[tuple[str, str, float], JobAggregate] | None = None,
                 job_of_pid: Callable[[int], str | None] | None = read_job_id,
                 attribute_every_s: float = 10.0) -> None:
        self.backend = backend
        self.node = node
        self.jobmap = jobmap
        self.queue = queue
        self.health = health
        self.drift = drift
        self.gpu_id = gpu_id
        self.clock = clock
        self._on_jobs = on_jobs
        self._restored = dict(restored or {})
        self.devices: dict[int, Device] = {}
        self.gauges: dict[int, GpuGauges] = {}
        self.facts = NodeFacts()
        self._jobs: dict[str, _ActiveJob] = {}
        self._by_index: dict[int, JobAggregate] = {}
        self._uninventoried: set[int] = set()  # GPUs whose inventory failed: retried every minute
        self._failing: set[int] = set()  # GPUs whose last sample failed: warned once until they answer
        self._unknown_ids_warned: set[tuple[str, int]] = set()
        self._inventory_due = 0.0
        self._job_of_pid = job_of_pid
        self._attribute_every_s = attribute_every_s
        self._attribute_due = 0.0
        self.inventory()

    # -- devices -------------------------------------------------------------------------

    def inventory(self) -> None:
        """Learn (or retry) each GPU's UUID and minor number; a GPU that fails is retried later."""
        count = self.backend.device_count()
        for index in range(count):
            if index in self.devices:
                continue
            try:
                inv = self.backend.inventory(index)
            except GpuError as exc:
                if index not in self._uninventoried:
                    log.warning("cannot inventory GPU %d (retrying every %.0f s): %s", index, _INVENTORY_RETRY_S, exc)
                    self._uninventoried.add(index)
                continue
            self._uninventoried.discard(index)
            self.devices[index] = Device(index, inv.uuid, inv.minor_number, inv.nvml_index, inv.name)
            self.gauges[index] = GpuGauges(inv.uuid, inv.minor_number, inv.name)
        self._inventory_due = self.clock() + _INVENTORY_RETRY_S

    def uuids(self) -> list[str]:
        """This node's GPU UUIDs (called from the DB thread: copies the dict's values atomically)."""
        return [d.uuid for d in list(self.devices.values())]

    def set_facts(self, facts: NodeFacts) -> None:
        """New facts from the database (the DB worker thread calls this; one reference swap)."""
        self.facts = facts
        mine = set(self.uuids())
        self.drift.set_expected({u: c for u, c in facts.expected_clock.items() if u in mine})

    def _device_for(self, gpu_id: int) -> Device | None:
        for dev in self.devices.values():
            key = dev.minor if self.gpu_id == "minor" else (dev.nvml_index if dev.nvml_index is not None else dev.index)
            if key == gpu_id:
                return dev
        return None

    # -- jobs ----------------------------------------------------------------------------

    def _start(self, name: str, entry: JobMapEntry) -> None:
        devices = []
        for gpu_id in entry.gpus:
            dev = self._device_for(gpu_id)
            if dev is None:
                if (entry.job_id, gpu_id) not in self._unknown_ids_warned:
                    self._unknown_ids_warned.add((entry.job_id, gpu_id))
                    log.warning("job %s: GPU id %d (%s) is not a GPU of this node; not profiled there",
                                entry.job_id, gpu_id, self.gpu_id)
                continue
            devices.append(dev)
        agg = self._restored.pop((name, entry.job_id, entry.start), None)
        if agg is None:
            agg = JobAggregate(entry.job_id, entry.user, entry.start, tuple(d.uuid for d in devices))
        self._jobs[name] = _ActiveJob(entry, agg, tuple(d.index for d in devices))
        log.info("job %s started on GPUs %s", entry.job_id, ",".join(str(g) for g in entry.gpus) or "-")

    def _finish(self, name: str, end: float) -> None:
        job = self._jobs.pop(name)
        self._unknown_ids_warned = {k for k in self._unknown_ids_warned if k[0] != job.entry.job_id}
        record = job.agg.profile(self.node, end)
        if record.samples == 0:
            log.info("job %s ended with no samples on this node; no profile", job.entry.job_id)
            return
        self.queue.put(record)
        self.health.profiles_queued += 1
        log.info("job %s ended: %d samples, GPU utilisation %.0f %% mean; profile queued",
                 job.entry.job_id, record.samples, record.gpu_util_mean or 0.0)

    def sync_jobs(self, now: float) -> None:
        scan = self.jobmap.scan()
        self.health.jobmap_corrupt_files = scan.corrupt
        if not scan.changed:
            return
        for name, entry in scan.entries.items():
            active = self._jobs.get(name)
            if active is not None and active.entry.key != entry.key:
                self._finish(name, now)  # the id came back with a new start (requeue): a new run
                active = None
            if entry.end is not None:
                if active is not None:
                    self._finish(name, entry.end)
                self.jobmap.remove(name)
            elif active is None:
                self._start(name, entry)
        for name in [n for n in self._jobs if n not in scan.entries]:
            self._finish(name, now)  # file removed without an end mark: the job is gone
        self._rebuild_index()

    def _rebuild_index(self) -> None:
        self._by_index = {i: job.agg for job in self._jobs.values() for i in job.indices}
        self.health.active_jobs = len(self._jobs)
        for index, gauges in self.gauges.items():
            gauges.job_active = index in self._by_index
        if self._on_jobs is not None:
            self._on_jobs({i: job.entry for job in self._jobs.values() for i in job.indices})

    def attribute_processes(self) -> int:
        """Add GPUs whose processes belong to a running job the prolog listed without them.

        See pal_slurm.agent.procmap for why (22.05's Prolog sees one GPU of a multi-type job).
        Returns how many GPUs were added.
        """
        if self._job_of_pid is None or not self._jobs:
            return 0
        by_id = {job.entry.job_id: job for job in self._jobs.values()}
        added = 0
        for index, dev in self.devices.items():
            if index in self._by_index:
                continue
            try:
                processes = self.backend.processes(index)
            except GpuError:
                continue
            for proc in processes:
                job = by_id.get(self._job_of_pid(proc.pid) or "")
                if job is not None:
                    job.indices = (*job.indices, index)
                    job.agg.add_gpu(dev.uuid)
                    log.info("job %s also uses GPU %d (%s): seen from its process %d", job.entry.job_id,
                             index, dev.uuid, proc.pid)
                    added += 1
                    break
        if added:
            self._rebuild_index()
        return added

    def active_aggregates(self) -> dict[str, JobAggregate]:
        """File name -> aggregate of the running jobs (for the state file on shutdown)."""
        return {name: job.agg for name, job in self._jobs.items()}

    # -- the cycle -----------------------------------------------------------------------

    def cycle(self) -> None:
        started = time.perf_counter()
        now = self.clock()
        if self._uninventoried and now >= self._inventory_due:
            self.inventory()
        self.sync_jobs(now)
        if self._attribute_every_s > 0 and now >= self._attribute_due:
            self._attribute_due = now + self._attribute_every_s
            self.attribute_processes()
        for index, dev in self.devices.items():
            gauges = self.gauges[index]
            try:
                s = self.backend.sample(index)
            except GpuError as exc:
                gauges.errors += 1
                self.health.sample_errors += 1
                if index not in self._failing:
                    log.warning("sampling failed (the other GPUs go on): %s", exc)
                    self._failing.add(index)
                continue
            if index in self._failing:
                self._failing.discard(index)
                log.warning("GPU %d (%s) answers again", index, dev.uuid)
            gauges.samples += 1
            util, mem = s.utilization_gpu, s.utilization_memory
            gauges.sm_clock_mhz, gauges.power_w, gauges.temperature_c = s.sm_clock_mhz, s.power_w, s.temperature_c
            gauges.utilization_gpu, gauges.utilization_memory = util, mem
            gauges.count_throttle(s.throttle_reasons)
            agg = self._by_index.get(index)
            if agg is not None:
                agg.add(util, getattr(s, "sm_active", None), mem, s.power_w, s.sm_clock_mhz)
            event = self.drift.observe(dev.uuid, s.timestamp, util, s.sm_clock_mhz)
            if event is not None:
                gauges.drift_flagged = True
                detail = event.describe(self.drift.settings)
                log.warning("GPU %s (%s): %s", dev.uuid, self.node, detail)
                self.queue.put(GpuFlagRecord(dev.uuid, self.node, "clock_drift", event.expected_mhz,
                                             round(event.observed_mhz, 1), detail,
                                             datetime.fromtimestamp(event.at, UTC)))
            elif gauges.drift_flagged and not self.drift.flagged(dev.uuid):
                gauges.drift_flagged = False
        self.health.samples = sum(g.samples for g in self.gauges.values())
        self.health.cycles += 1
        self.health.pending_writes = len(self.queue)
        self.health.dropped_writes = self.queue.dropped
        self.health.last_cycle_s = time.perf_counter() - started
