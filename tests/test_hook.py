"""Pure logic of the hook: index encoding, config policy, launch signatures, CLI help."""

import math
import os
import shutil
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from click.testing import CliRunner

from conftest import REPO, require
from warmstart.cli import cli
from warmstart.errors import WarmstartError
from warmstart.hook.config import load_config
from warmstart.hook.entries import hold_ms_for
from warmstart.hook.config import HookConfig
from warmstart.hook.index import HOLD_CAP_MS, Index, IndexEntry, decode, encode, fnv1a64
from warmstart.signature import needles


def entry(dev, ino, sid, needles=(), **kw):
    return IndexEntry(dev=dev, ino=ino, size=10, mtime_ns=7, schedule_id=sid, exe=b"/usr/bin/x\xff",
                      schedule=b"/var/lib/warmstart/schedules/%d.wsr" % sid, name="app", needles=needles, **kw)


def test_index_round_trip_sorted_with_signatures_first():
    idx = Index([entry(9, 1, 1), entry(8, 2**63, 2), entry(8, 5, 3), entry(8, 5, 4, needles=(b"app.py",)),
                 entry(8, 6, 5, files=(b"/lib/\xfe.so", b"/etc/x"), stale=True, hold_ms=70_000)])
    out = decode(encode(idx))
    assert [(e.dev, e.ino, e.schedule_id) for e in out.entries] == [(8, 5, 4), (8, 5, 3), (8, 6, 5), (8, 2**63, 2), (9, 1, 1)]
    e = out.entries[2]
    assert e.files == (b"/lib/\xfe.so", b"/etc/x") and e.stale and e.hold_ms == HOLD_CAP_MS == 60_000  # capped
    assert out.entries[0].needles == (b"app.py",) and out.entries[0].exe == b"/usr/bin/x\xff"


def test_index_corruption_is_refused():
    data = bytearray(encode(Index([entry(1, 2, 3)])))
    for mutate, why in ((lambda d: d.__setitem__(70, d[70] ^ 1), "checksum"),
                        (lambda d: d.__setitem__(0, ord("X")), "magic"),
                        (lambda d: d.__setitem__(8, 9), "version"),
                        (lambda d: d.extend(b"\0"), "truncated")):
        bad = bytearray(data)
        mutate(bad)
        with pytest.raises(WarmstartError, match=why):
            decode(bytes(bad))


def test_fnv_matches_the_c_constants():
    assert fnv1a64(b"") == 0xCBF29CE484222325 and fnv1a64(b"a") == 0xAF63DC4C8601EC8C


def test_signatures():
    assert needles(b"/usr/bin/python3.11", [b"python3", b"-c", b"import json"]) == (b"-c", b"import json")
    assert needles(b"/usr/bin/python3.11", [b"python3", b"-X", b"dev", b"app.py", b"-v"]) == (b"-X", b"dev", b"app.py")
    assert needles(b"/usr/bin/java", [b"java", b"-jar", b"x.jar", b"a"]) == (b"-jar", b"x.jar")
    assert needles(b"/usr/bin/node", [b"node", b"app.js"]) == (b"app.js",)
    assert needles(b"/usr/bin/gcc-12", [b"gcc", b"-c", b"x.c"]) == ()


def test_one_reader_of_launcher_wrappers():
    """signature.split_launcher reads `env ... chroot ROOT CMD` for the signatures, the hook's
    launcher entries and the speculation sandbox alike."""
    from warmstart.signature import split_launcher
    from warmstart.speculate.sandbox import split_chroot
    argv = [b"/usr/bin/env", b"-i", b"PATH=/bin", b"HOME=/x", b"chroot", b"--userspec=1:1", b"/mnt/r", b"ls", b"-l"]
    w = split_launcher(argv)
    assert w.env == {b"PATH": b"/bin", b"HOME": b"/x"} and w.clear and w.chroot_at == 4 and w.root_at == 6
    assert split_chroot(argv) == (b"/mnt/r", {b"PATH": b"/bin", b"HOME": b"/x"}, [b"ls", b"-l"], True)
    assert split_launcher([b"chroot", b"/r", b"sh"]).root_at == 1
    assert split_launcher([b"env", b"-u", b"X", b"chroot", b"/r", b"sh"]).unset == (b"X",)
    assert split_chroot([b"env", b"-u", b"X", b"chroot", b"/r", b"sh"])[0] == b"/"   # not modelled there
    for other in ([b"ls"], [b"env", b"ls"], [b"env", b"--debug", b"chroot", b"/r", b"sh"], [b"chroot", b"/r"]):
        assert split_launcher(other) is None, other


def test_hold_is_a_bounded_multiple_of_the_prebuffer_time():
    cfg = HookConfig()
    assert hold_ms_for(0.1, None, cfg) == 300
    assert hold_ms_for(0.0, None, cfg) == cfg.min_hold_ms
    assert hold_ms_for(5.0, None, cfg) == cfg.max_hold_ms == 10_000  # no cold time known: the ceiling
    # the slow disk of issue 14: a 1.2 s pre-buffer of a 4 s cold launch is held until done
    assert hold_ms_for(0.8, 4.0, cfg) == 2400
    assert hold_ms_for(1.2, 4.0, cfg) == 2400  # 0.6 x the cold launch, not 3 x 1.2 s


@settings(max_examples=300, deadline=None)
@given(st.floats(0, 30), st.floats(0, 30), st.one_of(st.none(), st.floats(0.001, 60)),
       st.floats(0.5, 5), st.floats(0.05, 1.0), st.integers(0, 500), st.integers(1, HOLD_CAP_MS))
def test_hold_policy_properties(t1, t2, cold, factor, fraction, min_hold, max_hold):
    cfg = HookConfig(hold_factor=factor, max_hold_fraction=fraction, min_hold_ms=min(min_hold, max_hold),
                     max_hold_ms=max_hold)
    lo, hi = sorted((t1, t2))
    a, b = hold_ms_for(lo, cold, cfg), hold_ms_for(hi, cold, cfg)
    assert a <= b                                          # monotone in the pre-buffer time
    for h in (a, b):
        assert 1 <= h <= cfg.max_hold_ms <= HOLD_CAP_MS    # the absolute ceiling
        if cold:
            assert h <= max(1, math.ceil(cold * 1000 * fraction))  # never past that share of cold
        else:
            assert h >= cfg.min_hold_ms


def test_config_policy(tmp_path):
    p = tmp_path / "warmstart.toml"
    p.write_text('learn = "auto"\nmax_hold_ms = 400\nhold_factor = 2\n')
    cfg = load_config(p, system=False)
    assert cfg.learn == "auto" and cfg.max_hold_ms == 400 and cfg.hold_factor == 2.0
    p.write_text('learn = "sometimes"\n')
    with pytest.raises(WarmstartError, match="learn must be"):
        load_config(p, system=False)
    p.write_text('lern = "auto"\n')
    with pytest.raises(WarmstartError, match="unknown key"):
        load_config(p, system=False)
    p.write_text('learn = "off"\n')
    os.chmod(p, 0o666)
    with pytest.raises(WarmstartError, match="writable"):
        load_config(p, system=False)
    if os.geteuid() == 0:
        os.chmod(p, 0o644)
        os.chown(p, 65534, 65534)
        with pytest.raises(WarmstartError, match="not owned by root"):
            load_config(p, system=True)
    link = tmp_path / "link.toml"
    link.symlink_to(p)
    with pytest.raises(WarmstartError, match="symlinks"):
        load_config(link, system=False)


@pytest.mark.parametrize("sub", ["install", "uninstall", "status", "refresh"])
def test_every_hook_command_has_help_with_examples(sub):
    r = CliRunner().invoke(cli, ["hook", sub, "--help"])
    assert r.exit_code == 0 and "Example" in r.output and "--json" in r.output


def test_status_json_on_an_empty_tree(tmp_path, monkeypatch):
    monkeypatch.setenv("WARMSTART_HOOK_ROOT", str(tmp_path))
    r = CliRunner().invoke(cli, ["--db", str(tmp_path / "w.db"), "hook", "status", "--json"])
    assert r.exit_code == 0, r.output
    assert '"daemon": null' in r.output and '"index": null' in r.output


def test_c_index_tests_pass():
    binary = REPO / "build" / "test-hook-index"
    require(binary.exists(), "build/test-hook-index not built: run `make binaries ctest`")
    r = subprocess.run([str(binary)], capture_output=True, text=True)
    assert r.returncode == 0 and "0 failed" in r.stdout, r.stdout + r.stderr


def test_the_learner_is_part_of_the_service(tmp_path):
    """Under systemd the learner has its own unit, bound to the daemon's (started, stopped and
    restarted with it), so feedback and learning run again after a reboot."""
    import configparser
    from warmstart.hook import service
    from warmstart.hook.layout import HookPaths
    paths = HookPaths(tmp_path, tmp_path / "var/lib/warmstart", tmp_path / "run/warmstart", tmp_path / "etc")
    daemon = configparser.ConfigParser(strict=False, interpolation=None)
    daemon.read_string(service.write_unit(paths).read_text())
    learner = configparser.ConfigParser(strict=False, interpolation=None)
    learner.read_string(service.write_learner_unit(paths, "/var/lib/warmstart/warmstart.db").read_text())
    assert "warmstart-learner.service" in daemon["Unit"]["Wants"]
    assert daemon["Service"]["RuntimeDirectory"] == "warmstart"  # /run/warmstart after a reboot
    assert learner["Unit"]["PartOf"] == "warmstartd.service"
    assert learner["Service"]["Restart"] == "on-failure"
    assert learner["Service"]["ExecStart"].endswith("--db /var/lib/warmstart/warmstart.db hook learner")
    assert learner["Install"]["WantedBy"] == "multi-user.target"
    assert "@" not in learner["Service"]["ExecStart"] + learner["Service"].get("Environment", "")
    require(shutil.which("systemd-analyze") is not None, "needs systemd-analyze (Debian's systemd)")
    r = subprocess.run(["systemd-analyze", "verify", str(paths.unit), str(paths.learner_unit)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and not r.stderr.strip(), r.stderr


# A watcher: optionally in a private mount namespace (what ProtectSystem= & co. give a service),
# marks the mount of argv[2] for FAN_OPEN_EXEC and prints how many exec events it saw in 3 s.
_MARK_WATCHER = r"""
import ctypes, os, select, sys
libc = ctypes.CDLL(None, use_errno=True)
if sys.argv[1] == "private":
    assert libc.unshare(0x00020000) == 0, os.strerror(ctypes.get_errno())            # CLONE_NEWNS
    assert libc.mount(b"none", b"/", None, 0x40000 | 0x4000, None) == 0              # MS_PRIVATE|MS_REC
fd = libc.fanotify_init(0x1 | 0x2, os.O_RDONLY)                                      # CLOEXEC|NONBLOCK
assert fd >= 0, os.strerror(ctypes.get_errno())
assert libc.fanotify_mark(fd, 0x1 | 0x10, ctypes.c_uint64(0x1000), -100, sys.argv[2].encode()) == 0, \
    os.strerror(ctypes.get_errno())                                                  # ADD|MOUNT, OPEN_EXEC
print("ready", flush=True)
seen = 0
poller = select.poll(); poller.register(fd, select.POLLIN)
while poller.poll(3000):
    seen += len(os.read(fd, 65536)) // 24                                            # metadata records
print(seen, flush=True)
"""


def test_unit_hardening_keeps_the_hosts_mount_namespace(tmp_path):
    """The units are hardened with every option that needs no private mount namespace, and none
    that makes one: a fanotify mount mark made inside a private mount namespace does not see an
    exec on the host's mount (measured here), so such an option would switch the hook off."""
    import configparser
    from warmstart.hook import service
    from warmstart.hook.layout import HookPaths
    paths = HookPaths(tmp_path, tmp_path / "var/lib/warmstart", tmp_path / "run/warmstart", tmp_path / "etc")
    namespacing = ("ProtectSystem", "ProtectHome", "PrivateTmp", "PrivateDevices", "ReadWritePaths",
                   "ReadOnlyPaths", "InaccessiblePaths", "ProtectKernelTunables", "ProtectKernelModules",
                   "ProtectKernelLogs", "ProtectControlGroups", "ProtectProc", "PrivateMounts", "TemporaryFileSystem")
    for unit in (service.write_unit(paths), service.write_learner_unit(paths, "/var/lib/warmstart/warmstart.db")):
        cfg = configparser.ConfigParser(strict=False, interpolation=None)
        cfg.read_string(unit.read_text())
        svc = cfg["Service"]
        for on in ("NoNewPrivileges", "LockPersonality", "RestrictRealtime", "RestrictSUIDSGID"):
            assert svc.get(on) == "yes", (unit.name, on)
        assert not [k for k in svc if k.lower() in {n.lower() for n in namespacing}], unit.name
    require(os.geteuid() == 0, "the mount-namespace measurement needs root (unshare, mount, fanotify)")
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m", "none", str(mnt)], check=True)
    try:
        shutil.copy2("/bin/true", mnt / "true")
        seen = {}
        for where in ("host", "private"):
            w = subprocess.Popen([sys.executable, "-c", _MARK_WATCHER, where, str(mnt)],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            assert w.stdout.readline().strip() == "ready", w.stderr.read()
            for _ in range(3):
                subprocess.run([str(mnt / "true")], check=True)
            out, err = w.communicate(timeout=30)
            assert w.returncode == 0, err
            seen[where] = int(out.split()[-1])
    finally:
        subprocess.run(["umount", str(mnt)], check=False)
    assert seen["host"] >= 3 and seen["private"] == 0, seen
