"""`warmstart db-info`: where the database is and what it holds."""

import click

from ..cli import emit, json_option
from ..db.connection import database_file, describe
from ..db.schema import SCHEMA_VERSION


@click.command("db-info")
@json_option
@click.pass_obj
def db_info(ctx, as_json):
    """Show the database file, its schema version and row counts.

    \b
    Examples:
      warmstart db-info
      warmstart --db /tmp/test.db db-info --json
    """
    conn = ctx.db
    info = {"path": str(ctx.db_path or database_file(conn)), **describe(conn), "schema_version_known": SCHEMA_VERSION}
    emit(info, as_json, lambda: "\n".join(
        [f"database        {info['path']}", f"schema version  {info['schema_version']}"]
        + [f"{t:<15} {n}" for t, n in info["counts"].items()]))
