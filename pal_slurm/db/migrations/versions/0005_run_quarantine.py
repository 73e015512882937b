"""profile_runs.quarantine: why an imported score is kept but not used (pal profile import --keep-suspect)

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-01
"""
from __future__ import annotations

from alembic import op
import sqlalchemy as sa

from pal_slurm.db.migration_ops import add_column


revision = '0005'
down_revision = '0004'
branch_labels = None
depends_on = None


def upgrade() -> None:
    # each operation is skipped where a run that failed midway left it done (MariaDB commits
    # every DDL statement): see pal_slurm.db.migration_ops
    with op.batch_alter_table('profile_runs', schema=None) as batch_op:
        add_column(batch_op, 'profile_runs', sa.Column('quarantine', sa.String(length=255), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('profile_runs', schema=None) as batch_op:
        batch_op.drop_column('quarantine')
