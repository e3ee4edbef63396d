"""lstest.py -- what the recorder's test scripts (tests/tracer/test_*.py)
share, one copy each:

    Fail, Skip           what a case raises: a failure (exit 1), or a case
                         that cannot run here (exit 77)
    check, eq            the two assertions
    query, meta, integrity   reading a trace, read-only, through
                         tests/lstrace.py (whose `events` the extension
                         decodes)
    wait_for             poll a condition until it holds or time runs out
    tmpdir               a scratch directory, removed when the case ends
    semaphores           the probes' USDT semaphores of a process
                         (tests/probes/probe_sem_read)
    parse_args, run_case one case from the command line: --list, the root
                         check, Fail and Skip, cleanup

The scripts import it from their own directory, which Python puts first on
sys.path when ctest runs `python3 tests/tracer/SCRIPT.py CASE ...`
(tests/tracer/CMakeLists.txt); it puts tests/ there for lstrace.
"""
import argparse
import os
import resource
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import lstrace  # noqa: E402


class Fail(Exception):
    pass


class Skip(Exception):
    """The case cannot run here (a runtime that is not part of the machine
    image is absent): exit 77, which tests/run.sh refuses under CI=true."""


def check(cond, msg):
    if not cond:
        raise Fail(msg)


def eq(got, want, what):
    if got != want:
        raise Fail(f"{what}: expected {want!r}, got {got!r}")


def query(db, sql, *params, raw=False):
    """The rows of sql on the trace at db, opened read-only.  raw: text
    values as the bytes stored (a hostile target's names), not str."""
    con = lstrace.connect(f"file:{db}?mode=ro", uri=True)
    if raw:
        con.text_factory = bytes
    try:
        return con.execute(sql, params).fetchall()
    finally:
        con.close()


def meta(db):
    return dict(query(db, "SELECT key, value FROM meta"))


def integrity(db):
    eq(query(db, "PRAGMA integrity_check"), [("ok",)], f"integrity_check of {db}")


def wait_for(pred, timeout, what, interval=0.05):
    """pred()'s first true value, polled every interval seconds; Fail after
    timeout seconds.  what: what is waited for, or a function saying it
    (called at the timeout, to show the state then)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        got = pred()
        if got:
            return got
        time.sleep(interval)
    raise Fail(f"timed out after {timeout} s waiting for {what() if callable(what) else what}")


def schedstat(pid, tid=None):
    """Thread TID's (default: PID's main thread) time on a CPU and time
    runnable but waiting for one, in ns (/proc schedstat; exact while it
    is not running)."""
    with open(f"/proc/{pid}/task/{tid or pid}/schedstat") as f:
        v = f.read().split()
    return int(v[0]), int(v[1])


def thread_state(pid, tid=None):
    """Thread TID's (default: the process PID's) state letter from /proc
    stat: R, S, D, T (stopped), Z (a zombie) ..."""
    path = f"/proc/{pid}/stat" if tid is None else f"/proc/{pid}/task/{tid}/stat"
    with open(path) as f:
        return f.read().rsplit(")", 1)[1].split()[0]


def others_runs(pid, tid):
    """How many times the threads of PID other than TID have been given a
    CPU (/proc schedstat's third field, summed; a thread that ended since
    is not counted, one that began is)."""
    n = 0
    for t in os.listdir(f"/proc/{pid}/task"):
        if int(t) != tid:
            try:
                with open(f"/proc/{pid}/task/{t}/schedstat") as f:
                    n += int(f.read().split()[2])
            except (FileNotFoundError, ProcessLookupError):
                pass
    return n


def ask(port, route):
    """One request to a line-protocol server of tracer/generic/
    (py_server.py and its kind) on 127.0.0.1:port: ROUTE and a newline
    sent, the answer read to its newline and split
    ("done ROUTE T0 T1 CPU TID"), checked to be done ROUTE's."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as c:
        c.sendall(route.encode() + b"\n")
        got = b""
        while not got.endswith(b"\n"):
            b = c.recv(200)
            if not b:
                break
            got += b
    f = got.decode(errors="replace").split()
    check(f[:2] == ["done", route], f"answer to {route}: {got!r}")
    return f


def charged(kind, dur, thread_cpu):
    """Is an episode of this kind and duration (ns) CPU time the kernel
    charged the loop thread, which over the episode's span it charged
    thread_cpu ns (its schedstat)?  On this VM beside other load, the
    kernel now and then charges a loop thread 10-20 ms in a step that ran
    well under a millisecond of code (tests/bench/phantom_cpu.py;
    tracer/README.md, "A step's CPU time"): the recorder counts a step's
    CPU time as the kernel does, so such a step is an on-CPU episode.  A
    test that wants no on-CPU episode over a span of little work allows
    these; one the kernel did not charge is the recorder's own error."""
    return kind == 2 and dur <= thread_cpu + 1_000_000


class cpu_samples:
    """with cpu_samples(pid) as c: thread pid's CPU time (its schedstat)
    read every millisecond or so by a thread of the test, each sample
    (monotonic ns, CPU ns); c.cpu_over(t0, t1) is what the kernel charged
    it over at least [t0, t1] (from the last sample before t0 to the first
    after t1), None if the samples do not cover it."""
    def __init__(self, pid):
        self.pid, self.samples, self.stop = pid, [], threading.Event()

    def run(self):
        while not self.stop.is_set():
            try:
                self.samples.append((time.monotonic_ns(), schedstat(self.pid)[0]))
            except OSError:
                return
            time.sleep(0.001)

    def __enter__(self):
        self.t = threading.Thread(target=self.run, daemon=True)
        self.t.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.t.join()

    def cpu_over(self, t0, t1):
        before = [c for t, c in self.samples if t <= t0]
        after = [c for t, c in self.samples if t >= t1]
        return after[0] - before[-1] if before and after else None

    def over_step(self, db, task, start, dur):
        """cpu_over the step of an episode of trace db (task, start, dur):
        from its start to its task's next event (a libevl step ends there),
        or for dur at least."""
        end = query(db, "SELECT min(ts_ns) FROM events WHERE task_id = ? AND ts_ns > ?",
                    task, start)[0][0]
        return self.cpu_over(start, max(end or 0, start + dur))


def lost(m):
    """What a trace (its meta m) says it lost, for a message about an
    episode that is missing."""
    return (f" [trace: {m.get('dropped_messages')} messages dropped, "
            f"{m.get('rejected_messages')} rejected, {m.get('lost_episodes')} episodes lost, "
            f"{m.get('missed_runs')} BPF program runs missed, "
            f"{m.get('stale_waits')} stale waits, {m.get('unseen_switches')} switches unseen]")


def children_cpu():
    """User and system CPU seconds of the children waited for so far."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


class cpu_hogs:
    """with cpu_hogs(per_cpu): busy loops of normal priority, per_cpu on
    every CPU (`while :; do :; done`), so that a SCHED_IDLE recorder gets
    next to no CPU while they run; with io_dir, also the I/O hog of
    tests/run.sh --stress (dd of 64 MiB with fsync into io_dir, looped).
    Each is its own process group, killed on leaving, whatever happens."""

    def __init__(self, per_cpu=2, io_dir=None):
        self.n = per_cpu * (os.cpu_count() or 1)
        self.io_dir = io_dir
        self.procs = []

    def __enter__(self):
        cmds = [["sh", "-c", "while :; do :; done"]] * self.n
        if self.io_dir:
            cmds.append(["sh", "-c", 'while :; do dd if=/dev/zero of="$0/io" bs=1M count=64 '
                         'conv=fsync status=none; done', self.io_dir])
        for cmd in cmds:
            self.procs.append(subprocess.Popen(cmd, start_new_session=True))
        return self

    def __exit__(self, *exc):
        for p in self.procs:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        for p in self.procs:
            p.wait()
        return False


TMPDIRS = []          # removed when the case ends, whatever its outcome


def tmpdir(**kw):
    """A new directory (tempfile.mkdtemp's arguments), removed by run_case
    when the case ends; kept, and named, when $LSTEST_KEEP is set."""
    stem = os.path.splitext(os.path.basename(sys.argv[0]))[0].removeprefix("test_")
    d = tempfile.mkdtemp(**{"prefix": f"lstest-{stem}-", **kw})
    TMPDIRS.append(d)
    return d


def remove_tmpdirs():
    while TMPDIRS:
        d = TMPDIRS.pop()
        if os.environ.get("LSTEST_KEEP"):     # keep the traces for a look
            print(f"  kept {d}")
        else:
            shutil.rmtree(d, ignore_errors=True)


def semaphores(sem_read, pid):
    """{probe: semaphore} of process pid, read by probe_sem_read."""
    out = subprocess.run([sem_read, str(pid)], capture_output=True, text=True)
    check(out.returncode == 0, f"probe_sem_read failed: {out.stderr}")
    return {l.split()[0]: int(l.split()[1]) for l in out.stdout.splitlines() if l.strip()}


def parse_args(cases, paths, extra=()):
    """`SCRIPT CASE|--list [--PATH P ...]`: the arguments, each of `paths`
    (option names, "sem_read" for --sem-read) made absolute; extra:
    (flag, argparse keywords) of other options."""
    ap = argparse.ArgumentParser()
    ap.add_argument("case", nargs="?", choices=sorted(cases))
    ap.add_argument("--list", action="store_true", help="list the cases")
    for p in paths:
        ap.add_argument("--" + p.replace("_", "-"))
    for flag, kw in extra:
        ap.add_argument(flag, **kw)
    a = ap.parse_args()
    if a.list:
        a.case = "--list"
    elif not a.case:
        ap.error("give a case, or --list")
    for k in paths:
        if getattr(a, k):
            setattr(a, k, os.path.abspath(getattr(a, k)))
    return a


def run_case(cases, a, cleanup=None, root_why="recording needs root (CAP_BPF, CAP_PERFMON)"):
    """Run case a.case (or list the cases): the exit status, 0 when it
    passed, 1 on Fail, 77 on Skip or when not root (root_why None: root is
    not needed); cleanup() runs after the case whatever happens, then the
    case's tmpdirs go."""
    if a.case == "--list":
        print("\n".join(sorted(cases)))
        return 0
    if root_why and os.geteuid() != 0:
        print(f"skip: {root_why}")
        return 77
    t = time.monotonic()
    try:
        cases[a.case]()
    except Skip as e:
        print(f"skip {a.case}: {e}")
        return 77
    except Fail as e:
        print(f"FAIL {a.case}: {e}")
        return 1
    finally:
        try:
            if cleanup:
                cleanup()
        finally:
            remove_tmpdirs()
    print(f"ok {a.case} ({time.monotonic() - t:.1f} s)")
    return 0
