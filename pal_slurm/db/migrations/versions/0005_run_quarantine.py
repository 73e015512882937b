"""profile_runs.quarantine: why an imported score is kept but not used (pal profile import --keep-suspect)

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-01
"""
from __future__ import annotations

from alembic import op
import sqlalchemy as sa


revision = '0005'
down_revision = '0004'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('profile_runs', schema=None) as batch_op:
        batch_op.add_column(sa.Column('quarantine', sa.String(length=255), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('profile_runs', schema=None) as batch_op:
        batch_op.drop_column('quarantine')
