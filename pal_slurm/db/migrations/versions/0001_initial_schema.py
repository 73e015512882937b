"""initial schema

Revision ID: 0001
Revises: 
Create Date: 2026-11-30
"""
from __future__ import annotations

from alembic import op
import sqlalchemy as sa
from sqlalchemy.dialects import mysql

from pal_slurm.db.migration_ops import create_index, create_table



revision = '0001'
down_revision = None
branch_labels = None
depends_on = None

# Naive UTC everywhere; microseconds kept on MariaDB/MySQL too.
TIMESTAMP = sa.DateTime().with_variant(mysql.DATETIME(fsp=6), "mysql", "mariadb")


def upgrade() -> None:
    # each operation is skipped where a run that failed midway left it done (MariaDB commits
    # every DDL statement): see pal_slurm.db.migration_ops
    create_table('benchmarks',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('name', sa.String(length=64), nullable=False),
    sa.Column('unit', sa.String(length=32), nullable=False),
    sa.Column('lower_is_better', sa.Boolean(), nullable=False),
    sa.Column('description', sa.Text(), nullable=False),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_benchmarks')),
    sa.UniqueConstraint('name', name=op.f('uq_benchmarks_name'))
    )
    create_table('classification_runs',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('version', sa.Integer(), nullable=False),
    sa.Column('created_at', TIMESTAMP, nullable=False),
    sa.Column('params', sa.JSON(), nullable=False),
    sa.Column('previous_version', sa.Integer(), nullable=True),
    sa.Column('note', sa.Text(), nullable=False),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_classification_runs')),
    sa.UniqueConstraint('version', name=op.f('uq_classification_runs_version'))
    )
    create_table('nodes',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('name', sa.String(length=255), nullable=False),
    sa.Column('first_seen', TIMESTAMP, nullable=False),
    sa.Column('last_seen', TIMESTAMP, nullable=False),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_nodes')),
    sa.UniqueConstraint('name', name=op.f('uq_nodes_name'))
    )
    create_table('placements',
    sa.Column('id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), nullable=False),
    sa.Column('slurm_job_id', sa.String(length=64), nullable=False),
    sa.Column('policy', sa.String(length=64), nullable=False),
    sa.Column('job_class', sa.String(length=16), nullable=True),
    sa.Column('classification_version', sa.Integer(), nullable=True),
    sa.Column('gpus', sa.JSON(), nullable=False),
    sa.Column('alternatives', sa.JSON(), nullable=True),
    sa.Column('reason', sa.Text(), nullable=False),
    sa.Column('outcome', sa.String(length=32), nullable=False),
    sa.Column('decided_at', TIMESTAMP, nullable=False),
    sa.Column('applied_at', TIMESTAMP, nullable=True),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_placements'))
    )
    with op.batch_alter_table('placements', schema=None) as batch_op:
        create_index(batch_op, 'placements', batch_op.f('ix_placements_slurm_job_id'), ['slurm_job_id'], unique=False)

    create_table('classification_bins',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('run_id', sa.Integer(), nullable=False),
    sa.Column('model', sa.String(length=128), nullable=False),
    sa.Column('benchmark_id', sa.Integer(), nullable=False),
    sa.Column('bin', sa.Integer(), nullable=False),
    sa.Column('centroid', sa.Double(), nullable=False),
    sa.Column('slowdown', sa.Double(), nullable=False),
    sa.Column('gpus', sa.Integer(), nullable=False),
    sa.Column('outlier', sa.Boolean(), nullable=False),
    sa.Column('low', sa.Double(), nullable=False),
    sa.Column('high', sa.Double(), nullable=False),
    sa.ForeignKeyConstraint(['benchmark_id'], ['benchmarks.id'], name=op.f('fk_classification_bins_benchmark_id_benchmarks')),
    sa.ForeignKeyConstraint(['run_id'], ['classification_runs.id'], name=op.f('fk_classification_bins_run_id_classification_runs'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_classification_bins')),
    sa.UniqueConstraint('run_id', 'model', 'benchmark_id', 'bin', name=op.f('uq_classification_bins_run_id_model_benchmark_id_bin'))
    )
    create_table('gpus',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('uuid', sa.String(length=128), nullable=False),
    sa.Column('node_id', sa.Integer(), nullable=True),
    sa.Column('nvml_index', sa.Integer(), nullable=True),
    sa.Column('minor_number', sa.Integer(), nullable=True),
    sa.Column('pci_bus_id', sa.String(length=32), nullable=True),
    sa.Column('model', sa.String(length=128), nullable=False),
    sa.Column('serial', sa.String(length=64), nullable=True),
    sa.Column('memory_mib', sa.Integer(), nullable=True),
    sa.Column('first_seen', TIMESTAMP, nullable=False),
    sa.Column('last_seen', TIMESTAMP, nullable=False),
    sa.Column('state', sa.String(length=16), nullable=False),
    sa.ForeignKeyConstraint(['node_id'], ['nodes.id'], name=op.f('fk_gpus_node_id_nodes')),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_gpus')),
    sa.UniqueConstraint('uuid', name=op.f('uq_gpus_uuid'))
    )
    with op.batch_alter_table('gpus', schema=None) as batch_op:
        create_index(batch_op, 'gpus', batch_op.f('ix_gpus_model'), ['model'], unique=False)
        create_index(batch_op, 'gpus', batch_op.f('ix_gpus_node_id'), ['node_id'], unique=False)

    create_table('job_classes',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('name', sa.String(length=16), nullable=False),
    sa.Column('benchmark_id', sa.Integer(), nullable=True),
    sa.Column('description', sa.Text(), nullable=False),
    sa.ForeignKeyConstraint(['benchmark_id'], ['benchmarks.id'], name=op.f('fk_job_classes_benchmark_id_benchmarks')),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_job_classes')),
    sa.UniqueConstraint('name', name=op.f('uq_job_classes_name'))
    )
    create_table('classification_results',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('run_id', sa.Integer(), nullable=False),
    sa.Column('gpu_id', sa.Integer(), nullable=False),
    sa.Column('benchmark_id', sa.Integer(), nullable=False),
    sa.Column('runs', sa.Integer(), nullable=False),
    sa.Column('median_score', sa.Double(), nullable=True),
    sa.Column('perfvar', sa.Double(), nullable=True),
    sa.Column('bin', sa.Integer(), nullable=True),
    sa.Column('slowdown', sa.Double(), nullable=True),
    sa.Column('outlier', sa.Boolean(), nullable=False),
    sa.Column('profiled', sa.Boolean(), nullable=False),
    sa.ForeignKeyConstraint(['benchmark_id'], ['benchmarks.id'], name=op.f('fk_classification_results_benchmark_id_benchmarks')),
    sa.ForeignKeyConstraint(['gpu_id'], ['gpus.id'], name=op.f('fk_classification_results_gpu_id_gpus')),
    sa.ForeignKeyConstraint(['run_id'], ['classification_runs.id'], name=op.f('fk_classification_results_run_id_classification_runs'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_classification_results')),
    sa.UniqueConstraint('run_id', 'gpu_id', 'benchmark_id', name=op.f('uq_classification_results_run_id_gpu_id_benchmark_id'))
    )
    create_table('gpu_classes',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('run_id', sa.Integer(), nullable=False),
    sa.Column('gpu_id', sa.Integer(), nullable=False),
    sa.Column('job_class', sa.String(length=16), nullable=False),
    sa.Column('benchmark_id', sa.Integer(), nullable=False),
    sa.Column('bin', sa.Integer(), nullable=True),
    sa.Column('slowdown', sa.Double(), nullable=True),
    sa.Column('outlier', sa.Boolean(), nullable=False),
    sa.Column('profiled', sa.Boolean(), nullable=False),
    sa.ForeignKeyConstraint(['benchmark_id'], ['benchmarks.id'], name=op.f('fk_gpu_classes_benchmark_id_benchmarks')),
    sa.ForeignKeyConstraint(['gpu_id'], ['gpus.id'], name=op.f('fk_gpu_classes_gpu_id_gpus')),
    sa.ForeignKeyConstraint(['run_id'], ['classification_runs.id'], name=op.f('fk_gpu_classes_run_id_classification_runs'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_gpu_classes')),
    sa.UniqueConstraint('run_id', 'gpu_id', 'job_class', name=op.f('uq_gpu_classes_run_id_gpu_id_job_class'))
    )
    create_table('profile_runs',
    sa.Column('id', sa.BigInteger().with_variant(sa.Integer(), 'sqlite'), nullable=False),
    sa.Column('run_key', sa.String(length=64), nullable=False),
    sa.Column('gpu_id', sa.Integer(), nullable=False),
    sa.Column('benchmark_id', sa.Integer(), nullable=False),
    sa.Column('started_at', TIMESTAMP, nullable=False),
    sa.Column('duration_s', sa.Double(), nullable=True),
    sa.Column('score', sa.Double(), nullable=False),
    sa.Column('unit', sa.String(length=32), nullable=False),
    sa.Column('lower_is_better', sa.Boolean(), nullable=False),
    sa.Column('repeats', sa.Integer(), nullable=True),
    sa.Column('spread', sa.Double(), nullable=True),
    sa.Column('sm_clock_mhz', sa.Double(), nullable=True),
    sa.Column('mem_clock_mhz', sa.Double(), nullable=True),
    sa.Column('power_w', sa.Double(), nullable=True),
    sa.Column('temperature_c', sa.Double(), nullable=True),
    sa.Column('throttle_reasons', sa.BigInteger(), nullable=True),
    sa.Column('driver_version', sa.String(length=32), nullable=True),
    sa.Column('cuda_version', sa.String(length=32), nullable=True),
    sa.Column('source', sa.String(length=32), nullable=False),
    sa.Column('imported_at', TIMESTAMP, nullable=False),
    sa.ForeignKeyConstraint(['benchmark_id'], ['benchmarks.id'], name=op.f('fk_profile_runs_benchmark_id_benchmarks')),
    sa.ForeignKeyConstraint(['gpu_id'], ['gpus.id'], name=op.f('fk_profile_runs_gpu_id_gpus')),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_profile_runs')),
    sa.UniqueConstraint('run_key', name=op.f('uq_profile_runs_run_key'))
    )
    with op.batch_alter_table('profile_runs', schema=None) as batch_op:
        create_index(batch_op, 'profile_runs', 'ix_profile_runs_gpu_bench', ['gpu_id', 'benchmark_id'], unique=False)



def downgrade() -> None:
    with op.batch_alter_table('profile_runs', schema=None) as batch_op:
        batch_op.drop_index('ix_profile_runs_gpu_bench')

    op.drop_table('profile_runs')
    op.drop_table('gpu_classes')
    op.drop_table('classification_results')
    op.drop_table('job_classes')
    with op.batch_alter_table('gpus', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_gpus_node_id'))
        batch_op.drop_index(batch_op.f('ix_gpus_model'))

    op.drop_table('gpus')
    op.drop_table('classification_bins')
    with op.batch_alter_table('placements', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_placements_slurm_job_id'))

    op.drop_table('placements')
    op.drop_table('nodes')
    op.drop_table('classification_runs')
    op.drop_table('benchmarks')
