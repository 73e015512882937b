"""job profiles, job identities, learned job sensitivity, admin class rules, GPU flags

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-01
"""
from __future__ import annotations

from alembic import op
import sqlalchemy as sa
from sqlalchemy.dialects import mysql

from pal_slurm.db.migration_ops import create_index, create_table


revision = '0003'
down_revision = '0002'
branch_labels = None
depends_on = None

# Naive UTC everywhere; microseconds kept on MariaDB/MySQL too (as in 0001).
TIMESTAMP = sa.DateTime().with_variant(mysql.DATETIME(fsp=6), "mysql", "mariadb")


def upgrade() -> None:
    # each operation is skipped where a run that failed midway left it done (MariaDB commits
    # every DDL statement): see pal_slurm.db.migration_ops
    create_table('class_rules',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('user', sa.String(length=128), nullable=True),
    sa.Column('name', sa.String(length=255), nullable=True),
    sa.Column('account', sa.String(length=128), nullable=True),
    sa.Column('partition', sa.String(length=128), nullable=True),
    sa.Column('job_class', sa.String(length=16), nullable=False),
    sa.Column('note', sa.Text(), nullable=False),
    sa.Column('created_at', TIMESTAMP, nullable=False),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_class_rules'))
    )
    create_table('gpu_flags',
    sa.Column('id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), nullable=False),
    sa.Column('gpu_uuid', sa.String(length=128), nullable=False),
    sa.Column('node', sa.String(length=255), nullable=False),
    sa.Column('kind', sa.String(length=32), nullable=False),
    sa.Column('expected_mhz', sa.Double(), nullable=True),
    sa.Column('observed_mhz', sa.Double(), nullable=True),
    sa.Column('detail', sa.Text(), nullable=False),
    sa.Column('flagged_at', TIMESTAMP, nullable=False),
    sa.Column('cleared_at', TIMESTAMP, nullable=True),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_gpu_flags'))
    )
    with op.batch_alter_table('gpu_flags', schema=None) as batch_op:
        create_index(batch_op, 'gpu_flags', batch_op.f('ix_gpu_flags_gpu_uuid'), ['gpu_uuid'], unique=False)

    create_table('job_identities',
    sa.Column('id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), nullable=False),
    sa.Column('slurm_job_id', sa.String(length=64), nullable=False),
    sa.Column('user', sa.String(length=128), nullable=False),
    sa.Column('name', sa.String(length=255), nullable=False),
    sa.Column('command', sa.Text(), nullable=False),
    sa.Column('fingerprint', sa.String(length=16), nullable=False),
    sa.Column('first_seen', TIMESTAMP, nullable=False),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_job_identities')),
    sa.UniqueConstraint('slurm_job_id', name=op.f('uq_job_identities_slurm_job_id'))
    )
    with op.batch_alter_table('job_identities', schema=None) as batch_op:
        create_index(batch_op, 'job_identities', batch_op.f('ix_job_identities_fingerprint'), ['fingerprint'], unique=False)

    create_table('job_profiles',
    sa.Column('id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), nullable=False),
    sa.Column('slurm_job_id', sa.String(length=64), nullable=False),
    sa.Column('node', sa.String(length=255), nullable=False),
    sa.Column('user', sa.String(length=128), nullable=True),
    sa.Column('gpu_uuids', sa.JSON(), nullable=False),
    sa.Column('gpus', sa.Integer(), nullable=False),
    sa.Column('started_at', TIMESTAMP, nullable=False),
    sa.Column('ended_at', TIMESTAMP, nullable=False),
    sa.Column('duration_s', sa.Double(), nullable=False),
    sa.Column('samples', sa.Integer(), nullable=False),
    sa.Column('gpu_util_mean', sa.Double(), nullable=True),
    sa.Column('gpu_util_p95', sa.Double(), nullable=True),
    sa.Column('sm_active_mean', sa.Double(), nullable=True),
    sa.Column('mem_bw_util_mean', sa.Double(), nullable=True),
    sa.Column('power_w_mean', sa.Double(), nullable=True),
    sa.Column('sm_clock_mhz_mean', sa.Double(), nullable=True),
    sa.Column('fingerprint', sa.String(length=16), nullable=True),
    sa.Column('recorded_at', TIMESTAMP, nullable=False),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_job_profiles')),
    sa.UniqueConstraint('slurm_job_id', 'node', 'started_at', name=op.f('uq_job_profiles_slurm_job_id_node_started_at'))
    )
    with op.batch_alter_table('job_profiles', schema=None) as batch_op:
        create_index(batch_op, 'job_profiles', batch_op.f('ix_job_profiles_fingerprint'), ['fingerprint'], unique=False)
        create_index(batch_op, 'job_profiles', batch_op.f('ix_job_profiles_slurm_job_id'), ['slurm_job_id'], unique=False)

    create_table('job_sensitivity',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('fingerprint', sa.String(length=16), nullable=False),
    sa.Column('user', sa.String(length=128), nullable=False),
    sa.Column('name', sa.String(length=255), nullable=False),
    sa.Column('job_class', sa.String(length=16), nullable=False),
    sa.Column('compute_score', sa.Double(), nullable=False),
    sa.Column('jobs', sa.Integer(), nullable=False),
    sa.Column('samples', sa.BigInteger(), nullable=False),
    sa.Column('gpu_util_mean', sa.Double(), nullable=True),
    sa.Column('sm_active_mean', sa.Double(), nullable=True),
    sa.Column('mem_bw_util_mean', sa.Double(), nullable=True),
    sa.Column('power_w_mean', sa.Double(), nullable=True),
    sa.Column('updated_at', TIMESTAMP, nullable=False),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_job_sensitivity')),
    sa.UniqueConstraint('fingerprint', name=op.f('uq_job_sensitivity_fingerprint'))
    )


def downgrade() -> None:
    op.drop_table('job_sensitivity')
    with op.batch_alter_table('job_profiles', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_job_profiles_slurm_job_id'))
        batch_op.drop_index(batch_op.f('ix_job_profiles_fingerprint'))

    op.drop_table('job_profiles')
    with op.batch_alter_table('job_identities', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_job_identities_fingerprint'))

    op.drop_table('job_identities')
    with op.batch_alter_table('gpu_flags', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_gpu_flags_gpu_uuid'))

    op.drop_table('gpu_flags')
    op.drop_table('class_rules')
