"""job_accounting: each finished GPU job's variability tax and saving (pal report savings)

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-01
"""
from __future__ import annotations

from alembic import op
import sqlalchemy as sa
from sqlalchemy.dialects import mysql

from pal_slurm.db.migration_ops import create_index, create_table


revision = '0006'
down_revision = '0005'
branch_labels = None
depends_on = None

# Naive UTC everywhere; microseconds kept on MariaDB/MySQL too (as in 0001).
TIMESTAMP = sa.DateTime().with_variant(mysql.DATETIME(fsp=6), "mysql", "mariadb")


def upgrade() -> None:
    # each operation is skipped where a run that failed midway left it done (MariaDB commits
    # every DDL statement): see pal_slurm.db.migration_ops
    create_table('job_accounting',
    sa.Column('id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), nullable=False),
    sa.Column('slurm_job_id', sa.String(length=64), nullable=False),
    sa.Column('mode', sa.String(length=16), nullable=False),
    sa.Column('job_class', sa.String(length=16), nullable=False),
    sa.Column('partition', sa.String(length=128), nullable=False),
    sa.Column('account', sa.String(length=128), nullable=False),
    sa.Column('user', sa.String(length=128), nullable=False),
    sa.Column('gpus', sa.JSON(), nullable=False),
    sa.Column('n_gpus', sa.Integer(), nullable=False),
    sa.Column('slowest_gpus', sa.String(length=1024), nullable=False),
    sa.Column('started_at', TIMESTAMP, nullable=False),
    sa.Column('ended_at', TIMESTAMP, nullable=False),
    sa.Column('runtime_s', sa.Double(), nullable=False),
    sa.Column('slowdown', sa.Double(), nullable=True),
    sa.Column('tax_gpu_h', sa.Double(), nullable=True),
    sa.Column('alternative', sa.String(length=16), nullable=True),
    sa.Column('alternative_slowdown', sa.Double(), nullable=True),
    sa.Column('saved_gpu_h', sa.Double(), nullable=True),
    sa.Column('classification_version', sa.Integer(), nullable=True),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_job_accounting'))
    )
    with op.batch_alter_table('job_accounting', schema=None) as batch_op:
        create_index(batch_op, 'job_accounting', batch_op.f('ix_job_accounting_ended_at'), ['ended_at'], unique=False)
        create_index(batch_op, 'job_accounting', batch_op.f('ix_job_accounting_slurm_job_id'), ['slurm_job_id'], unique=False)


def downgrade() -> None:
    with op.batch_alter_table('job_accounting', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_job_accounting_slurm_job_id'))
        batch_op.drop_index(batch_op.f('ix_job_accounting_ended_at'))
    op.drop_table('job_accounting')
