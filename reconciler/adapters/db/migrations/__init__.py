"""Alembic migration scripts of the Dockyard database (run through `migrating.py`)."""
