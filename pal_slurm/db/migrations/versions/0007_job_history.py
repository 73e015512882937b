"""job_history: finished Slurm jobs from sacct exports, to learn runtimes from (pal jobs import-history)

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-02
"""
from __future__ import annotations

from alembic import op
import sqlalchemy as sa
from sqlalchemy.dialects import mysql

from pal_slurm.db.migration_ops import create_index, create_table


revision = '0007'
down_revision = '0006'
branch_labels = None
depends_on = None

# Naive UTC everywhere; microseconds kept on MariaDB/MySQL too (as in 0001).
TIMESTAMP = sa.DateTime().with_variant(mysql.DATETIME(fsp=6), "mysql", "mariadb")


def upgrade() -> None:
    # each operation is skipped where a run that failed midway left it done (MariaDB commits
    # every DDL statement): see pal_slurm.db.migration_ops
    create_table('job_history',
    sa.Column('id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), nullable=False),
    sa.Column('source', sa.String(length=128), nullable=False),
    sa.Column('slurm_job_id', sa.String(length=64), nullable=False),
    sa.Column('user', sa.String(length=128), nullable=False),
    sa.Column('name', sa.String(length=255), nullable=False),
    sa.Column('started_at', TIMESTAMP, nullable=False),
    sa.Column('elapsed_s', sa.Double(), nullable=False),
    sa.Column('state', sa.String(length=32), nullable=False),
    sa.Column('gpus', sa.Integer(), nullable=True),
    sa.Column('nodes', sa.Integer(), nullable=True),
    sa.Column('imported_at', TIMESTAMP, nullable=False),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_job_history')),
    sa.UniqueConstraint('source', 'slurm_job_id', 'started_at',
                        name=op.f('uq_job_history_source_slurm_job_id_started_at'))
    )
    with op.batch_alter_table('job_history', schema=None) as batch_op:
        create_index(batch_op, 'job_history', batch_op.f('ix_job_history_started_at'), ['started_at'], unique=False)


def downgrade() -> None:
    with op.batch_alter_table('job_history', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_job_history_started_at'))
    op.drop_table('job_history')
