"""A real install: `pip install` of a clean copy of the source (the files git knows, no build/)
into a fresh virtual environment compiles the C helpers into the package, and the installed
`warmstart` records, analyzes, runs and hooks an app from outside any checkout, with its own
helpers only (the source copy is deleted before it runs).

Offline: --no-index, --no-build-isolation and --no-deps, in a venv that sees the system's
packages (where scripts/install-deps puts pip, wheel, click, numpy and matplotlib)."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from conftest import REPO, have_tracefs, require

# what record, analyze, run, hook and speculate run (`make helpers`); bench and test programs are not installed
HELPERS = {"warmstart-replay", "warmstart-probe", "ws-spec-run", "warmstartd", "libwarmstart-preload.so"}
APP = [sys.executable, "-c", "import json, decimal, email.mime.text"]


def _sh(argv, **kw):
    p = subprocess.run(argv, capture_output=True, text=True, timeout=300, **kw)
    assert p.returncode == 0, f"{argv}:\n{p.stdout}\n{p.stderr}"
    return p


def _clean_source_copy(dest: Path) -> None:
    """The files git knows (committed or not, ignored ones left out): no build/ comes along."""
    files = _sh(["git", "-C", str(REPO), "ls-files", "-z", "--cached", "--others", "--exclude-standard"]).stdout
    for rel in filter(None, files.split("\0")):
        src = REPO / rel
        if src.is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / rel)


def test_pip_install_builds_the_helpers_and_works_without_a_checkout(tmp_path):
    require(have_tracefs(), "needs root and tracefs (to record the app)")
    require(shutil.which("git") is not None and (REPO / ".git").exists(), "needs git and a git checkout")
    src, venv, outside = tmp_path / "src", tmp_path / "venv", tmp_path / "elsewhere"
    _clean_source_copy(src)
    assert not (src / "build").exists()
    # no pip of its own (ensurepip): the system's pip, setuptools and wheel serve it
    _sh([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(venv)])
    py = venv / "bin" / "python"
    _sh([str(py), "-m", "pip", "install", "-q", "--no-build-isolation", "--no-deps", "--no-index",
         "--disable-pip-version-check", str(src)])
    shutil.rmtree(src)                       # nothing of the source (nor its build tree) is left to use

    outside.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "WARMSTART_LIBEXEC", "WARMSTART_DB")}
    env["WARMSTART_HOOK_ROOT"] = str(tmp_path / "hookroot")    # a private hook tree, not the system's
    where = json.loads(_sh([str(py), "-c", "import json, warmstart.paths as p; print(json.dumps("
                            "[str(p.PACKAGE_DIR), str(p.checkout_root()), [str(d) for d in p.libexec_dirs()]]))"],
                           cwd=outside, env=env).stdout)
    package, checkout, dirs = Path(where[0]), where[1], where[2]
    assert package.is_relative_to(venv) and checkout == "None", where
    assert dirs == [str(package / "libexec")], where
    libexec = package / "libexec"
    assert {f.name for f in libexec.iterdir()} == HELPERS
    for f in libexec.iterdir():
        assert f.read_bytes()[:4] == b"\x7fELF" and os.access(f, os.X_OK), f
    # the systemd units (written under systemd only; here into a scratch tree): filled from the
    # package's templates, their helpers and docs the installed ones, no checkout on PYTHONPATH
    units = json.loads(_sh([str(py), "-c", "import json, sys; from pathlib import Path; "
                            "from warmstart.hook import service; from warmstart.hook.layout import HookPaths; "
                            "t = Path(sys.argv[1]); p = HookPaths(t, t / 'state', t / 'run', t / 'etc'); "
                            "print(json.dumps([service.write_unit(p).read_text(), "
                            "service.write_learner_unit(p, '/x.db').read_text()]))", str(tmp_path / "units")],
                           cwd=outside, env=env).stdout)
    for text in units:
        assert "@" not in text and "Environment=" not in text and str(REPO) not in text, text
        assert f"Documentation={(package / 'docs' / 'hook.md').as_uri()}\n" in text, text
    assert f"ExecStart={libexec / 'warmstartd'} " in units[0]
    assert f"--replayer {libexec / 'warmstart-replay'} " in units[0]
    assert f"ExecStart={py} -m warmstart --db /x.db hook learner\n" in units[1]

    db = tmp_path / "w.db"
    ws = venv / "bin" / "warmstart"

    def run(*args):
        return _sh([str(ws), "--db", str(db), *args], cwd=outside, env=env)

    run("record", "--name", "inst", "--", *APP)
    analyzed = json.loads(run("analyze", "inst", "--json").stdout)
    assert analyzed["schedule_id"] and analyzed["total_bytes"] > 0, analyzed
    ran = json.loads(run("run", "--json", "--name", "inst", "--", *APP).stdout)
    assert ran["prefetched"] and ran["exit_status"] == 0, ran

    try:
        run("hook", "install", "--json")
        status = json.loads(run("hook", "status", "--json").stdout)
        assert status["index"]["apps"] == ["inst"] and status["daemon"] and status["learner"], status
        daemon = status["daemon"]["pid"]
        assert os.readlink(f"/proc/{daemon}/exe") == str(libexec / "warmstartd")
        argv = Path(f"/proc/{daemon}/cmdline").read_bytes().split(b"\0")
        assert argv[argv.index(b"--replayer") + 1] == os.fsencode(libexec / "warmstart-replay"), argv
        learner = Path(f"/proc/{status['learner']}/cmdline").read_bytes().split(b"\0")
        assert learner[0] == os.fsencode(py) and b"learner" in learner, learner
        assert "PYTHONPATH" not in Path(f"/proc/{status['learner']}/environ").read_bytes().decode(errors="replace")
    finally:
        gone = json.loads(run("hook", "uninstall", "--json").stdout)
    assert gone["daemon_stopped"], gone
    assert json.loads(run("hook", "status", "--json").stdout)["daemon"] is None
