#!/usr/bin/env python3
"""test_top.py -- `loopscope top` against a running http_server (needs root).

    test_top.py CASE --loopscope BIN --examples DIR --sem-read BIN --hostile BIN

The screen is driven in tmux (a private server per case: send-keys,
capture-pane); the text mode through a pipe.  Each CASE is one ctest entry
(tests/tracer/CMakeLists.txt).  Exit 0 pass, 1 fail, 77 skip (only when not
root: BPF needs privileges).  Deadlines only guard against hangs: each
wait polls for what it asserts and fails after a generous time.
"""
import os
import re
import socket
import subprocess
import sys
import time
from lstest import (Fail, check, eq, query, meta, integrity, wait_for, tmpdir, semaphores,
                    schedstat, parse_args, run_case)  # the copy every script shares

A = None
CASES = {}
CLEANUP = []          # callables run when the case ends, whatever its outcome


def case(fn):
    CASES[fn.__name__] = fn
    return fn


def bpf_progs():
    """{id: name} of the BPF programs loaded on the machine (bpftool)."""
    out = subprocess.run(["bpftool", "prog", "show"], capture_output=True, text=True)
    check(out.returncode == 0, f"bpftool prog show failed: {out.stderr}")
    return {int(m.group(1)): m.group(2)
            for m in re.finditer(r"^(\d+): \S+\s+name (\S+)", out.stdout, re.M)}


def block_line():
    src = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples",
                       "http_server.c")
    for i, l in enumerate(open(src), 1):
        if "usleep(20 * 1000)" in l:
            return i
    raise Fail("no usleep(20 * 1000) in examples/http_server.c")


class Server:
    """A fresh http_server (its own port), killed when the case ends."""

    def __init__(self):
        self.p = subprocess.Popen([os.path.join(A.examples, "http_server"), "--port", "0"],
                                  stdout=subprocess.PIPE, text=True)
        CLEANUP.append(self.stop)
        self.pid = int(self.p.stdout.readline().split()[1])
        self.port = int(self.p.stdout.readline().split()[1])
        self.conns = []

    def connect(self):
        """A keep-alive connection that has served one request: its
        handle_conn#N task (N = connections so far) is live, awaiting io."""
        c = socket.create_connection(("127.0.0.1", self.port), timeout=10)
        self.conns.append(c)
        self.get(c, "/")
        return c

    def get(self, c, path):
        c.sendall(f"GET {path} HTTP/1.1\r\nHost: t\r\n\r\n".encode())
        got = b""
        while b"\r\n\r\n" not in got:
            chunk = c.recv(4096)
            check(chunk, f"connection closed during GET {path}")
            got += chunk
        head, body = got.split(b"\r\n\r\n", 1)
        n = int(re.search(rb"Content-Length: (\d+)", head).group(1))
        while len(body) < n:
            body += c.recv(4096)
        check(head.startswith(b"HTTP/1.1 200"), f"GET {path}: {head[:40]!r}")

    def stop(self):
        for c in self.conns:
            c.close()
        if self.p.poll() is None:
            self.p.kill()
        self.p.wait()


class Tmux:
    """A private tmux server (its own socket) running one command."""

    def __init__(self, cmd, width=160, height=45):
        self.sock = f"lstop-{os.getpid()}"
        CLEANUP.append(self.kill)
        # The shell prints the exit status, then keeps the pane to read it.
        self.tmux("new-session", "-d", "-s", "top", "-x", str(width), "-y", str(height),
                  f"{cmd}; echo EXIT=$?; sleep 120")

    def tmux(self, *args):
        p = subprocess.run(["tmux", "-L", self.sock, *args], capture_output=True, text=True,
                           timeout=30)
        check(p.returncode == 0, f"tmux {args[0]} failed: {p.stderr.strip()}")
        return p.stdout

    def screen(self):
        return self.tmux("capture-pane", "-p", "-t", "top").split("\n")

    def keys(self, *keys):
        self.tmux("send-keys", "-t", "top", *keys)

    def kill(self):
        subprocess.run(["tmux", "-L", self.sock, "kill-server"], capture_output=True)


def table(screen):
    """The task table's rows: (name, state, rest) between its header and the
    blocking feed."""
    rows, inside = [], False
    for l in screen:
        if l.startswith("NAME"):
            inside = True
            continue
        if not inside:
            continue
        if l.startswith("-- blocking episodes") or not l.strip() or l.startswith("..."):
            break
        f = l.split()
        rows.append((f[0], f[1] if len(f) > 1 else ""))
    return rows


def feed(screen):
    out, inside = [], False
    for l in screen:
        if l.startswith("-- blocking episodes"):
            inside = True
        elif inside and l.strip() and not l.startswith("q quit"):
            out.append(l)
    return out


def footer(screen):
    lines = [l for l in screen if l.strip()]
    return lines[-1] if lines else ""


# --------------------------------------------------------------- cases

@case
def screen():
    """The curses screen in tmux: tasks, the blocking feed with its
    file:line, sort keys, the filter, a resize, and q detaching cleanly."""
    s = Server()
    progs_before = bpf_progs()
    eq(sum(semaphores(A.sem_read, s.pid).values()), 0, "semaphores before attaching")
    t = Tmux(f"{A.loopscope} top -p {s.pid}")
    wait_for(lambda: semaphores(A.sem_read, s.pid).get("batch", 0) > 0, 10, "top to attach")
    # Ours: the programs loaded since (other recorders may run on the machine).
    ours = {i: n for i, n in bpf_progs().items() if i not in progs_before}
    check("on_batch" in ours.values(), f"top's on_batch program is not loaded: {ours}")
    for _ in range(3):
        s.connect()
    want = ["acceptor", "handle_conn#1", "handle_conn#2", "handle_conn#3", "stopper"]
    wait_for(lambda: sorted(n for n, _ in table(t.screen())) == want, 10,
             f"the table to show {want}")
    states = dict(table(t.screen()))
    for n in want[1:4]:
        eq(states[n], "wait:io", f"state of {n} (a keep-alive connection awaiting its socket)")

    # One /block request (20 ms usleep on the loop thread) appears in the
    # feed with the call site.
    line = block_line()
    s.get(s.conns[0], "/block")
    got = wait_for(lambda: [l for l in feed(t.screen()) if f"http_server.c:{line}" in l], 10,
                   f"a blocking episode at http_server.c:{line} in the feed")
    check("handle_conn#1" in got[0] and "clock_nanosleep" in got[0] and "off-cpu" in got[0],
          f"feed line: {got[0]!r}")
    check(re.search(r"\b\d+(\.\d+)?ms\b", got[0]), f"no duration in {got[0]!r}")
    hdr = "\n".join(t.screen()[:3])
    check(re.search(r"iterations/s \d+", hdr) and re.search(r"idle [\d.]+%", hdr) and
          re.search(r"lag p50 \S+\s+p99 \S+", hdr), f"header: {hdr!r}")
    check(f"pid {s.pid}" in hdr and "libevl mode" in hdr, f"header: {hdr!r}")

    # Sort keys: by busy time the connection that blocked 20 ms comes
    # first; by name, acceptor does.
    t.keys("b")
    wait_for(lambda: "sort: busy" in footer(t.screen()) and
             table(t.screen())[0][0] == "handle_conn#1", 10, "sort by busy")
    t.keys("n")
    wait_for(lambda: "sort: name" in footer(t.screen()), 10, "sort by name")
    names = [n for n, _ in table(t.screen())]
    eq(names, sorted(names), "rows sorted by name")
    eq(names[0], "acceptor", "first row by name")

    # The filter: '/' then a substring of the name, Enter.
    t.keys("/", "conn#2")
    t.keys("Enter")
    wait_for(lambda: [n for n, _ in table(t.screen())] == ["handle_conn#2"], 10,
             "the filter to hide every task but handle_conn#2")
    check("filter: conn#2" in footer(t.screen()), f"footer: {footer(t.screen())!r}")
    t.keys("Escape")
    wait_for(lambda: len(table(t.screen())) == 5, 10, "Esc to clear the filter")

    # A resize redraws for the new size: the footer on the new last line.
    scr = t.screen()
    check(scr[44].startswith("q quit"), f"footer not on line 45 of 45: {scr[-3:]!r}")
    t.tmux("resize-window", "-t", "top", "-x", "100", "-y", "30")
    # (tmux keeps the bottom of the old screen when it shrinks: only a
    # redraw puts the header on line 1 and, at 100 columns, the site's file
    # without its directory in the feed)
    def redrawn():
        scr = t.screen()
        return (len(scr) >= 30 and scr[29].startswith("q quit") and
                scr[0].startswith("loopscope top") and
                any(l.startswith("NAME") for l in scr) and
                any(f" http_server.c:{line} slow_work" in l for l in feed(scr)))
    wait_for(redrawn, 10, "the screen redrawn for 100x30 (footer on line 30)")

    # q: detach like record, exit 0.
    t.keys("q")
    wait_for(lambda: any(l.startswith("EXIT=") for l in t.screen()), 10, "top to exit")
    eq([l for l in t.screen() if l.startswith("EXIT=")], ["EXIT=0"], "top's exit status")
    eq(sum(semaphores(A.sem_read, s.pid).values()), 0, "probe semaphores after q")
    check(s.p.poll() is None, "the target died")
    left = {i: n for i, n in bpf_progs().items() if ours.get(i) == n}
    eq(left, {}, "top's BPF programs still loaded after q")


@case
def text_mode():
    """stdout not a terminal: a plain text block a second, escaped, with the
    header fields, the tasks and the blocking line; -d stops it."""
    s = Server()
    for _ in range(2):
        s.connect()
    line = block_line()
    p = subprocess.Popen([A.loopscope, "top", "-p", str(s.pid), "-d", "3"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    CLEANUP.append(lambda: p.poll() is None and p.kill())
    wait_for(lambda: semaphores(A.sem_read, s.pid).get("batch", 0) > 0, 10, "top to attach")
    time.sleep(0.3)
    s.connect()                       # handle_conn#3, created under top's eyes
    for _ in range(3):
        s.get(s.conns[0], "/block")
    out, err = p.communicate(timeout=60)
    eq(p.returncode, 0, f"top's exit status (stderr {err.strip()!r})")
    eq(err, "", "stderr")
    check("\x1b" not in out, "escape sequences in the text mode")
    blocks = [b for b in out.split("\n\n") if b.strip().startswith("top: pid")]
    check(len(blocks) >= 2, f"status blocks: {out!r}")
    for b in blocks:
        check(re.search(r"^loop  iterations/s \d+  idle ", b, re.M), f"loop line in {b!r}")
        check(re.search(r"^tasks \d+ live  \d+ created  \d+ finished  blocking \d+  dropped 0",
                        b, re.M), f"tasks line in {b!r}")
    check(re.search(r"^task: acceptor\s", out, re.M), f"no acceptor line: {out!r}")
    check(re.search(r"^task: handle_conn#1\s+wait:io\s+busy [\d.]+ms\s", out, re.M),
          f"no handle_conn#1 line (busy 3 x 20 ms): {out!r}")
    check(re.search(r"^task: handle_conn#3\s+wait:io\s", out, re.M),
          f"no handle_conn#3 line: {out!r}")
    # Pre-existing and silent since the attach: what it waits for is not known.
    check(re.search(r"^task: handle_conn#2\s+unknown\s", out, re.M),
          f"no handle_conn#2 line: {out!r}")
    bl = [l for l in out.splitlines() if l.startswith("blocking:")]
    check(any(f"http_server.c:{line}" in l and "handle_conn#1" in l for l in bl),
          f"no blocking line at http_server.c:{line}: {bl!r}")
    check(out.rstrip().endswith("top: stopped: duration reached"), f"last line: {out[-200:]!r}")
    eq(sum(semaphores(A.sem_read, s.pid).values()), 0, "probe semaphores after -d")


@case
def oncpu():
    """A step spinning 50 ms of CPU (blocking_server spin): an on-CPU line
    whose duration is filled in once the step ends (model/derive.c's rule),
    at the spinning function in blocking_server.c.  Any other on-CPU line
    must be a step the kernel charged at least the threshold (10 ms) of
    the loop thread's CPU time (lstest.charged): beside other load it now
    and then charges a sleeping task's step that much.  The thread's CPU
    time over top's run, less the two spins' 100 ms, must cover them."""
    d = tmpdir()
    srv = subprocess.Popen([os.path.join(A.examples, "blocking_server")],
                           stdout=subprocess.PIPE, text=True, cwd=d)
    CLEANUP.append(lambda: (srv.kill(), srv.wait()))
    pid = int(srv.stdout.readline().split()[1])
    port = int(srv.stdout.readline().split()[1])
    cpu0 = schedstat(pid)[0]
    p = subprocess.Popen([A.loopscope, "top", "-p", str(pid), "-d", "3"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    CLEANUP.append(lambda: p.poll() is None and p.kill())
    wait_for(lambda: semaphores(A.sem_read, pid).get("batch", 0) > 0, 10, "top to attach")
    time.sleep(0.3)
    for _ in range(2):
        with socket.create_connection(("127.0.0.1", port), timeout=10) as c:
            c.sendall(b"spin\n")
            eq(c.recv(100), b"done spin\n", "answer to spin")
    out, err = p.communicate(timeout=60)
    eq(p.returncode, 0, f"top's exit status (stderr {err.strip()!r})")
    extra = schedstat(pid)[0] - cpu0 - 100_000_000     # the thread's CPU time, less the spins'
    lines = [l for l in out.splitlines() if l.startswith("blocking:") and " on-cpu " in l]
    spins = [l for l in lines if re.search(r"blocking_server\.c:\d+ spin_ms", l)]
    check(spins, f"no on-CPU line at blocking_server.c:N spin_ms: {out!r}")
    others = [l for l in lines if l not in spins]
    check(len(others) * 10_000_000 <= extra,
          f"on-CPU lines not at the spin, more than the loop thread's CPU time "
          f"besides the spins ({extra / 1e6:.1f} ms) allows: {others}")
    for l in others:
        print(f"note: {l!r}: CPU the kernel charged the loop thread "
              f"({extra / 1e6:.1f} ms besides the spins), allowed", file=sys.stderr)
    for l in spins:
        m = re.search(r"\s(\S+)\s+(\S*blocking_server\.c:\d+) spin_ms", l)
        check(m, f"on-CPU line without a duration before blocking_server.c:N: {l!r}")
        check(re.fullmatch(r"[\d.]+ms", m.group(1)), f"duration not filled in: {l!r}")
        check(40 <= float(m.group(1)[:-2]) <= 500, f"duration {m.group(1)} for a 50 ms spin")


@case
def signals():
    """SIGINT and SIGTERM stop top like q: detached, exit 0, the reason said."""
    import signal
    s = Server()
    for sig, why in ((signal.SIGINT, "interrupted (SIGINT)"),
                     (signal.SIGTERM, "terminated by signal")):
        p = subprocess.Popen([A.loopscope, "top", "-p", str(s.pid)], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
        CLEANUP.append(lambda p=p: p.poll() is None and p.kill())
        wait_for(lambda: semaphores(A.sem_read, s.pid).get("batch", 0) > 0, 10, "top to attach")
        p.send_signal(sig)
        out, err = p.communicate(timeout=60)
        eq(p.returncode, 0, f"exit status after {sig.name} (stderr {err.strip()!r})")
        check(out.rstrip().endswith(f"top: stopped: {why}"), f"{sig.name}: {out[-200:]!r}")
        eq(sum(semaphores(A.sem_read, s.pid).values()), 0, f"probe semaphores after {sig.name}")
        check(s.p.poll() is None, "the target died")


@case
def output_trace():
    """-o FILE records what `record -o` writes while showing the view;
    `loopscope info` reads it; an existing FILE is refused before attaching."""
    s = Server()
    s.connect()
    db = os.path.join(tmpdir(), "top.db")
    p = subprocess.Popen([A.loopscope, "top", "-p", str(s.pid), "-d", "2.5", "-o", db],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    CLEANUP.append(lambda: p.poll() is None and p.kill())
    wait_for(lambda: semaphores(A.sem_read, s.pid).get("batch", 0) > 0, 10, "top to attach")
    time.sleep(0.3)
    s.connect()
    for _ in range(3):
        s.get(s.conns[0], "/block")
    out, err = p.communicate(timeout=60)
    eq(p.returncode, 0, f"top -o exit status (stderr {err.strip()!r})")
    integrity(db)
    m = meta(db)
    names = {n for (n,) in query(db, "SELECT name FROM tasks")}
    nblock = query(db, "SELECT count(*) FROM blocking")[0][0]
    nstats = query(db, "SELECT count(*) FROM task_stats")[0][0]
    eq(m.get("stop_reason"), "duration reached", "meta stop_reason")
    check(" top " in f" {m.get('recorder_cmdline', '')} ", f"recorder_cmdline {m!r}")
    check({"acceptor", "handle_conn#1", "handle_conn#2"} <= names, f"tasks {names}")
    check(nblock >= 1, "no blocking episode in the trace")
    check(nstats >= 3, f"task_stats rows: {nstats}")
    info = subprocess.run([A.loopscope, "info", db], capture_output=True, text=True, timeout=60)
    eq(info.returncode, 0, f"info exit status ({info.stderr.strip()})")
    check(re.search(r"^tasks:\s+\d+", info.stdout, re.M), f"info: {info.stdout!r}")
    check("duration reached" in info.stdout, f"info: {info.stdout!r}")
    # The text on stdout is the same view as without -o, naming the file.
    check(f"recording to {db}" in out, f"header without the file: {out[:300]!r}")
    before = open(db, "rb").read()
    expect_error(["-p", str(s.pid), "-d", "1", "-o", db], "already exists")
    eq(open(db, "rb").read() == before, True, "existing trace unchanged")
    eq(sum(semaphores(A.sem_read, s.pid).values()), 0, "semaphores after the refused run")


def hostile(mode, secs):
    """hostile_target MODE (tests/tracer/hostile_target.c), killed at the end."""
    p = subprocess.Popen([A.hostile, mode, str(secs)], stdout=subprocess.PIPE, text=True)
    CLEANUP.append(lambda: p.poll() is None and p.kill())
    return p, int(p.stdout.readline().split()[1])


@case
def hostile_names():
    """Hostile task names (escapes, newlines, NUL, invalid UTF-8) and a
    million task ids: the text stays escaped, top exits 0 when the target
    does; on the screen too."""
    for mode in ("names", "tasks"):
        target, pid = hostile(mode, 2)
        p = subprocess.run([A.loopscope, "top", "-p", str(pid), "-d", "30"],
                           capture_output=True, timeout=90)
        target.wait(timeout=30)
        eq(p.returncode, 0, f"{mode}: exit status ({p.stderr[-300:]!r})")
        out = p.stdout.decode("utf-8")      # valid UTF-8, or this raises
        check(not re.search(r"[\x00-\x09\x0b-\x1f\x7f-\x9f]", out),
              f"{mode}: control characters in the output")
        check(out.rstrip().endswith("top: stopped: target exited"), f"{mode}: {out[-300:]!r}")
        if mode == "names":
            for esc in (r"tab\there", r"\xff\xfe bytes", "%n%n%s%s%x"):
                check(re.search(r"^task: " + re.escape(esc), out, re.M),
                      f"names: no escaped task {esc!r}")
        else:
            check(re.search(r"^task: \.\.\. \d+ more$", out, re.M), "tasks: no '... N more'")
    target, pid = hostile("names", 3)
    t = Tmux(f"{A.loopscope} top -p {pid}")
    wait_for(lambda: any(l.startswith("EXIT=") for l in t.screen()), 60, "top to exit")
    eq([l for l in t.screen() if l.startswith("EXIT=")], ["EXIT=0"], "top's exit status")


@case
def generic_mode():
    """A target without libevl (CPython asyncio, the generic loop mode): the
    loop header from its windows, the asyncio tasks the census reads, blocking
    lines with the asyncio task and the Python file:line."""
    src = os.path.realpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                        "examples", "asyncio_server.py"))
    line = next(i for i, l in enumerate(open(src), 1) if l.strip().startswith("time.sleep(0.05)"))
    py = "/usr/bin/python3.11" if os.path.exists("/usr/bin/python3.11") else sys.executable
    srv = subprocess.Popen([py, src, "--port", "0"], stdout=subprocess.PIPE, text=True)
    CLEANUP.append(lambda: (srv.kill(), srv.wait()))
    pid = int(srv.stdout.readline().split()[1])
    port = int(srv.stdout.readline().split()[1])
    p = subprocess.Popen([A.loopscope, "top", "-p", str(pid), "-d", "3"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    CLEANUP.append(lambda: p.poll() is None and p.kill())
    # Attached once the first block is out (no semaphore to watch in this mode).
    first = p.stdout.readline()
    check(first.startswith("top: pid"), f"first line {first!r}")
    with socket.create_connection(("127.0.0.1", port), timeout=10) as c:
        for _ in range(3):
            c.sendall(b"GET /report HTTP/1.1\r\nHost: t\r\n\r\n")
            got = b""
            while b"report ready" not in got:
                chunk = c.recv(4096)
                check(chunk, "connection closed")
                got += chunk
    out, err = p.communicate(timeout=60)
    out = first + out
    eq(p.returncode, 0, f"top's exit status (stderr {err.strip()!r})")
    check("generic loop mode" in out, f"mode not named: {out[:300]!r}")
    # the census reads its asyncio tasks: the connection's task has a row
    check(re.search(r"asyncio tasks \d+ live", out, re.M), f"no asyncio task count: {out!r}")
    check(re.search(r"^task: conn-1 ", out, re.M), f"no row for the connection's task: {out!r}")
    check(re.search(r"^loop  iterations/s [1-9]\d*  idle [\d.]+%  lag p50 \S+  p99 \S+", out,
                    re.M), f"no loop line with iterations: {out!r}")
    bl = [l for l in out.splitlines() if l.startswith("blocking:")]
    check(any(f"asyncio_server.py:{line} build_report" in l and "conn-" in l for l in bl),
          f"no blocking line at asyncio_server.py:{line} in an asyncio task: {bl!r}")


def expect_error(args, pattern):
    p = subprocess.run([A.loopscope, "top", *args], capture_output=True, text=True, timeout=30)
    check(p.returncode != 0, f"top {args} succeeded")
    eq(p.stdout, "", f"stdout of top {args}")
    lines = [l for l in p.stderr.splitlines() if l.strip()]
    eq(len(lines), 1, f"error lines of top {args}: {lines}")
    check(lines[0].startswith("error: ") and pattern in lines[0],
          f"top {args}: expected error with {pattern!r}, got {lines[0]!r}")


@case
def errors():
    """Bad or missing pid, bad options: one error line, non-zero exit."""
    expect_error([], "give -p PID")
    expect_error(["-p", "abc"], "invalid pid 'abc'")
    expect_error(["-p", "999999999"], "no process with pid 999999999")
    expect_error(["-p", "1", "-d", "0"], "invalid duration")
    expect_error(["-p", "1", "--sort", "bogus"], "invalid --sort 'bogus'")
    expect_error(["-p", "1", "--mode", "bogus"], "invalid --mode 'bogus'")
    expect_error(["--mode", "libevl", "-p", str(os.getpid())], "has no loopscope probes")
    h = subprocess.run([A.loopscope, "top", "--help"], capture_output=True, text=True)
    eq(h.returncode, 0, "top --help exit status")
    check(h.stdout.startswith("usage: loopscope top -p PID"), f"help: {h.stdout[:80]!r}")


def cleanup():
    for fn in reversed(CLEANUP):
        try:
            fn()
        except Exception:
            pass


def main():
    global A
    A = parse_args(CASES, ("loopscope", "examples", "sem_read", "hostile"))
    return run_case(CASES, A, cleanup,
                    "top attaches BPF programs: needs root (CAP_BPF, CAP_PERFMON)")

if __name__ == "__main__":
    sys.exit(main())
