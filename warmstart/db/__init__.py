"""The warmstart SQLite store. `open_db` is the way in; schema.py owns every table."""

from .connection import open_db

__all__ = ["open_db"]
