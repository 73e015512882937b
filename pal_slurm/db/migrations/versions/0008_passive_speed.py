"""passive speed: each finished job's fingerprint and time limit in job_accounting, the sacct
history's node list, and the per-GPU speed learned from them (gpu_passive_speed; pal gpus learn)

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-04
"""
from __future__ import annotations

from alembic import op
import sqlalchemy as sa
from sqlalchemy.dialects import mysql

from pal_slurm.db.migration_ops import add_column, create_index, create_table


revision = '0008'
down_revision = '0007'
branch_labels = None
depends_on = None

# Naive UTC everywhere; microseconds kept on MariaDB/MySQL too (as in 0001).
TIMESTAMP = sa.DateTime().with_variant(mysql.DATETIME(fsp=6), "mysql", "mariadb")


def upgrade() -> None:
    # each operation is skipped where a run that failed midway left it done (MariaDB commits
    # every DDL statement): see pal_slurm.db.migration_ops
    with op.batch_alter_table('job_accounting', schema=None) as batch_op:
        add_column(batch_op, 'job_accounting', sa.Column('fingerprint', sa.String(length=16), nullable=True))
        add_column(batch_op, 'job_accounting', sa.Column('time_limit_s', sa.Double(), nullable=True))
    with op.batch_alter_table('job_history', schema=None) as batch_op:
        add_column(batch_op, 'job_history', sa.Column('node_list', sa.String(length=1024), nullable=True))
    create_table('gpu_passive_speed',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('gpu_id', sa.Integer(), nullable=False),
    sa.Column('job_class', sa.String(length=16), nullable=False),
    sa.Column('factor', sa.Double(), nullable=False),
    sa.Column('low', sa.Double(), nullable=False),
    sa.Column('high', sa.Double(), nullable=False),
    sa.Column('jobs', sa.Integer(), nullable=False),
    sa.Column('paced', sa.Integer(), nullable=False),
    sa.Column('gpu_hours', sa.Double(), nullable=False),
    sa.Column('computed_at', TIMESTAMP, nullable=False),
    sa.ForeignKeyConstraint(['gpu_id'], ['gpus.id'], name=op.f('fk_gpu_passive_speed_gpu_id_gpus')),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_gpu_passive_speed')),
    sa.UniqueConstraint('gpu_id', 'job_class', name=op.f('uq_gpu_passive_speed_gpu_id_job_class'))
    )
    with op.batch_alter_table('gpu_passive_speed', schema=None) as batch_op:
        create_index(batch_op, 'gpu_passive_speed', batch_op.f('ix_gpu_passive_speed_gpu_id'), ['gpu_id'],
                     unique=False)


def downgrade() -> None:
    with op.batch_alter_table('gpu_passive_speed', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_gpu_passive_speed_gpu_id'))
    op.drop_table('gpu_passive_speed')
    with op.batch_alter_table('job_history', schema=None) as batch_op:
        batch_op.drop_column('node_list')
    with op.batch_alter_table('job_accounting', schema=None) as batch_op:
        batch_op.drop_column('time_limit_s')
        batch_op.drop_column('fingerprint')
