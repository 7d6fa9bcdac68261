"""`warmstart db-info`: where the database is and what it holds."""

import click

from ..cli import emit, json_option
from ..db.schema import SCHEMA_VERSION

COUNTED_TABLES = ("apps", "recordings", "block_requests", "schedules", "device_profiles", "launches")


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
    info = {
        "path": str(ctx.db_path or conn.execute("PRAGMA database_list").fetchone()[2]),
        "schema_version": conn.execute("PRAGMA user_version").fetchone()[0],
        "schema_version_known": SCHEMA_VERSION,
        "counts": {t: conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in COUNTED_TABLES},
    }
    emit(info, as_json, lambda: "\n".join(
        [f"database        {info['path']}", f"schema version  {info['schema_version']}"]
        + [f"{t:<15} {n}" for t, n in info["counts"].items()]))
