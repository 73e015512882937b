"""The class rules as the placer and the filter see them: the admin's rules and the learned
classes, read in one query per table into the pure `ClassRuleTable` (pal_slurm.jobs.rules)."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from pal_slurm.db.models import ClassRule, JobSensitivity
from pal_slurm.jobs.rules import AdminRule, ClassRuleTable

__all__ = ["load_class_rules"]


def load_class_rules(session: Session) -> ClassRuleTable:
    """Every admin rule and every learned (fingerprint, user, name, class), as one table."""
    admin = [AdminRule(r.id, r.user, r.name, r.account, r.partition, r.job_class, r.note)
             for r in session.scalars(select(ClassRule))]
    learned = [(fp, user, name, job_class) for fp, user, name, job_class in session.execute(
        select(JobSensitivity.fingerprint, JobSensitivity.user, JobSensitivity.name, JobSensitivity.job_class))]
    return ClassRuleTable.build(admin, learned)
