"""Database adapter: SQLAlchemy 2 models, engine creation, Alembic migrations, and the stores.

Only this package speaks SQL; everything above it gets plain dataclasses.
"""
