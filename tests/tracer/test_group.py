#!/usr/bin/env python3
"""test_group.py -- `loopscope record` on a process group (tracer/group.c):
-p PID,PID..., --children, --cgroup, --comm; one trace, each process in it.

    test_group.py CASE --loopscope BIN

Cases:
    prefork_python  generic/prefork_server.py, a master and 3 asyncio
                    workers, recorded with -p MASTER --children; a fourth
                    worker forked while recording; a blocking request to
                    each worker: every worker has its loop, every episode
                    is in the loop of the process that answered, over the
                    handler's own interval, with its Python frame; the
                    processes table (parents, mode, runtime); the viewer
                    reads the trace
    node_cluster    generic/node_cluster.js (node:cluster, 2 workers, forked
                    and exec'd by the primary), a third forked while
                    recording: the same checks, with the JS frames left out
    nginx           Debian's nginx, a master and 2 workers; a reload while
                    recording makes 2 new workers: each of the 4 workers has
                    its epoll loop, under its own pid
    comm_cgroup     --comm NAME and --cgroup PATH: the processes there at
                    the start and one started while recording are recorded;
                    a cgroup removed while recording is said so
    agent_reload    loopscope agent: SIGHUP reads its configuration again (a
                    name added is attached; one with an error is refused and
                    the one before kept); SIGTERM ends it with exit 0
    loops           --loops: every process with an event loop, one started
                    while recording too; a process that only sleeps not
    fork_storm      --children on a process that forks 1000 children at
                    once: bounded members, memory and waiting forks, the
                    rest counted, nothing left attached
    agent_full_disk the agent's trace directory full: one line, no
                    half-written trace, the agent goes on
    errors          a bad pid list, a dead pid in it, a cgroup that does
                    not exist, a name nothing has, options a group does not
                    take, the agent's bad configurations: one error line,
                    exit non-zero, no file left

Needs root (recording).  Exit 0 = pass, 1 = fail, 77 = skipped.
"""
import os
import re
import signal
import socket
import subprocess
import sys
import time

from lstest import Fail, ask, check, eq, query, integrity, wait_for, tmpdir, parse_args, run_case

HERE = os.path.dirname(os.path.abspath(__file__))
GEN = os.path.join(HERE, "generic")
MS = 1_000_000
PROCS = []
CASES = {}
A = None


def case(fn):
    CASES[fn.__name__] = fn
    return fn


def spawn(cmd, **kw):
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, **kw)
    PROCS.append(p)
    return p


def request(port, route):
    """ROUTE to a worker: the handler's (t0, t1) and the pid that did it."""
    f = ask(port, route)
    check(len(f) == 6, f"answer to {route}: {f}")
    return dict(t0=int(f[2]), t1=int(f[3]), pid=int(f[5]))


class Group:
    """loopscope record on a group, attached once its first line says so;
    the "pid N: recording" lines it prints as members are attached."""

    def __init__(self, *args):
        self.db = os.path.join(tmpdir(), "group.db")
        self.p = subprocess.Popen([A.loopscope, "record", "-o", self.db, *args],
                                  stderr=subprocess.PIPE, text=True)
        PROCS.append(self.p)
        self.lines = []
        self.first = self.p.stderr.readline()
        check(self.first.startswith("recording a process group ("),
              f"first line of record {args}: {self.first!r} (exit {self.p.poll()})")
        self.members = {}             # pid -> parent (0: selected)

    def wait_member(self, pid, timeout=30):
        """Read its lines until pid's says it is recorded."""
        end = time.monotonic() + timeout
        while pid not in self.members:
            check(time.monotonic() < end, f"no 'pid {pid}: recording' line: {self.lines}")
            line = self.p.stderr.readline()
            check(line, f"record ended before pid {pid} was recorded: {self.lines}")
            self.lines.append(line.rstrip("\n"))
            m = re.match(r"\r?pid (\d+): recording \((.*?)(?:, forked by (\d+))?\)$",
                         line.rstrip("\n"))
            if m:
                self.members[int(m.group(1))] = int(m.group(3) or 0)

    def wait_done(self, pid, why, timeout=30):
        """Read its lines until pid's member has ended (\"pid N: done: WHY\")."""
        end = time.monotonic() + timeout
        while not any(l.endswith(f"pid {pid}: done: {why}") for l in self.lines):
            check(time.monotonic() < end, f"no 'pid {pid}: done: {why}' line: {self.lines}")
            line = self.p.stderr.readline()
            check(line, f"record ended before pid {pid} was done: {self.lines}")
            self.lines.append(line.rstrip("\n"))

    def stop(self):
        self.p.send_signal(signal.SIGINT)
        _, err = self.p.communicate(timeout=120)
        self.err = err
        eq(self.p.returncode, 0, f"record exit status ({err.strip()})")
        integrity(self.db)
        return self.db


def read_workers(p, n, timeout=30):
    """n "worker PID port P" lines of p: {pid: port}."""
    out = {}
    end = time.monotonic() + timeout
    while len(out) < n:
        check(time.monotonic() < end, f"only {len(out)} of {n} workers came up")
        line = p.stdout.readline()
        check(line, "the server ended")
        m = re.match(r"worker (\d+) port (\d+)", line)
        if m:
            out[int(m.group(1))] = int(m.group(2))
    return out


def check_episodes(db, answers, frame=None):
    """Each blocking answer has an episode over its interval in a loop of
    the process that answered, and none in another process's loops."""
    for a in answers:
        rows = query(db, """SELECT b.id, l.pid, b.start_ns, b.dur_ns, b.stack_id
                            FROM blocking b JOIN loops l ON l.id = b.loop_id
                            WHERE b.start_ns < ? AND b.start_ns + b.dur_ns > ?""",
                     a["t1"], a["t0"])
        mine = [r for r in rows if r[1] == a["pid"]]
        check(mine, f"no episode of pid {a['pid']} over its request "
                    f"[{a['t0']}, {a['t1']}]: {rows}")
        check(all(r[1] == a["pid"] for r in rows),
              f"an episode over pid {a['pid']}'s request is in another process: {rows}")
        longest = max(mine, key=lambda r: r[3])
        check(longest[3] >= 40 * MS, f"pid {a['pid']}'s episode lasted {longest[3] / MS} ms "
                                     f"(its handler slept 50 ms)")
        if frame:
            fns = [f[0] for f in query(db, "SELECT function FROM frames WHERE stack_id = ? "
                                            "ORDER BY depth", longest[4])]
            check(frame in fns, f"pid {a['pid']}'s episode has no frame {frame}: {fns}")


def check_processes(db, master, workers, mode="generic"):
    procs = {r[0]: r[1:] for r in query(db, "SELECT pid, parent_pid, mode, binary FROM processes")}
    check(master in procs, f"no processes row for the master {master}: {procs}")
    eq(procs[master][0], None, "the master's parent_pid (selected, not forked)")
    for w in workers:
        check(w in procs, f"no processes row for worker {w}: {procs}")
        eq(procs[w][0], master, f"worker {w}'s parent_pid")
        eq(procs[w][1], mode, f"worker {w}'s mode")
    loops = query(db, "SELECT pid, count(*) FROM loops GROUP BY pid")
    have = dict(loops)
    for w in workers:
        check(have.get(w, 0) >= 1, f"worker {w} has no loop: {loops}")
    ids = [r[0] for r in query(db, "SELECT id FROM loops")]
    eq(len(ids), len(set(ids)), "loop ids are distinct")
    m = dict(query(db, "SELECT key, value FROM meta"))
    eq(int(m["processes"]), len(procs), "meta processes")
    return procs


def viewer(*args, rc=0):
    r = subprocess.run([A.loopscope, *args], capture_output=True, text=True, timeout=120)
    eq(r.returncode, rc, f"loopscope {' '.join(args)} ({r.stderr.strip()})")
    return r.stdout if rc == 0 else r.stderr


def viewer_reads(db, answers=(), master=None):
    """Every command reads the group's trace; info lists its processes,
    blocking names each episode's process and totals by process, --pid
    shows one process alone (its episodes, its loop), timeline --loop takes
    a thread id."""
    for cmd in (["info"], ["blocking"], ["tasks"], ["timeline"], ["lint"],
                ["export", "--format", "chrome-json", "-o", db + ".json"]):
        viewer(*cmd, db)
    info = viewer("info", db)
    for a in answers:
        check(re.search(rf"^  pid {a['pid']} .*forked by {master}$", info, re.M),
              f"info lists no process {a['pid']} forked by {master}:\n{info}")
    if not answers:
        return
    by = viewer("blocking", "--by", "process", db)
    for a in answers:
        check(re.search(rf"^pid {a['pid']} +[1-9]", by, re.M), f"blocking --by process: {by}")
    one = answers[0]["pid"]
    alone = viewer("blocking", "--pid", str(one), db)
    pids = set(re.findall(r"on thread \d+(?: of pid (\d+))?", alone))
    check(re.search(r"^1 blocking episode", alone, re.M) or alone.count("\n#") >= 1,
          f"blocking --pid {one}: {alone[:300]}")
    # all of that process's episodes, which hold its requests' (beside
    # other load, a step the kernel charged 10 ms of CPU is one more:
    # lstest.charged)
    have = query(db, "SELECT count(*) FROM blocking b JOIN loops l ON l.id = b.loop_id "
                     "WHERE l.pid = ?", one)[0][0]
    check(have >= len([a for a in answers if a["pid"] == one]), f"pid {one}: {have} episodes")
    eq(len(re.findall(r"^#\d+ ", alone, re.M)), have, f"episodes of pid {one} alone")
    check(pids <= {"", str(one)}, f"blocking --pid {one} shows other processes: {pids}")
    tl = viewer("timeline", "--loop", str(one), db)
    check(f"thread {one}" in tl or f"/{one} " in tl, f"timeline --loop {one}: {tl[:300]}")
    err = viewer("info", "--pid", "1", db, rc=1)
    check(err.startswith("error: no process 1 in trace"), f"info --pid 1: {err!r}")


def pid_lines(out):
    return [int(x) for x in re.findall(r"^pid (\d+)$", out, re.M)]


@case
def prefork_python():
    srv = spawn([sys.executable, os.path.join(GEN, "prefork_server.py"), "--workers", "3"])
    master = int(srv.stdout.readline().split()[1])
    workers = read_workers(srv, 3)
    g = Group("-p", str(master), "--children")
    for w in [master, *workers]:
        g.wait_member(w)
    os.kill(master, signal.SIGUSR1)           # a worker after the recording began
    late = read_workers(srv, 1)
    g.wait_member(next(iter(late)))
    eq(g.members[next(iter(late))], master, "the late worker's parent, as record says")
    workers.update(late)
    answers = [request(port, "sleep") for port in workers.values()]
    for a, w in zip(answers, workers):
        eq(a["pid"], w, "the worker that answered")
    request(next(iter(workers.values())), "good")
    db = g.stop()
    check_processes(db, master, workers)
    check_episodes(db, answers, frame="sleep_work")
    viewer_reads(db, answers, master)
    os.kill(master, signal.SIGTERM)
    srv.wait(timeout=30)


@case
def node_cluster():
    srv = spawn(["node", os.path.join(GEN, "node_cluster.js"), "2"])
    master = int(srv.stdout.readline().split()[1])
    workers = read_workers(srv, 2)
    g = Group("-p", str(master), "--children")
    for w in [master, *workers]:
        g.wait_member(w)
    os.kill(master, signal.SIGUSR2)
    late = read_workers(srv, 1)
    g.wait_member(next(iter(late)))
    workers.update(late)
    # a worker forked and exec'd while recording is attached as node, not
    # as the primary it was a copy of for a moment
    answers = [request(port, "sleep") for port in workers.values()]
    db = g.stop()
    procs = check_processes(db, master, workers)
    for w in workers:
        check(os.path.basename(procs[w][2]).startswith("node"),
              f"worker {w}'s binary: {procs[w][2]}")
    check_episodes(db, answers)
    viewer_reads(db)
    os.kill(master, signal.SIGTERM)
    srv.wait(timeout=30)


def nginx_workers(master):
    out = subprocess.run(["pgrep", "-P", str(master)], capture_output=True, text=True).stdout
    return sorted(int(x) for x in out.split())


@case
def nginx():
    d = tmpdir()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    conf = os.path.join(d, "nginx.conf")
    with open(conf, "w") as f:
        f.write(f"""worker_processes 2;
daemon off;
pid {d}/nginx.pid;
error_log {d}/error.log;
events {{ worker_connections 64; }}
http {{
  access_log off;
  client_body_temp_path {d}/body;
  proxy_temp_path {d}/proxy;
  fastcgi_temp_path {d}/fastcgi;
  uwsgi_temp_path {d}/uwsgi;
  scgi_temp_path {d}/scgi;
  server {{ listen 127.0.0.1:{port}; location / {{ return 200 "ok\\n"; }} }}
}}
""")
    srv = subprocess.Popen(["nginx", "-p", d, "-c", conf], stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)
    PROCS.append(srv)
    master = srv.pid
    first = wait_for(lambda: len(nginx_workers(master)) == 2 and nginx_workers(master), 30,
                     "nginx's 2 workers")
    g = Group("-p", str(master), "--children")
    for w in [master, *first]:
        g.wait_member(w)
    os.kill(master, signal.SIGHUP)            # a reload: 2 new workers, the old ones leave
    later = wait_for(lambda: (lambda w: len(w) == 2 and not set(w) & set(first) and w)(
        nginx_workers(master)), 30, "nginx's 2 new workers")
    for w in later:
        g.wait_member(w)
    for _ in range(20):
        with socket.create_connection(("127.0.0.1", port), timeout=10) as c:
            c.sendall(b"GET / HTTP/1.0\r\n\r\n")
            while c.recv(4096):
                pass
    for w in first:                           # the old workers leave after the reload
        g.wait_done(w, "target exited")
    db = g.stop()
    check_processes(db, master, [*first, *later])
    ended = dict(query(db, "SELECT pid, end_reason FROM processes"))
    for w in first:
        eq(ended[w], "target exited", f"the end of old worker {w}")
    viewer_reads(db)
    srv.terminate()
    srv.wait(timeout=30)


def cgroup2_root():
    """Where the cgroup v2 hierarchy is mounted (mountinfo's 5th field)."""
    with open("/proc/self/mountinfo") as f:
        for line in f:
            if " - cgroup2 " in line:
                return line.split()[4]
    raise Fail("no cgroup2 hierarchy mounted")


@case
def comm_cgroup():
    name = f"lsgrp{os.getpid() % 100000}"
    srv = [spawn([sys.executable, os.path.join(GEN, "py_server.py"), "--comm", name])
           for _ in range(2)]
    pids = [int(p.stdout.readline().split()[1]) for p in srv]
    for p in srv:
        p.stdout.readline()                   # its port
    g = Group("--comm", name)
    for p in pids:
        g.wait_member(p)
    third = spawn([sys.executable, os.path.join(GEN, "py_server.py"), "--comm", name])
    pid3 = int(third.stdout.readline().split()[1])
    g.wait_member(pid3)                       # found by the next scan
    db = g.stop()
    got = sorted(r[0] for r in query(db, "SELECT pid FROM processes"))
    eq(got, sorted([*pids, pid3]), "the processes named " + name)

    root = cgroup2_root()
    cg = f"{root}/loopscope-test-{os.getpid()}"
    os.mkdir(cg)
    try:
        with open(f"{cg}/cgroup.procs", "w") as f:
            f.write(str(pids[0]))
        g = Group("--cgroup", cg)
        g.wait_member(pids[0])
        with open(f"{cg}/cgroup.procs", "w") as f:   # a process that joins later
            f.write(str(pids[1]))
        g.wait_member(pids[1])
        with open(f"{root}/cgroup.procs", "w") as f:
            f.write(str(pids[0]))
        with open(f"{root}/cgroup.procs", "w") as f:
            f.write(str(pids[1]))
        os.rmdir(cg)
        wait_for(lambda: (g.lines.append(g.p.stderr.readline().rstrip("\n")) or
                          any("is gone" in l for l in g.lines)), 30, "the cgroup's end said")
        db = g.stop()
        got = sorted(r[0] for r in query(db, "SELECT pid FROM processes"))
        eq(got, sorted(pids[:2]), "the processes of the cgroup")
    finally:
        if os.path.isdir(cg):
            for p in pids:
                try:
                    with open(f"{root}/cgroup.procs", "w") as f:
                        f.write(str(p))
                except OSError:
                    pass
            os.rmdir(cg)


@case
def loops():
    """--loops: every process with a thread asleep in a wait call, looked
    for every 2 s: an asyncio server there at the start and one started
    later are recorded; a process that only sleeps is not.  (RUN_SERIAL in
    CMakeLists.txt: it attaches to every loop of the machine, other tests'
    targets too.)"""
    srv = spawn([sys.executable, os.path.join(GEN, "py_server.py")])
    pid = int(srv.stdout.readline().split()[1])
    srv.stdout.readline()                     # its port: its loop waits
    sleeper = spawn(["sleep", "60"])
    g = Group("--loops")
    g.wait_member(pid)
    second = spawn([sys.executable, os.path.join(GEN, "py_server.py")])
    pid2 = int(second.stdout.readline().split()[1])
    second.stdout.readline()
    g.wait_member(pid2)                       # found by a later scan
    db = g.stop()
    got = {r[0] for r in query(db, "SELECT pid FROM processes")}
    check({pid, pid2} <= got, f"the asyncio servers {pid}, {pid2} not among {sorted(got)}")
    check(sleeper.pid not in got, f"sleep {sleeper.pid} recorded: {sorted(got)}")
    check(os.getpid() not in got and g.p.pid not in got, "the test or the recorder recorded")


@case
def fork_storm():
    """-p PID --children on a process that forks 1000 children at once
    (generic/fork_storm.py): the recorder keeps at most 64 members and 256
    forks waiting, counts the rest (meta processes_unrecorded), keeps its
    memory bounded (under 512 MiB anonymous: each member's own; its
    64 ring buffers of 8 MiB come on top), keeps the parent recorded,
    writes a sound trace, and leaves nothing attached."""
    srv = spawn([sys.executable, os.path.join(GEN, "fork_storm.py"), "1000"])
    pid = int(srv.stdout.readline().split()[1])
    g = Group("-p", str(pid), "--children")
    g.wait_member(pid)
    objs = bpf_objects()
    os.kill(pid, signal.SIGUSR1)
    eq(srv.stdout.readline().strip(), "forked 1000", "the storm's end")
    with open(f"/proc/{g.p.pid}/status") as f:
        st = f.read()
    hwm, anon = (int(re.search(rf"{k}:\s+(\d+) kB", st).group(1)) for k in ("VmHWM", "RssAnon"))
    check(g.p.poll() is None, "the recorder died in the storm")
    db = g.stop()
    eq(g.p.returncode, 0, f"record's exit: {g.err[-300:]!r}")
    integrity(db)
    m = dict(query(db, "SELECT key, value FROM meta"))
    rows = query(db, "SELECT pid, parent_pid FROM processes")
    kids = [p for p, parent in rows if parent == pid]
    print(f"fork storm: {len(rows)} processes rows ({len(kids)} children), unrecorded "
         f"{m.get('processes_unrecorded')}, recorder peak RSS {hwm // 1024} MiB, anonymous "
          f"{anon // 1024} MiB at the storm's end")
    check(pid in [p for p, _ in rows], "the parent is not in the processes table")
    check(kids, "no child was recorded")
    check(int(m.get("processes_unrecorded", 0)) > 0,
          f"1000 children and none unrecorded: {m.get('processes_unrecorded')}")
    # 64 members' ring buffers are 512 MiB of the resident size (mapped,
    # not anonymous); the rest is each member's own
    check(anon < 512 * 1024, f"the recorder's anonymous memory {anon // 1024} MiB")
    check(hwm < 1536 * 1024, f"the recorder's peak RSS {hwm // 1024} MiB")
    wait_for(lambda: not (bpf_objects() - objs), 10,
             f"the recorder's BPF programs to go: {bpf_objects() - objs}")
    os.kill(pid, signal.SIGTERM)
    srv.wait(timeout=30)


def bpf_objects():
    """The ids of the BPF programs loaded on the machine now."""
    r = subprocess.run(["bpftool", "prog", "list"], capture_output=True, text=True)
    return set(re.findall(r"^(\d+):", r.stdout, re.M))


def scrape(url):
    import urllib.request
    with urllib.request.urlopen(url, timeout=10) as r:
        return r.read().decode()


def series(text, name):
    """{labels: value} of a metric family's samples."""
    out = {}
    for line in text.splitlines():
        m = re.match(rf"{name}\{{(.*)\}} (\S+)$", line)
        if m:
            out[m.group(1)] = float(m.group(2))
    return out


@case
def metrics():
    """-p A,B --metrics: one endpoint, each process's series under its pid."""
    srv = [spawn([sys.executable, os.path.join(GEN, "py_server.py")]) for _ in range(2)]
    pids, ports = [], []
    for p in srv:
        pids.append(int(p.stdout.readline().split()[1]))
        ports.append(int(p.stdout.readline().split()[1]))
    g = Group("-p", f"{pids[0]},{pids[1]}", "--metrics", "0")
    for p in pids:
        g.wait_member(p)
    url = None
    while not url:
        line = g.p.stderr.readline()
        check(line, f"no metrics line: {g.lines}")
        g.lines.append(line.rstrip())
        m = re.match(r"metrics: (http://\S+)", line)
        url = m and m.group(1)
    want = {pids[0]: 2, pids[1]: 3}
    for pid, port in zip(pids, ports):
        for _ in range(want[pid]):
            request(port, "sleep")
    def counts():
        eps = series(scrape(url), "loopscope_blocking_episodes_total")
        got = {p: 0 for p in pids}
        for lab, v in eps.items():
            m = re.match(r'pid="(\d+)",loop="(\d+)",kind="off-cpu"', lab)
            if m and int(m.group(1)) in got:
                got[int(m.group(1))] += int(v)
        return got == want and got
    wait_for(counts, 30, lambda: f"episodes per pid {want} in {url}")
    text = scrape(url)
    info = series(text, "loopscope_target_info")
    for p in pids:
        check(any(f'pid="{p}"' in lab for lab in info), f"no target_info for pid {p}: {info}")
    for p in pids:
        check(f'loopscope_tasks_created_total{{pid="{p}"}}' in text, f"no tasks_created of {p}")
    g.stop()


class Agent:
    """loopscope agent with ARGS; its stderr read a line at a time."""

    def __init__(self, *args):
        self.p = subprocess.Popen([A.loopscope, "agent", *args], stderr=subprocess.PIPE,
                                  text=True)
        PROCS.append(self.p)
        self.lines = []

    def until(self, pat):
        """The match of the next line that matches PAT (lines before it read)."""
        while True:
            line = self.p.stderr.readline()
            check(line, f"the agent ended before {pat!r}: {self.lines}")
            self.lines.append(line.rstrip())
            m = re.search(pat, line)
            if m:
                return m


@case
def agent_reload():
    """loopscope agent: SIGHUP reads its configuration again: a name added
    there is attached; a configuration with an error keeps the one before."""
    d = tmpdir()
    names = [f"lsrlA{os.getpid() % 10000}", f"lsrlB{os.getpid() % 10000}"]
    srv = [spawn([sys.executable, os.path.join(GEN, "py_server.py"), "--comm", n]) for n in names]
    pids = [int(p.stdout.readline().split()[1]) for p in srv]
    conf = os.path.join(d, "agent.conf")
    with open(conf, "w") as f:
        f.write(f"comm {names[0]}\ndir {d}/traces\nmetrics 127.0.0.1:0\n")
    agent = Agent("-c", conf)
    p, until = agent.p, agent.until
    until(rf"pid {pids[0]}: recording")
    with open(conf, "a") as f:
        f.write(f"comm {names[1]}\n")
    p.send_signal(signal.SIGHUP)
    until(r"agent: configuration reloaded")
    until(rf"pid {pids[1]}: recording")
    with open(conf, "a") as f:
        f.write("trigger sometimes\n")
    p.send_signal(signal.SIGHUP)
    until(r"invalid --trigger")
    until(r"kept the one before")
    check(p.poll() is None, "the agent ended on a bad configuration")
    # the example unit's configuration, read and said back
    ex = os.path.join(HERE, "..", "..", "examples", "loopscope-agent.conf")
    r = subprocess.run([A.loopscope, "agent", "-c", ex, "--check"], capture_output=True,
                       text=True, timeout=30)
    eq(r.returncode, 0, f"agent --check on {ex} ({r.stderr})")
    for want in ("comm python3", "comm node", "dir /var/lib/loopscope", "max-total 1073741824",
                 "metrics 127.0.0.1:9464", "trigger blocking>=100ms"):
        check(want in r.stdout.splitlines(), f"agent --check: no {want!r} in {r.stdout!r}")
    p.send_signal(signal.SIGTERM)
    _, err = p.communicate(timeout=60)
    eq(p.returncode, 0, f"agent exit status ({err})")
    check("agent: recorded 2 processes" in err, f"the agent's last line: {err!r}")


@case
def agent_full_disk():
    """loopscope agent whose trace directory is full (a 256 KiB tmpfs): a
    triggered trace that cannot be written is said in one line and leaves
    no file behind; the agent keeps recording and serving /metrics, and
    SIGTERM still ends it with exit 0."""
    d = tmpdir()
    full = os.path.join(d, "full")
    os.mkdir(full)
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "loopscope-test", full],
                       capture_output=True, text=True)
    eq(r.returncode, 0, f"mount a tmpfs: {r.stderr}")
    try:
        name = f"lsfull{os.getpid() % 10000}"
        srv = spawn([sys.executable, os.path.join(GEN, "py_server.py"), "--comm", name])
        pid = int(srv.stdout.readline().split()[1])
        port = int(srv.stdout.readline().split()[1])
        agent = Agent("--comm", name, "--dir", full, "--metrics", "127.0.0.1:0",
                      "--trigger", "blocking>=20ms", "--tail", "200ms")
        p, until = agent.p, agent.until
        seen = {}
        while len(seen) < 2:                  # both lines, in either order
            m = until(rf"metrics: (http://\S+)|pid {pid}: (recording)")
            seen["url" if m.group(1) else "pid"] = m.group(1)
        url = seen["url"]
        request(port, "sleep")                # 50 ms: the trigger fires
        err = until(r"error: .*")
        check(re.search(r"flight recorder|space|write", err.group(0)),
              f"the agent's line for the full disk: {err.group(0)!r}")
        request(port, "sleep")
        text = wait_for(lambda: (lambda t: t if "loopscope_blocking_episodes_total" in t and
                                 sum(v for k, v in series(t, "loopscope_blocking_episodes_total")
                                     .items() if f'pid="{pid}"' in k) >= 2 else None)(scrape(url)),
                        30, "both episodes counted by /metrics")
        check(p.poll() is None, "the agent ended on a full disk")
        p.send_signal(signal.SIGTERM)
        _, rest = p.communicate(timeout=60)
        eq(p.returncode, 0, f"the agent's exit status: {rest!r}")
        left = [f for f in os.listdir(full) if re.match(rf"{name}-{pid}-\d+\.db", f)]
        eq(left, [], "half-written traces (or their -wal, -shm) left in the full directory")
    finally:
        subprocess.run(["umount", "-l", full])


@case
def errors():
    d = tmpdir()
    out = os.path.join(d, "x.db")
    dead = subprocess.Popen(["true"])
    dead.wait()
    me = str(os.getpid())
    for args, pat in [
        (["-p", "1,x"], r"invalid pid '1,x'"),
        (["-p", "1,"], r"invalid pid '1,'"),
        (["-p", f"{me},{dead.pid}"], rf"no process with pid {dead.pid}"),
        (["--cgroup", "no-such-loopscope-cgroup"], r"no cgroup 'no-such-loopscope-cgroup'"),
        (["--cgroup", d], r"is not on a cgroup file system"),
        (["--comm", "no-such-name1"], r"no process matches comm no-such-name1"),
        (["--comm", "x" * 16], r"invalid --comm"),
        (["-p", f"{me},{me}", "--flight-recorder", "10s"],
         r"--flight-recorder does not apply to a process group"),
        (["-p", me, "--children", "--backlog", "8M"], r"--backlog does not apply to a process group"),
        (["--comm", "x", "-p", me], r"--comm selects the processes itself"),
        (["--comm", "x", "--cgroup", "y"], r"give one of --cgroup, --comm and --loops"),
        (["--loops", "--comm", "x"], r"give one of --cgroup, --comm and --loops"),
        (["--loops", "-p", me], r"--loops selects the processes itself"),
        (["-p", me, "--wait-hook", "switch", "--no-blocking"], r"--wait-hook switch sees the "
                                                               r"waits from the scheduler"),
        (["--comm", "x", "--dir", d], r"--dir is the agent's"),
        (["agent", "agent", "--dir", d], r"the agent needs a selection"),
        (["agent", "agent", "-p", me, "--dir", d], r"the agent selects processes with --comm"),
        (["agent", "agent", "-c", os.path.join(d, "none.conf")], r"cannot read the configuration"),
        (["agent", "agent", "--comm", "x", "--dir", "/proc/none"], r"cannot make '/proc/none'"),
        (["agent", "agent", "--comm", "x", "--max-total", "1k", "--dir", d],
         r"invalid --max-total"),
    ]:
        cmd = args[1:] if args[0] == "agent" else ["record", "-o", out, *args]
        r = subprocess.run([A.loopscope, *cmd], capture_output=True, text=True, timeout=60)
        check(r.returncode != 0, f"record {args} exited 0")
        lines = r.stderr.strip().splitlines()
        eq(len(lines), 1, f"record {args}: one line ({r.stderr!r})")
        check(re.search(pat, lines[0]) and lines[0].startswith("error: "),
              f"record {args}: {lines[0]!r} (wanted {pat})")
        check(not os.path.exists(out), f"record {args} left {out}")


def cleanup():
    """SIGTERM first: the pre-fork master and the cluster's primary end their
    workers on it; what is left after 10 s is killed."""
    for p in PROCS:
        if p.poll() is None:
            p.terminate()
    for p in PROCS:
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


if __name__ == "__main__":
    A = parse_args(CASES, ["loopscope"])
    sys.exit(run_case(CASES, A, cleanup))
