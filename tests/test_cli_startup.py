"""The CLI starts fast: a command imports only what it needs. `warmstart run` is part of a
launch; numpy and matplotlib (hundreds of ms after a cache drop) belong to report and bench."""

import json
import subprocess
import sys

import pytest

from conftest import REPO

HEAVY = ("numpy", "matplotlib")
# Commands a user runs around every launch, and what each may not load.
LEAN = ["run", "record", "analyze", "show", "hook", "recordings", "profile-disk", "export", "import",
        "relocate", "db-info", "fallback"]

PROBE = """
import json, sys
from click.testing import CliRunner
from warmstart.cli import cli
r = CliRunner().invoke(cli, [*sys.argv[1:], "--help"])
assert r.exit_code == 0, r.output
print(json.dumps(sorted(m for m in sys.modules if m.split(".")[0] in %r)))
""" % (HEAVY,)


@pytest.mark.parametrize("command", LEAN)
def test_command_does_not_import_heavy_libraries(command):
    out = subprocess.run([sys.executable, "-c", PROBE, command], capture_output=True, text=True, cwd=REPO,
                         check=True).stdout
    assert json.loads(out) == [], f"`warmstart {command}` imports {json.loads(out)[:5]}"


def test_report_still_gets_its_plotting_library():
    """The check above can fail: report's figures do load matplotlib when drawn."""
    code = ("import sys; from warmstart.report import figures; "
            "print('matplotlib' in sys.modules)")
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO,
                          check=True).stdout.strip() == "True"
