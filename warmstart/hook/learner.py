"""`warmstart hook learner`: the Python side of the hook, started by `hook install` next to
warmstartd (and stopped by uninstall). Two jobs, one loop:

1. Learning (learn = "auto"). warmstartd marks the mounts of `learn_paths`; on the exec of an
   executable it has no entry for, under those paths, it connects to this process's socket
   (root-owned, 0600; the daemon checks SO_PEERCRED uid 0) and sends
   "LEARN pid dev ino size mtime_ns argc\\n" + NUL-terminated path and argv, holding the exec.
   If the launch is new (or its app was marked for re-learning), the learner starts the tracefs
   recorder on that pid (task events follow its forks) and answers one byte: the daemon releases
   the exec, so THIS first launch is recorded from its exec on. Otherwise it closes the socket
   (declined). Recording ends when the process exits; the recording is stored as app
   `auto-<name>-<hash>`, owned by the launching process's real uid: its schedule serves that
   user's launches only, and its paths stay out of the public index (docs/security.md). The cache is NOT dropped for it (it is the user's real launch): it is as
   cold as the machine happened to be. Analysis waits until the machine is idle (CPU busy below
   `learn_idle_cpu`, no more than `learn_idle_io_kbps` of disk I/O, over 2 s), or at most
   `learn_idle_max_s`, runs `analyze` (probe auto: hybrid with a disk profile) and refreshes the
   index: the second plain launch is prefetched.
2. Accuracy feedback (always). Each hooked launch's record (hook-events.jsonl) names the
   replayer's stats file, which the replayer completes at the app's exit with the verdict's
   measurement taken there; feedback.judge() stores a `launches` row (mode "hook"). After
   `stale_after_bad` bad verdicts in a row the schedule is marked stale and the index refreshed
   (learn = auto: re-learned), or the app is shown as degraded and kept (learn = off); after as
   many launches in a row not clearly faster than cold it is marked stale and leaves the index
   with learn = off too.
"""

import hashlib
import json
import os
import selectors
import socket
import threading
import time
from collections import deque
from typing import Optional

from ..db.connection import open_db, transaction
from ..db.schedules import newest_schedule_stale
from ..errors import WarmstartError
from ..paths import open_private_append, replace_file
from . import events, feedback, users
from .config import HookConfig
from .layout import HookPaths
from ..signature import needles

MAX_REQUEST = 16384

LEARNER_NICE = 10   # the unit's Nice= (warmstart/hook/units/warmstart-learner.service)


JSON_LOG = False   # `warmstart hook learner --json`: one JSON object per log line


# The daemon starts each hooked launch's replayer with --judge-at-exit 60 (WS_JUDGE_WAIT_S in
# launchd-hook/daemon.h): its report comes at the app's exit, or after that long.
REPLAYER_JUDGE_WAIT_S = 60


def _log(msg: str) -> None:
    if JSON_LOG:
        print(json.dumps({"time": time.time(), "pid": os.getpid(), "message": msg}), flush=True)
    else:
        print(f"{time.strftime('%H:%M:%S')} warmstart-learner[{os.getpid()}]: {msg}", flush=True)


def app_name_for(exe: bytes, argv) -> str:
    key = hashlib.sha1(exe + b"\0" + b"\0".join(needles(exe, argv))).hexdigest()[:8]
    base = os.path.basename(exe).decode("utf-8", "replace")
    return f"auto-{base}-{key}"


def launch_uid(pid: int) -> Optional[int]:
    """The real uid of process `pid` (held at its exec), as warmstartd's ws_proc_ids reads it: the
    user whose launch it is, the owner of a recording of it. None if it cannot be read."""
    try:
        with open(f"/proc/{int(pid)}/status", "rb") as f:
            for line in f:
                if line.startswith(b"Uid:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return None


def parse_request(data: bytes):
    head, _, rest = data.partition(b"\n")
    f = head.split()
    if len(f) != 7 or f[0] != b"LEARN":
        raise ValueError("bad request")
    pid, dev, ino, size, mtime, argc = (int(x) for x in f[1:])
    parts = rest.split(b"\0")
    if len(parts) < argc + 1:
        raise ValueError("truncated request")
    return {"pid": pid, "dev": dev, "ino": ino, "size": size, "mtime_ns": mtime,
            "exe": parts[0], "argv": parts[1:1 + argc]}


class Recorder(threading.Thread):
    """Records one running process (from its held exec) with recorder.record_running."""

    def __init__(self, learner, req, name, reply: socket.socket):
        super().__init__(daemon=True, name=f"record-{req['pid']}")
        self.learner, self.req, self.name, self.reply = learner, req, name, reply

    def _answer(self):
        if self.reply is not None:
            try:
                self.reply.send(b"r")
            except OSError:
                pass
            self.reply.close()
            self.reply = None

    def run(self):
        from ..recorder.recorder import RecordOptions, record_running
        req = self.req
        opts = RecordOptions(cold="none", timeout=self.learner.cfg.learn_record_timeout_s)
        rid, error = None, None
        try:
            # ready: tracing runs, the daemon may release the exec (answered in any case below)
            rid = record_running(self.learner.db, self.name, req["pid"], req["exe"], req["argv"], opts,
                                 cold="none (learned from a real launch)", ready=self._answer,
                                 stopping=self.learner.stopping, say=_log, owner_uid=req["uid"])
        except WarmstartError as e:
            error = str(e)
        except Exception as e:  # a failed recording must not take the learner down
            error = f"{type(e).__name__}: {e}"
        self._answer()
        self.learner.done(self.name, rid, error)


class Idle:
    """CPU busy fraction and disk KiB/s over the last sample period (from /proc)."""

    def __init__(self):
        self.prev = self._sample()

    @staticmethod
    def _sample():
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:]]
        idle = v[3] + v[4]
        io = 0
        with open("/proc/diskstats") as f:
            for line in f:
                p = line.split()
                if len(p) > 9 and not p[2].startswith(("loop", "ram", "dm-")):
                    io += int(p[5]) + int(p[9])
        return time.monotonic(), sum(v), idle, io

    def poll(self):
        cur = self._sample()
        t0, tot0, idle0, io0 = self.prev
        self.prev = cur
        dt = max(cur[0] - t0, 1e-3)
        busy = 1.0 - (cur[2] - idle0) / max(cur[1] - tot0, 1)
        return busy, (cur[3] - io0) * 512 / 1024 / dt


# One database connection at a time in this process. open_db() reads the file's header through
# a plain open()/close(), and closing any fd of a file drops every POSIX lock the process holds on
# it: a second connection open at that moment loses its WAL shared lock, and another process that
# then closes its last connection believes it is the last one and deletes the WAL under us (seen:
# a feedback row lost and SQLITE_IOERR_SHORT_READ after a lock holder exited).
_DB_LOCK = threading.Lock()


class _Conn:
    def __init__(self, path):
        self.path = path

    def __enter__(self):
        _DB_LOCK.acquire()
        try:
            self.conn = open_db(self.path)
        except BaseException:
            _DB_LOCK.release()
            raise
        return self.conn

    def __exit__(self, *exc):
        try:
            self.conn.close()
        finally:
            _DB_LOCK.release()


class Learner:
    def __init__(self, db_path: str, paths: HookPaths, cfg: HookConfig):
        self.db_path, self.paths, self.cfg = db_path, paths, cfg
        self.lock = threading.Lock()
        self.recording: Optional[str] = None
        self.pending: deque = deque()          # (app name, queued at)
        self.waiting: list = []                # (hooked launch record, seen at): not judged yet
        self.offset: Optional[int] = None      # how far the daemon's log is read (None: not loaded)
        self.refresh_due = False               # a verdict marked a schedule stale: refresh the index
        self.looked_up: set = set()            # reports found gone, their rows looked for once
        self.stopping = threading.Event()
        self.thread: Optional[threading.Thread] = None

    # ---- learning requests
    def done(self, name, recording_id, error):
        with self.lock:
            self.recording = None
            if error:
                _log(f"recording of {name} failed: {error}")
            else:
                _log(f"recorded {name} (recording {recording_id}); analysis waits for an idle machine")
                self.pending.append((name, time.monotonic()))
            self._event({"event": "learned", "app": name, "recording_id": recording_id, "error": error})

    def _event(self, rec):
        with open_private_append(self.paths.learner_events, text=True) as f:
            f.write(json.dumps({"t": time.time(), **rec}) + "\n")

    def decide(self, req) -> Optional[str]:
        """The app name to record, or None to decline."""
        if self.cfg.learn != "auto" or self.recording is not None:
            return None
        exe, argv = req["exe"], req["argv"]
        if os.path.basename(exe) in (b"env", b"chroot") or not argv:
            return None
        name = app_name_for(exe, argv)
        if any(n == name for n, _ in self.pending):
            return None
        with self.db() as conn:
            # recorded and waiting for analysis, or hooked already: nothing to learn
            return name if newest_schedule_stale(conn, name) in (None, True) else None

    def db(self):
        """A short-lived connection: a long-lived one kept an unfinished SELECT's read open, and
        SQLite then holds back the autocommit of later writes (readers did not see them)."""
        return _Conn(self.db_path)

    def handle(self, sock: socket.socket):
        sock.settimeout(0.2)
        data = b""
        try:
            while len(data) < MAX_REQUEST:
                chunk = sock.recv(MAX_REQUEST)
                if not chunk:
                    break
                data += chunk
                if data.count(b"\0") >= 1 + int(data.split(b"\n", 1)[0].split()[-1] or 0):
                    break
            req = parse_request(data)
        except (OSError, ValueError, IndexError):
            sock.close()
            return
        # whose launch it is: the recording, and the schedule made from it, are theirs (only
        # their launches use it; docs/security.md)
        req["uid"] = launch_uid(req["pid"])
        with self.lock:
            try:
                name = self.decide(req) if req["uid"] is not None else None
            except Exception as e:   # a database it cannot read: decline this launch, serve the next
                _log(f"learning request of pid {req['pid']} declined: {type(e).__name__}: {e}")
                name = None
            if name is None:
                sock.close()
                return
            self.recording = name
        _log(f"learning {name}: pid {req['pid']} uid {req['uid']} {os.fsdecode(req['exe'])}")
        self.thread = Recorder(self, req, name, sock)
        self.thread.start()

    # ---- idle analysis
    def analyze_when_idle(self, idle: Idle):
        """The analysis of a new recording, when the machine is idle (or it has waited
        learn_idle_max_s)."""
        if not self.pending or self.recording is not None:
            return
        busy, kbps = idle.poll()
        overdue = time.monotonic() - self.pending[0][1] > self.cfg.learn_idle_max_s
        if not overdue and (busy > self.cfg.learn_idle_cpu or kbps > self.cfg.learn_idle_io_kbps):
            return
        name, _ = self.pending.popleft()
        from ..analyzer.analyze import Options, analyze
        from .manage import refresh
        try:
            with self.db() as conn:
                r = analyze(conn, name, Options(probe="auto"))
                refresh(conn, self.paths)
            _log(f"analyzed {name}: schedule {r['schedule_id']} (cpu busy {busy:.0%}, {kbps:.0f} KiB/s"
                 f"{', waited the maximum' if overdue else ''}); hook index refreshed")
            self._event({"event": "analyzed", "app": name, "schedule_id": r["schedule_id"],
                         "cpu_busy": busy, "io_kbps": kbps, "overdue": overdue})
        except Exception as e:   # any: a bad row, a bug; this app's analysis fails, the learner goes on
            why = str(e) if isinstance(e, (WarmstartError, OSError)) else f"{type(e).__name__}: {e}"
            _log(f"analysis of {name} failed: {why}")
            self._event({"event": "analyzed", "app": name, "error": why})

    def update_places(self, schedule_id: int) -> None:
        """Where a schedule's metadata step reads its inodes (params.metadata_positions), found
        again after a launch (btrfs: copy-on-write moves a leaf whenever an inode in it changes,
        as the atime updates of a launch's first reads of the day do; XFS: only a file replaced
        since); if any moved, stored and the exports rewritten, so that the next launch's step
        goes in the disk's order."""
        from ..db.schedules import load_schedule, set_schedule_param
        from ..fs.metadata import schedule_step_positions
        from .manage import refresh
        with self.db() as conn:
            sched = load_schedule(conn, schedule_id)
            old = sched.params.get("metadata_positions")
            if not old:
                return      # nothing placed (no such file system, or not found at the analysis)
            devs = set(sched.params.get("fs_metadata_devs") or ())
            new = schedule_step_positions([f.path for f in sched.files if f.dev in devs],
                                          sched.params.get("lookup_dirs") or ())
            moved = sum(new.get(k) != v for k, v in old.items())
            if not new or not moved:
                return
            with transaction(conn):
                set_schedule_param(conn, schedule_id, "metadata_positions", new)
            refresh(conn, self.paths)
        _log(f"schedule {schedule_id}: {moved} of its {len(old)} inodes moved on the disk since; the metadata "
             f"step follows them")
        self._event({"event": "places", "schedule_id": schedule_id, "moved": moved, "inodes": len(new)})

    # ---- accuracy feedback
    # What the learner has taken from the daemon's log survives it (a SIGKILL, a crash, a
    # reboot): its state file (paths.feedback_offset) holds the offset it has read up to AND the
    # launches read but not yet judged, replaced at once (never half-written) whenever either
    # changes. A launch is forgotten only after its row and its user's line are stored (or its
    # skip is recorded, with the reason): a launch stored and not yet forgotten when the learner
    # was killed is recognised by its row (feedback.stored) and never judged twice. A state file
    # that cannot be read means the generation's start: those launches are then recognised by
    # their rows too.
    def _load_feedback_state(self):
        try:
            raw = json.loads(self.paths.feedback_offset.read_text())
        except (OSError, ValueError):
            raw = None
        if isinstance(raw, int):   # an offset alone: `hook install` starts a generation with it
            raw = {"offset": raw}
        if not isinstance(raw, dict) or not isinstance(raw.get("offset"), int):
            raw = {"offset": events.generation_start(self.paths)}
        self.offset = raw["offset"]
        self.waiting = [(w["event"], w["seen"]) for w in raw.get("waiting", [])
                        if isinstance(w, dict) and isinstance(w.get("event"), dict)]
        self.refresh_due = bool(raw.get("refresh"))

    def _save_feedback_state(self):
        replace_file(self.paths.feedback_offset, json.dumps(
            {"offset": self.offset, "waiting": [{"event": r, "seen": seen} for r, seen in self.waiting],
             "refresh": self.refresh_due}).encode())

    def collect_launches(self):
        if self.offset is None:
            self._load_feedback_state()
        offset = self.offset
        try:
            with open(self.paths.events, "rb") as f:
                f.seek(0, 2)
                if f.tell() < offset:
                    offset = 0
                f.seek(offset)
                data = f.read()
        except FileNotFoundError:
            return
        end = data.rfind(b"\n") + 1
        for line in data[:end].splitlines():
            try:
                r = json.loads(line)
            except ValueError:
                continue
            if r.get("event") == "launch" and r.get("stats"):
                self.waiting.append((r, time.time()))
        if offset + end != self.offset:
            self.offset = offset + end
            self._save_feedback_state()

    def _judge_one(self, r, stats):
        """Store one launch's row (unless stored already) and its user's line; (id, verdict).
        First the schedule's metadata places, found again now that the launch is over (what it
        looked up is cached: little or nothing to read; done later, when the machine looked idle,
        those reads fell in the hold of the app's next launch and warmed its metadata step)."""
        if stats is not None:
            self.guarded("the metadata places", self.update_places, r["schedule_id"])
        with self.db() as conn:
            with transaction(conn):
                known = feedback.stored(conn, r)
                running = [w.get("t_exec") for w, _ in self.waiting if w is not r and w.get("t_exec")]
                lid, v = known if known else feedback.judge(conn, r, stats, self.cfg, running)
            try:
                users.record_launch(conn, self.paths, r, lid, once=known is not None)
            except OSError as e:
                _log(f"the view of user {r.get('uid')} not updated: {e}")
        return lid, v, known is not None

    def _longest_hold_s(self) -> float:
        """The longest hold of the index's entries (the config's cap if it cannot be read), s."""
        from .index import read_index
        try:
            holds = [e.hold_ms for e in read_index(os.fsencode(self.paths.index)).entries]
        except (OSError, WarmstartError):
            holds = [self.cfg.max_hold_ms]
        return max(holds, default=0) / 1000.0 + 0.25

    def judge_finished(self):
        if self.offset is None:
            self._load_feedback_state()
        changed, unsaved, switched = 0, False, []
        hold_s = self._longest_hold_s() if self.waiting else 0.0
        for item in list(self.waiting):
            r, seen = item
            # the replayer writes its report once the app has exited (or after waiting
            # REPLAYER_JUDGE_WAIT_S for it), with the measurement taken there
            # (the file exists, empty, from the replayer's start: it is complete once it parses)
            stats_file, stored_before = r["stats"], False
            try:
                stats = json.loads(open(stats_file).read())
            except FileNotFoundError:
                # gone: this learner, killed, stored the launch and removed the report before it
                # could forget the launch (look for its row, once); or the replayer wrote none
                stats = None
                if stats_file not in self.looked_up:
                    self.looked_up.add(stats_file)
                    try:
                        with self.db() as conn:
                            stored_before = feedback.stored(conn, r) is not None
                    except Exception as e:
                        _log(f"feedback for launch of schedule {r.get('schedule_id')}: {e}")
            except (OSError, ValueError):
                stats = None
            if stats is None and not stored_before and time.time() - seen < REPLAYER_JUDGE_WAIT_S + 60:
                continue
            if stats is not None and time.monotonic() < ((stats.get("exit") or {}).get("t_measured") or 0) + hold_s:
                # a launch that started before this one's exit is logged at its release, up to its
                # hold later: judged once those are read (feedback.overlapping)
                continue
            try:
                lid, v, again = self._judge_one(r, stats)
            except Exception as e:  # a schedule deleted meanwhile, a locked DB: skip this launch
                _log(f"feedback for launch of schedule {r.get('schedule_id')} skipped: {e}")
                try:
                    self._event({"event": "feedback-skipped", "schedule_id": r.get("schedule_id"),
                                 "stats": stats_file, "reason": f"{type(e).__name__}: {e}"})
                except OSError:
                    pass
                lid, v, again = None, {}, False
            try:
                os.unlink(stats_file)
            except OSError:
                pass
            self.waiting.remove(item)
            self.looked_up.discard(stats_file)
            self.refresh_due |= v.get("action") in ("relearn", "stopped")   # the app leaves the index
            if (v.get("trial") or {}).get("active") is not None:   # segmented or whole: the other serves now
                self.refresh_due = True
                switched.append(v["trial"])
            changed += 1
            unsaved = len(self.waiting) >= 100 and changed % 100   # a long backlog: not each time
            if not unsaved:
                self._save_feedback_state()
            if lid is None:
                continue
            what = f"hooked launch of schedule {r['schedule_id']}: launches row {lid}" + \
                (" (stored before a restart)" if again else "")
            timed = "not timed" if v.get("not_timed") else "timed"
            if not v.get("judged") and v.get("slow") is None:
                _log(f"{what}, {timed}, not judged: {v.get('not_judged')}")
                continue
            hit = "n/a" if v.get("hit_ratio") is None else f"{v['hit_ratio']:.0%}"
            _log(f"{what}, {timed}, hit ratio {hit}, missed {v.get('missed_bytes')} B"
                 + (f"; bad ({v['reason']}), {v['bad_streak']} in a row" if v.get("bad") else
                    ("; accurate" if v.get("accurate") else ""))
                 + (f"; {v['action']}" if v.get("action") else ""))
        if unsaved:
            self._save_feedback_state()
        if self.refresh_due:
            from .manage import refresh
            refreshed = True
            try:
                with self.db() as conn:
                    refresh(conn, self.paths)
            except Exception as e:
                refreshed = False
                why = str(e) if isinstance(e, (WarmstartError, OSError)) else f"{type(e).__name__}: {e}"
                _log(f"hook index not refreshed after a verdict that changed the app's schedule: {why}; "
                     f"run `warmstart hook refresh`")
            self.refresh_due = False
            self._save_feedback_state()
            for t in switched:
                _log(f"segmented or whole: {t['state']} (schedule {t['segmented']} segmented, {t['whole']} whole); "
                     f"schedule {t['active']} serves the next launches")
                self._event({"event": "trial", "index_refreshed": refreshed, **t})

    # ---- main loop
    @staticmethod
    def guarded(what: str, step, *args) -> None:
        """One step of the loop: whatever it raises is logged, and the loop goes on (a bad row
        or request costs that launch, never the learner)."""
        try:
            step(*args)
        except Exception as e:
            _log(f"{what} failed: {type(e).__name__}: {e}")

    def serve(self, stop: threading.Event):
        # behind what the user runs, as warmstart-learner.service runs it (Nice=10), also when
        # `hook install` started it directly (no systemd)
        if os.getpriority(os.PRIO_PROCESS, 0) < LEARNER_NICE:
            os.setpriority(os.PRIO_PROCESS, 0, LEARNER_NICE)
        from .manage import remove_orphaned_temp_files
        remove_orphaned_temp_files(self.paths.state)   # a killed learner's state file, half-written
        path = str(self.paths.learner_sock)
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
        srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old = os.umask(0o177)   # the socket is created 0600: no chmod by name afterwards
        try:
            srv.bind(path)
        finally:
            os.umask(old)
        srv.listen(16)
        srv.setblocking(False)
        sel = selectors.DefaultSelector()
        sel.register(srv, selectors.EVENT_READ)
        idle = Idle()
        last_idle = time.monotonic()
        _log(f"listening on {path} (learn = {self.cfg.learn}, database {self.db_path})")
        try:
            while not stop.is_set():
                for _key, _ in sel.select(timeout=0.25):
                    try:
                        conn, _addr = srv.accept()
                    except BlockingIOError:
                        continue
                    self.guarded("a learning request", self.handle, conn)
                self.guarded("reading the launch records", self.collect_launches)
                self.guarded("the launches' feedback", self.judge_finished)
                if time.monotonic() - last_idle >= self.cfg.learn_idle_sample_s:
                    last_idle = time.monotonic()
                    self.guarded("the idle analysis", self.analyze_when_idle, idle)
        finally:
            self.stopping.set()  # a recording in progress ends now (stored as a timeout: refused below)
            if self.thread is not None:
                self.thread.join(10)
            sel.close()
            srv.close()
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass
