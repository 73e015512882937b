"""node inventory: NVML inventory fields on gpus; benchmark_failures

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-01
"""
from __future__ import annotations

from alembic import op
import sqlalchemy as sa
from sqlalchemy.dialects import mysql

from pal_slurm.db.migration_ops import add_column, create_index, create_table


revision = '0002'
down_revision = '0001'
branch_labels = None
depends_on = None

# Naive UTC everywhere; microseconds kept on MariaDB/MySQL too (as in 0001).
TIMESTAMP = sa.DateTime().with_variant(mysql.DATETIME(fsp=6), "mysql", "mariadb")


def upgrade() -> None:
    # each operation is skipped where a run that failed midway left it done (MariaDB commits
    # every DDL statement): see pal_slurm.db.migration_ops
    with op.batch_alter_table('gpus', schema=None) as batch_op:
        add_column(batch_op, 'gpus', sa.Column('power_limit_w', sa.Double(), nullable=True))
        add_column(batch_op, 'gpus', sa.Column('driver_version', sa.String(length=32), nullable=True))
        add_column(batch_op, 'gpus', sa.Column('cuda_version', sa.String(length=32), nullable=True))
        add_column(batch_op, 'gpus', sa.Column('vbios_version', sa.String(length=64), nullable=True))
        add_column(batch_op, 'gpus', sa.Column('ecc_corrected', sa.BigInteger(), nullable=True))
        add_column(batch_op, 'gpus', sa.Column('ecc_uncorrected', sa.BigInteger(), nullable=True))
        add_column(batch_op, 'gpus', sa.Column('retired_pages', sa.Integer(), nullable=True))
        add_column(batch_op, 'gpus', sa.Column('inventoried_at', TIMESTAMP, nullable=True))

    create_table('benchmark_failures',
    sa.Column('id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), nullable=False),
    sa.Column('run_key', sa.String(length=64), nullable=False),
    sa.Column('gpu_id', sa.Integer(), nullable=False),
    sa.Column('benchmark', sa.String(length=64), nullable=False),
    sa.Column('started_at', TIMESTAMP, nullable=False),
    sa.Column('duration_s', sa.Double(), nullable=True),
    sa.Column('status', sa.String(length=16), nullable=False),
    sa.Column('error', sa.Text(), nullable=False),
    sa.Column('source', sa.String(length=32), nullable=False),
    sa.Column('recorded_at', TIMESTAMP, nullable=False),
    sa.ForeignKeyConstraint(['gpu_id'], ['gpus.id'], name=op.f('fk_benchmark_failures_gpu_id_gpus')),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_benchmark_failures')),
    sa.UniqueConstraint('run_key', name=op.f('uq_benchmark_failures_run_key'))
    )
    with op.batch_alter_table('benchmark_failures', schema=None) as batch_op:
        create_index(batch_op, 'benchmark_failures', batch_op.f('ix_benchmark_failures_gpu_id'), ['gpu_id'], unique=False)


def downgrade() -> None:
    with op.batch_alter_table('benchmark_failures', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_benchmark_failures_gpu_id'))

    op.drop_table('benchmark_failures')
    with op.batch_alter_table('gpus', schema=None) as batch_op:
        batch_op.drop_column('inventoried_at')
        batch_op.drop_column('retired_pages')
        batch_op.drop_column('ecc_uncorrected')
        batch_op.drop_column('ecc_corrected')
        batch_op.drop_column('vbios_version')
        batch_op.drop_column('cuda_version')
        batch_op.drop_column('driver_version')
        batch_op.drop_column('power_limit_w')
