"""Database side of job sensitivity: identities, admin rules, and learning classes from job profiles.

`learn` recomputes job_sensitivity from scratch every time (it is cheap: one row per
job profile, grouped by fingerprint), so the table always says exactly what the current
profiles and thresholds give, and a changed threshold needs no migration of old verdicts.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

from sqlalchemy import select
from sqlalchemy.orm import Session

from pal_slurm.config import PalConfig
from pal_slurm.db.class_rules_store import load_class_rules
from pal_slurm.db.models import ClassRule, JobIdentity, JobProfile, JobSensitivity
from pal_slurm.errors import InputError
from pal_slurm.jobs.fingerprint import fingerprint
from pal_slurm.jobs.rules import AdminRule
from pal_slurm.jobs.runtimes import RuntimeRule, learn_runtimes
from pal_slurm.jobs.sensitivity import (
    ProfileMetrics,
    SensitivityRule,
    Verdict,
    classify,
)

__all__ = ["LearnSummary", "RuleChange", "add_rule", "delete_rule", "put_rule", "learn", "learned_classes", "list_rules", "record_identity",
           "sensitivity_rule"]

log = logging.getLogger(__name__)

_MAX_NAME = 255
_MAX_USER = 128


def sensitivity_rule(cfg: PalConfig) -> SensitivityRule:
    """The learning rule of the configuration ([jobs] thresholds against the configured classes)."""
    return SensitivityRule.build(list(cfg.job_classes), cfg.jobs.thresholds, min_samples=cfg.jobs.min_samples,
                                 history=cfg.jobs.history)


def record_identity(session: Session, slurm_job_id: str, user: str, name: str, command: str,
                    seen_at: datetime | None = None) -> JobIdentity:
    """Upsert one GPU job's identity (the placement daemon calls this for every GPU job it sees).

    Idempotent: seeing the same job again changes nothing. A job id that comes back with a
    different user, name or command (ids restart after a controller reset) is overwritten.
    """
    user, name = user[:_MAX_USER], name[:_MAX_NAME]
    fp = fingerprint(user, name, command)
    row = session.scalars(select(JobIdentity).where(JobIdentity.slurm_job_id == str(slurm_job_id))).first()
    if row is None:
        row = JobIdentity(slurm_job_id=str(slurm_job_id), user=user, name=name, command=command, fingerprint=fp,
                          first_seen=seen_at or datetime.now(UTC))
        session.add(row)
    elif row.fingerprint != fp or row.user != user or row.name != name:
        row.user, row.name, row.command, row.fingerprint = user, name, command, fp
        row.first_seen = seen_at or datetime.now(UTC)
    session.flush()
    return row


def record_identities(session: Session, jobs: Sequence[tuple[str, str, str, str]],
                      seen_at: datetime | None = None) -> int:
    """record_identity for many (job id, user, name, command) at once: one query for the
    ids already known, one bulk insert for the rest (the placer may see hundreds per cycle).
    Returns the rows inserted or updated."""
    when = seen_at or datetime.now(UTC)
    wanted = {}
    for job_id, user, name, command in jobs:
        user, name = user[:_MAX_USER], name[:_MAX_NAME]
        wanted[str(job_id)] = (user, name, command, fingerprint(user, name, command))
    if not wanted:
        return 0
    known: dict[str, JobIdentity] = {}
    ids = list(wanted)
    for i in range(0, len(ids), 500):
        for row in session.scalars(select(JobIdentity).where(JobIdentity.slurm_job_id.in_(ids[i:i + 500]))):
            known[row.slurm_job_id] = row
    changed = 0
    for job_id, (user, name, command, fp) in wanted.items():
        row = known.get(job_id)
        if row is None:
            session.add(JobIdentity(slurm_job_id=job_id, user=user, name=name, command=command, fingerprint=fp,
                                    first_seen=when))
            changed += 1
        elif row.fingerprint != fp or row.user != user or row.name != name:
            row.user, row.name, row.command, row.fingerprint, row.first_seen = user, name, command, fp, when
            changed += 1
    session.flush()
    return changed


def _clean(value: str | None, what: str) -> str | None:
    if value is None:
        return None
    if not value.strip() or value != value.strip():
        raise InputError(f"--{what} {value!r}: empty or surrounded by spaces (rules match exactly)")
    if "\n" in value or "\0" in value:
        raise InputError(f"--{what}: must be one line")
    return value


@dataclass(frozen=True)
class RuleChange:
    """What `put_rule` did: added `rule`, changed an existing rule's class (`replaced_class`, the
    class it gave before), or nothing (`unchanged`: the same rule exists)."""

    rule: AdminRule
    replaced_class: str | None = None
    unchanged: bool = False


def add_rule(session: Session, job_class: str, classes: Sequence[str], *, user: str | None = None,
             name: str | None = None, account: str | None = None, partition: str | None = None,
             note: str = "") -> AdminRule:
    """A new admin rule; at least one match field, and a configured class."""
    return put_rule(session, job_class, classes, user=user, name=name, account=account, partition=partition,
                    note=note).rule


def put_rule(session: Session, job_class: str, classes: Sequence[str], *, user: str | None = None,
             name: str | None = None, account: str | None = None, partition: str | None = None,
             note: str = "", replace: bool = False) -> RuleChange:
    """An admin rule; at least one match field, and a configured class.

    Two rules with the same fields and different classes would leave the job's class to the
    older one, silently: such a rule is refused, naming the existing one, unless `replace`
    (then the existing rule gives the new class). The same rule again changes nothing."""
    wanted = job_class.strip()
    if wanted not in classes and wanted.upper() in classes:
        wanted = wanted.upper()
    if wanted not in classes:
        raise InputError(f"--class {job_class!r} is not a configured job class ({', '.join(classes)})")
    fields = {k: _clean(v, k) for k, v in (("user", user), ("name", name), ("account", account),
                                            ("partition", partition))}
    if all(v is None for v in fields.values()):
        raise InputError("a rule needs at least one of --user, --name, --account, --partition "
                         "(a rule matching every job would hide everything learned)")
    same = session.scalars(select(ClassRule).where(*(getattr(ClassRule, k).is_(None) if v is None
                                                     else getattr(ClassRule, k) == v for k, v in fields.items()))
                           .order_by(ClassRule.id)).first()
    if same is not None:
        existing = _admin(same)
        if same.job_class == wanted:
            return RuleChange(existing, unchanged=True)
        if not replace:
            raise InputError(f"{existing.rule_id} already gives these jobs class {same.job_class} "
                             f"({_fields_text(fields)}): give --replace to make it class {wanted}, or "
                             f"`pal jobs rule delete {existing.rule_id}` first")
        before = same.job_class
        same.job_class, same.note = wanted, note or same.note
        session.flush()
        return RuleChange(_admin(same), replaced_class=before)
    row = ClassRule(job_class=wanted, note=note, **fields)
    session.add(row)
    session.flush()
    return RuleChange(_admin(row))


def _admin(row: ClassRule) -> AdminRule:
    return AdminRule(row.id, row.user, row.name, row.account, row.partition, row.job_class, row.note)


def _fields_text(fields: dict[str, str | None]) -> str:
    return ", ".join(f"{k} {v}" for k, v in fields.items() if v is not None)


def list_rules(session: Session) -> list[tuple[AdminRule, datetime]]:
    """Admin rules in the order the filter tries them, with their creation time."""
    created = {r.id: r.created_at for r in session.scalars(select(ClassRule))}
    return [(rule, created[rule.id]) for rule in load_class_rules(session).admin]


def delete_rule(session: Session, rule_id: int) -> None:
    row = session.get(ClassRule, rule_id)
    if row is None:
        raise InputError(f"no class rule {rule_id} (rule-{rule_id}; see `pal jobs rule list`)")
    session.delete(row)
    session.flush()


@dataclass(frozen=True)
class LearnSummary:
    profiles: int  # job profiles with a known identity
    unidentified: int  # profiles of jobs the daemon never recorded
    fingerprints: int
    classified: int
    by_class: dict[str, int] = field(default_factory=dict)
    removed: int = 0


def _backfill_fingerprints(session: Session) -> None:
    """Copy the fingerprint of a job's identity onto its profiles (the agent does not know it)."""
    stmt = (select(JobProfile, JobIdentity.fingerprint)
            .join(JobIdentity, JobIdentity.slurm_job_id == JobProfile.slurm_job_id)
            .where((JobProfile.fingerprint.is_(None)) | (JobProfile.fingerprint != JobIdentity.fingerprint)))
    for profile, fp in session.execute(stmt):
        profile.fingerprint = fp
    session.flush()


def learn(session: Session, rule: SensitivityRule, now: datetime | None = None) -> LearnSummary:
    """Recompute job_sensitivity from job_profiles joined with job_identities (newest profiles first)."""
    now = now or datetime.now(UTC)
    _backfill_fingerprints(session)
    identities = {fp: (user, name) for fp, user, name in session.execute(
        select(JobIdentity.fingerprint, JobIdentity.user, JobIdentity.name))}
    groups: dict[str, list[ProfileMetrics]] = {}
    profiles = unidentified = 0
    stmt = select(JobProfile.fingerprint, JobProfile.samples, JobProfile.gpu_util_mean, JobProfile.sm_active_mean,
                  JobProfile.mem_bw_util_mean, JobProfile.power_w_mean).order_by(
        JobProfile.ended_at.desc(), JobProfile.id.desc())
    for fp, samples, util, sm, mem, power in session.execute(stmt):
        if fp is None or fp not in identities:
            unidentified += 1
            continue
        profiles += 1
        groups.setdefault(fp, []).append(ProfileMetrics(samples, util, sm, mem, power))
    verdicts: dict[str, Verdict] = {fp: classify(p, rule) for fp, p in groups.items()}
    existing = {row.fingerprint: row for row in session.scalars(select(JobSensitivity))}
    by_class: dict[str, int] = {}
    removed = 0
    for fp, verdict in verdicts.items():
        row = existing.pop(fp, None)
        if verdict.job_class is None:
            if row is not None:
                session.delete(row)
                removed += 1
            continue
        by_class[verdict.job_class] = by_class.get(verdict.job_class, 0) + 1
        ev = verdict.evidence
        user, name = identities[fp]
        if row is None:
            row = JobSensitivity(fingerprint=fp)
            session.add(row)
        row.user, row.name, row.job_class = user, name, verdict.job_class
        row.compute_score = round(ev.compute_score or 0.0, 4)
        row.jobs, row.samples = ev.jobs, ev.samples
        row.gpu_util_mean, row.sm_active_mean, row.mem_bw_util_mean, row.power_w_mean = (
            _r(ev.gpu_util_mean), _r(ev.sm_active_mean), _r(ev.mem_bw_util_mean), _r(ev.power_w_mean))
        row.updated_at = now
    for row in existing.values():  # fingerprints whose profiles are gone
        session.delete(row)
        removed += 1
    session.flush()
    return LearnSummary(profiles=profiles, unidentified=unidentified, fingerprints=len(groups),
                        classified=sum(by_class.values()), by_class=dict(sorted(by_class.items())), removed=removed)


def _r(value: float | None) -> float | None:
    return None if value is None else round(value, 2)


def learned_classes(session: Session) -> list[dict[str, object]]:
    """Every learned fingerprint with its evidence and whether the filter gets it as a rule."""
    table = load_class_rules(session)
    out: list[dict[str, object]] = []
    for row in session.scalars(select(JobSensitivity).order_by(JobSensitivity.user, JobSensitivity.name,
                                                                 JobSensitivity.fingerprint)):
        group = table.by_name.get((row.user, row.name))
        exported = "yes" if group is not None and group.agreed is not None else "no: scripts disagree"
        out.append({
            "fingerprint": row.fingerprint, "user": row.user, "name": row.name, "class": row.job_class,
            "compute_score": row.compute_score, "jobs": row.jobs, "samples": row.samples,
            "gpu_util_mean": row.gpu_util_mean, "sm_active_mean": row.sm_active_mean,
            "mem_bw_util_mean": row.mem_bw_util_mean, "power_w_mean": row.power_w_mean,
            "updated_at": row.updated_at.isoformat(), "filter_rule": exported,
        })
    return out


def learned_runtimes(session: Session, *, min_jobs: int = 3, history: int = 20, quantile: float = 0.9,
                     max_age_days: float = 90.0, now: datetime | None = None) -> dict[str, float]:
    """fingerprint -> a runtime estimate in seconds learned from the job profiles of past
    jobs with that fingerprint (the agent writes one profile per job and node when it ends).

    A job's runtime is its longest node's duration; the estimate is the rule of
    pal_slurm.jobs.runtimes (the `quantile` of the newest `history` jobs, only for
    fingerprints with at least `min_jobs` of them). Only profiles of the last `max_age_days`
    are read: the placer reloads this every minute, and job_profiles grows by a row per job
    and node for ever.
    """
    rule = RuntimeRule(min_jobs=min_jobs, history=history, quantile=quantile, max_age_days=max_age_days)
    cutoff = rule.cutoff(now or datetime.now(UTC))
    rows = session.execute(select(JobProfile.fingerprint, JobProfile.slurm_job_id, JobProfile.started_at,
                                  JobProfile.duration_s)
                           .where(JobProfile.fingerprint.is_not(None), JobProfile.started_at >= cutoff)).all()
    per_job: dict[tuple[str, str], tuple[datetime, float]] = {}
    for fp, job_id, started, duration in rows:
        key = (fp, job_id)
        prev = per_job.get(key)
        if prev is None or duration > prev[1]:
            per_job[key] = (started, float(duration))
    return learn_runtimes(((fp, started, duration) for (fp, _job), (started, duration) in per_job.items()), rule)
