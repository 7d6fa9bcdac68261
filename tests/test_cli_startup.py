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


def test_the_command_list_does_not_import_heavy_libraries():
    """`warmstart --help` loads every command for its line, report's too: not its figures."""
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, cwd=REPO,
                         check=True).stdout
    assert json.loads(out) == [], f"`warmstart --help` imports {json.loads(out)[:5]}"


def test_report_still_gets_its_plotting_library():
    """The check above can fail: report's figures do load matplotlib when drawn."""
    code = ("import sys; from warmstart.report import figures; "
            "print('matplotlib' in sys.modules)")
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO,
                          check=True).stdout.strip() == "True"


FAST = """
import atexit, sys
atexit.register(lambda: print("click loaded" if "click" in sys.modules else "no click", file=sys.stderr))
sys.argv = ["warmstart", *sys.argv[1:]]
from warmstart.main import main
main()
"""


@pytest.mark.parametrize("args, via_click", [
    (["run", "--", "sh", "-c", "echo out; exit 3"], False),
    (["run", "sh", "-c", "echo out; exit 3"], True),          # -c could be one of run's options
    (["run", "--mode", "none", "--", "sh", "-c", "echo out; exit 3"], True),
])
def test_plain_run_skips_the_cli_and_behaves_the_same(tmp_path, args, via_click):
    """`warmstart run -- CMD` goes straight to the run command's body (main.py), without loading
    click; with options it goes through the CLI. Same output, exit status and summary either way."""
    env = {"PATH": "/usr/bin:/bin", "WARMSTART_DB": str(tmp_path / "w.db"), "HOME": str(tmp_path)}
    r = subprocess.run([sys.executable, "-c", FAST, *args], capture_output=True, text=True, cwd=REPO, env=env)
    assert r.returncode == 3 and r.stdout == "out\n", r.stderr
    assert "warmstart: unknown app: launched without prefetch" in r.stderr, r.stderr
    assert "mode=" in r.stderr and ("click loaded" if via_click else "no click") in r.stderr, r.stderr
    assert (tmp_path / "w.db").exists()   # WARMSTART_DB honoured on both paths


@pytest.mark.parametrize("args, via_click", [
    (["run", "--json", "--", "sh", "-c", "echo out; exit 3"], False),
    (["run", "--json", "--mode", "segmented", "--", "sh", "-c", "echo out; exit 3"], True),
])
def test_plain_run_json_skips_the_cli_and_reports_the_same(tmp_path, args, via_click):
    """`warmstart run --json -- CMD` (what scripts and the bench's run-cli mode time) takes the
    same short way; its JSON is the CLI's."""
    env = {"PATH": "/usr/bin:/bin", "WARMSTART_DB": str(tmp_path / "w.db"), "HOME": str(tmp_path)}
    r = subprocess.run([sys.executable, "-c", FAST, *args], capture_output=True, text=True, cwd=REPO, env=env)
    assert r.returncode == 3, r.stderr
    out = json.loads(r.stdout)
    assert out["exit_status"] == 3 and out["output"] == "out\n" and out["mode"] == "segmented", out
    assert any(n.startswith("unknown app") for n in out["notes"]) and out["launch_time_s"] > 0, out
    assert ("click loaded" if via_click else "no click") in r.stderr, r.stderr


def test_plain_run_reports_errors_like_the_cli(tmp_path):
    env = {"PATH": "/usr/bin:/bin", "WARMSTART_DB": str(tmp_path / "w.db"), "HOME": str(tmp_path)}
    r = subprocess.run([sys.executable, "-m", "warmstart", "run", "--", "/nonexistent/prog"],
                       capture_output=True, text=True, cwd=REPO, env=env)
    assert r.returncode != 0 and r.stderr.startswith("warmstart: ") and "Traceback" not in r.stderr, r.stderr
