"""placements: who the job belongs to and when it was submitted, started and ended (pal report fairness)

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-01
"""
from __future__ import annotations

from alembic import op
import sqlalchemy as sa
from sqlalchemy.dialects import mysql

from pal_slurm.db.migration_ops import add_column


revision = '0004'
down_revision = '0003'
branch_labels = None
depends_on = None

# Naive UTC everywhere; microseconds kept on MariaDB/MySQL too (as in 0001).
TIMESTAMP = sa.DateTime().with_variant(mysql.DATETIME(fsp=6), "mysql", "mariadb")


def upgrade() -> None:
    # each operation is skipped where a run that failed midway left it done (MariaDB commits
    # every DDL statement): see pal_slurm.db.migration_ops
    with op.batch_alter_table('placements', schema=None) as batch_op:
        add_column(batch_op, 'placements', sa.Column('user', sa.String(length=128), nullable=True))
        add_column(batch_op, 'placements', sa.Column('account', sa.String(length=128), nullable=True))
        add_column(batch_op, 'placements', sa.Column('submitted_at', TIMESTAMP, nullable=True))
        add_column(batch_op, 'placements', sa.Column('started_at', TIMESTAMP, nullable=True))
        add_column(batch_op, 'placements', sa.Column('ended_at', TIMESTAMP, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('placements', schema=None) as batch_op:
        batch_op.drop_column('ended_at')
        batch_op.drop_column('started_at')
        batch_op.drop_column('submitted_at')
        batch_op.drop_column('account')
        batch_op.drop_column('user')
