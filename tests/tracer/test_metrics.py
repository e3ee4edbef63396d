#!/usr/bin/env python3
"""test_metrics.py -- `loopscope record --metrics` (tracer/metrics.c): the
recorder's Prometheus endpoint, scraped by a real Prometheus.

    test_metrics.py CASE --loopscope BIN [--prometheus BIN]

Cases:
    prometheus  generic/py_server.py recorded with --metrics; Debian's
                prometheus scrapes it every second; K blocking requests;
                through Prometheus's HTTP API: the episode count (PromQL),
                the call site's count, `up`, and histogram_quantile over the
                iteration histogram within the 50 ms sleep's bucket
    endpoint    the exposition's grammar line by line (no Prometheus);
                a 404, a 405, a request with no end of headers, clients
                that connect and never send, and one that never reads a
                large answer: each closed within its bound while scrapes
                are still answered; the recording ends cleanly
    errors      a bad address, a port in use, --metrics with
                --flight-recorder: one error line, exit 1
    agent       loopscope agent on two services named in its configuration
                file, scraped by a real Prometheus: episodes counted per
                pid (PromQL), the lag histogram's quantile, a trace per
                trigger; a service restarted under the agent is recorded
                under its new pid and its old series go; the trace
                directory stays under --max-total, the oldest removed

Needs root (recording).  Exit 0 = pass, 1 = fail, 77 = skipped.
"""
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request

from lstest import (Fail, ask, check, eq, integrity, lost, query, wait_for, tmpdir, parse_args,
                    run_case)

HERE = os.path.dirname(os.path.abspath(__file__))
GEN = os.path.join(HERE, "generic")
MS = 1_000_000
PROCS = []
CASES = {}


def case(fn):
    CASES[fn.__name__] = fn
    return fn


def spawn(cmd, **kw):
    p = subprocess.Popen(cmd, **kw)
    PROCS.append(p)
    return p


def cleanup():
    for p in PROCS:
        if p.poll() is None:
            p.kill()
            p.wait()


class Server:
    """generic/py_server.py: "pid N", "port P"; a route per request."""

    def __init__(self, script=None, *args):
        self.p = spawn(["/usr/bin/python3.11", script or os.path.join(GEN, "py_server.py"), *args],
                       stdout=subprocess.PIPE, text=True)
        self.pid = int(self.p.stdout.readline().split()[1])
        self.port = int(self.p.stdout.readline().split()[1])

    def request(self, route):
        ask(self.port, route)


class Recorder:
    """record -p PID --metrics 127.0.0.1:0: its first line, then the URL."""

    def __init__(self, pid, *args):
        self.db = os.path.join(tmpdir(), "trace.db")
        self.p = spawn([A.loopscope, "record", "-p", str(pid), "-o", self.db,
                        "--metrics", "127.0.0.1:0", *args], stderr=subprocess.PIPE, text=True)
        first = self.p.stderr.readline()
        check(first.startswith(f"recording pid {pid} "), f"record's first line: {first!r}")
        line = self.p.stderr.readline()
        m = re.fullmatch(r"metrics: (http://127\.0\.0\.1:(\d+)/metrics)\n", line)
        check(m, f"record's metrics line: {line!r}")
        self.url, self.port = m.group(1), int(m.group(2))

    def stop(self):
        self.p.send_signal(signal.SIGINT)
        _, err = self.p.communicate(timeout=60)
        eq(self.p.returncode, 0, f"record exit status ({err.strip()})")
        integrity(self.db)
        return err


def get(url, timeout=10):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.status, r.headers.get("Content-Type"), r.read().decode()


# ------------------------------------------------------------ the exposition

NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
LABEL = r'[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\[\\"n])*"'
SAMPLE = re.compile(rf"({NAME})(\{{{LABEL}(?:,{LABEL})*\}})? (-?[0-9.e+-]+|\+Inf|NaN)")


def parse(text):
    """{name: [(labels dict, value)]}, each line checked against the text
    format's grammar; every sample's metric has a TYPE line before it."""
    out, types = {}, {}
    check(text.endswith("\n"), "the exposition ends with a newline")
    for line in text.splitlines():
        if line.startswith("# HELP "):
            continue
        if line.startswith("# TYPE "):
            _, _, name, typ = line.split(" ", 3)
            check(typ in ("counter", "gauge", "histogram"), f"type line: {line!r}")
            types[name] = typ
            continue
        m = SAMPLE.fullmatch(line)
        check(m, f"not a sample line: {line!r}")
        name = m.group(1)
        base = re.sub(r"_(bucket|sum|count)$", "", name)
        check(name in types or base in types, f"{name}: no TYPE line before it")
        labels = dict(re.findall(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"',
                                 m.group(2) or ""))
        out.setdefault(name, []).append((labels, float(m.group(3))))
    return out


# ------------------------------------------------------------ Prometheus

class Prometheus:
    """Debian's prometheus on loopback, scraping url every second."""

    def __init__(self, target_port):
        d = tmpdir()
        cfg = os.path.join(d, "prometheus.yml")
        with open(cfg, "w") as f:
            f.write("global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n"
                    "scrape_configs:\n  - job_name: loopscope\n    static_configs:\n"
                    f"      - targets: ['127.0.0.1:{target_port}']\n")
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.log = open(os.path.join(d, "prometheus.log"), "w")
        self.p = spawn([A.prometheus, f"--config.file={cfg}",
                        f"--storage.tsdb.path={os.path.join(d, 'data')}",
                        f"--web.listen-address=127.0.0.1:{self.port}"],
                       stdout=self.log, stderr=subprocess.STDOUT)
        self.api = f"http://127.0.0.1:{self.port}"

        def ready():
            check(self.p.poll() is None, f"prometheus exited: {self.tail()}")
            try:
                return get(self.api + "/-/ready", timeout=2)[0] == 200
            except OSError:
                return False
        wait_for(ready, 60, "prometheus ready")

    def tail(self):
        self.log.flush()
        with open(self.log.name) as f:
            return f.read()[-2000:]

    def query(self, q):
        """The instant query's result vector: [(labels, value)]."""
        st, _, body = get(self.api + "/api/v1/query?" + urllib.parse.urlencode({"query": q}))
        js = json.loads(body)
        eq(js.get("status"), "success", f"query {q}: {body[:500]}")
        return [(r["metric"], float(r["value"][1])) for r in js["data"]["result"]]

    def value(self, q):
        r = self.query(q)
        return r[0][1] if len(r) == 1 else None

    def stop(self):
        self.p.terminate()
        self.p.wait(timeout=30)


@case
def prometheus():
    """A real Prometheus scrapes the recorder: the count of blocking
    episodes, their call site, `up`, and the lag histogram's quantile."""
    srv = Server()
    # -t 30: the 50 ms sleeps are episodes, and a step this VM's host
    # stalls is not (tracer/README.md, "A step's CPU time": beside the
    # stress pass's hogs the kernel charges the loop thread 10-20 ms it
    # did not run, now and then)
    rec = Recorder(srv.pid, "-t", "30")
    prom = Prometheus(rec.port)
    K = 4
    for _ in range(3):
        srv.request("good")
    for _ in range(K):
        srv.request("sleep")          # 50 ms of time.sleep on the loop thread
    srv.request("good")

    def scraped(q, want):
        def ok():
            v = prom.value(q)
            return v is not None and want(v)
        wait_for(ok, 60, lambda: f"{q}: {prom.query(q)} (prometheus: {prom.tail()[-500:]})",
                 interval=0.5)

    scraped('up{job="loopscope"}', lambda v: v == 1)
    scraped('sum(loopscope_blocking_episodes_total{kind="off-cpu"})', lambda v: v == K)
    eq(prom.value('sum(loopscope_blocking_episodes_total{kind="on-cpu"})'), 0.0,
       "on-cpu episodes")
    sites = prom.query('loopscope_blocking_site_episodes_total > 0')
    eq([(s["site"].split()[0], s["site"].rsplit("/", 1)[-1].split(":")[0], v) for s, v in sites],
       [("sleep_work", "py_server.py", float(K))], "the call site's series")
    eq(prom.query(f'loopscope_target_info{{pid="{srv.pid}",mode="generic"}}')[0][0]["runtime"][:7],
       "CPython", "loopscope_target_info's runtime")
    # the windows reach the recorder once a second: the four 50 ms
    # iterations are 2^25 ns (33.5 ms) or longer.  On a quiet machine they
    # are the longest, under 2^26; on a busy one waiting for a CPU makes
    # them, and maybe others, longer
    q = ('sum(loopscope_loop_iteration_seconds_count) - '
         'sum(loopscope_loop_iteration_seconds_bucket{le="0.033554432"})')
    scraped(q, lambda v: v >= K)
    q = 'histogram_quantile(1, sum by (le) (loopscope_loop_iteration_seconds_bucket))'
    scraped(q, lambda v: v >= 0.0335)
    v = prom.value('sum(loopscope_loop_iteration_seconds_count)')
    check(v and v >= K + 4, f"iterations counted: {v}")
    prom.stop()
    rec.stop()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Agent:
    """loopscope agent -c CONFIG: its lines as it attaches ("pid N: recording")."""

    def __init__(self, config):
        self.p = spawn([A.loopscope, "agent", "-c", config], stderr=subprocess.PIPE, text=True)
        self.lines = []
        self.members = set()
        first = self.p.stderr.readline()
        check(first.startswith("agent: "), f"the agent's first line: {first!r}")

    def wait_member(self, pid, timeout=30):
        end = time.monotonic() + timeout
        while pid not in self.members:
            check(time.monotonic() < end, f"the agent never recorded pid {pid}: {self.lines}")
            line = self.p.stderr.readline()
            check(line, f"the agent ended: {self.lines}")
            self.lines.append(line.rstrip())
            m = re.match(r"pid (\d+): recording", line)
            if m:
                self.members.add(int(m.group(1)))

    def stop(self):
        self.p.send_signal(signal.SIGTERM)
        _, err = self.p.communicate(timeout=60)
        eq(self.p.returncode, 0, f"agent exit status ({err.strip()})")
        check(re.search(r"agent: recorded \d+ process", err), f"the agent's last line: {err!r}")


@case
def agent():
    """loopscope agent on two services (by name, from its configuration
    file), scraped by a real Prometheus: each service's episodes counted
    under its pid, the lag histogram's quantile; a service restarted under
    the agent is recorded under its new pid; its traces stay under
    --max-total, the oldest removed first; SIGTERM lets go of everything."""
    d = tmpdir()
    port = free_port()
    names = [f"lsagA{os.getpid() % 10000}", f"lsagB{os.getpid() % 10000}"]
    cap = 8 << 20
    conf = os.path.join(d, "agent.conf")
    with open(conf, "w") as f:
        f.write(f"# two services\ncomm {names[0]}\ncomm = {names[1]}\n"
                f"dir {d}/traces\nmax-total 8M\nmetrics 127.0.0.1:{port}\n"
                "trigger blocking>=30ms   # each 50 ms sleep\nflight-recorder 2s\ntail 100ms\n")
    srv = [Server(None, "--comm", n) for n in names]
    ag = Agent(conf)
    for s in srv:
        ag.wait_member(s.pid)
    prom = Prometheus(port)
    K = {srv[0].pid: 2, srv[1].pid: 3}
    sent = []                         # (pid, CLOCK_MONOTONIC ns) of each sleep
    for s in srv:
        s.request("good")
        for _ in range(K[s.pid]):
            sent.append((s.pid, time.monotonic_ns()))
            s.request("sleep")
            time.sleep(0.3)           # past the tail: a trace each

    def traces():
        """Each finished trace's off-CPU episodes (ms from the first sleep
        sent, ms, syscall) and what it says it lost: for a failure."""
        t0, out = sent[0][1], []
        for t in sorted(os.listdir(os.path.join(d, "traces"))):
            p = os.path.join(d, "traces", t)
            if t.endswith(".db") and not os.path.exists(p + "-wal"):
                eps = [(round((s - t0) / 1e6), round(x / 1e6, 1), sc) for s, x, sc in
                       query(p, "SELECT start_ns, dur_ns, syscall FROM blocking WHERE kind = 1")]
                out.append(f"{t}: {eps}{lost(dict(query(p, 'SELECT key, value FROM meta')))}")
        return (f"sleeps sent at (pid, ms): {[(p, round((x - t0) / 1e6)) for p, x in sent]}; "
                f"traces: {out}")

    def scraped(q, want):
        def ok():
            v = prom.query(q)
            return want(v)
        wait_for(ok, 60, lambda: f"{q}: {prom.query(q)}; every episode series: "
                 f"{prom.query('loopscope_blocking_episodes_total > 0')} "
                 f"{prom.query('loopscope_blocking_site_episodes_total')}; {traces()} "
                 f"(prometheus: {prom.tail()[-500:]})", interval=0.5)

    # each service's sleeps, counted under its pid at their call site.
    # Beside the stress pass's hogs srv[0] once had a third off-CPU
    # episode (where, the metrics do not say: a page fault waiting for the
    # disk is one way): counted under its pid too, at its own site
    at_sleep = 'site=~"sleep_work .*py_server[.]py:[0-9]+"'
    sleeps = f'sum by (pid) (loopscope_blocking_site_episodes_total{{{at_sleep}}})'
    scraped(sleeps, lambda v: {int(l["pid"]): x for l, x in v} == K)
    by_pid = 'sum by (pid) (loopscope_blocking_episodes_total{kind="off-cpu"})'
    scraped(by_pid, lambda v: {int(l["pid"]) for l, _ in v} == set(K) and
            all(x >= K[int(l["pid"])] for l, x in v))
    # srv[1]'s three 50 ms iterations are 2^25 ns (33.5 ms) or longer: on
    # a quiet machine the longest, under 2^26; beside CPU hogs waiting for
    # a CPU makes them, and maybe others, longer (as in prometheus)
    sel = f'{{pid="{srv[1].pid}"}}'
    q = (f'sum(loopscope_loop_iteration_seconds_count{sel}) - '
         f'sum(loopscope_loop_iteration_seconds_bucket{{pid="{srv[1].pid}",le="0.033554432"}})')
    scraped(q, lambda v: len(v) == 1 and v[0][1] >= K[srv[1].pid])
    q = f'histogram_quantile(1, sum by (le) (loopscope_loop_iteration_seconds_bucket{sel}))'
    scraped(q, lambda v: len(v) == 1 and v[0][1] >= 0.0335)
    # a trace per trigger, or several triggers in one when one came during
    # another's tail: their flight_triggers add up to the requests
    def triggers():
        n = 0
        for t in os.listdir(os.path.join(d, "traces")):
            p = os.path.join(d, "traces", t)
            if t.endswith(".db") and not os.path.exists(p + "-wal"):
                n += int(dict(query(p, "SELECT key, value FROM meta")).get("flight_triggers", 0))
        return n
    wait_for(lambda: triggers() == sum(K.values()), 30,
             lambda: f"{sum(K.values())} triggers in the traces, got {triggers()}")

    # the first service restarted: the agent attaches to the new process
    old = srv[0].pid
    srv[0].p.kill()
    srv[0].p.wait()
    srv[0] = Server(None, "--comm", names[0])
    ag.wait_member(srv[0].pid)
    srv[0].request("sleep")
    # its site's count starts at 0 (not the counts of the ended process
    # whose room it takes)
    scraped(f'loopscope_blocking_site_episodes_total{{pid="{srv[0].pid}",{at_sleep}}}',
            lambda v: v and v[0][1] == 1)
    scraped(f'loopscope_blocking_episodes_total{{pid="{srv[0].pid}",kind="off-cpu"}}',
            lambda v: v and v[0][1] >= 1)
    scraped(f'loopscope_target_info{{pid="{old}"}}', lambda v: not v)  # its series gone

    # the cap: traces past 8 MiB, the oldest removed (the first trace of
    # the second service goes first): as many triggers as that takes
    first = os.path.join(d, "traces", f"{names[1]}-{srv[1].pid}-1.db")
    check(os.path.exists(first), f"no {first}")
    for _ in range(100):
        srv[1].request("sleep")
        time.sleep(0.2)
        if not os.path.exists(first):
            break
    check(not os.path.exists(first), "100 triggers later, the oldest trace is still there")

    def dbs():
        out = []
        for t in os.listdir(os.path.join(d, "traces")):
            p = os.path.join(d, "traces", t)
            if t.endswith(".db") and not os.path.exists(p + "-wal"):
                out.append((os.stat(p).st_mtime_ns, t, os.path.getsize(p)))
        return sorted(out)
    wait_for(lambda: sum(x[2] for x in dbs()) <= cap, 30, lambda: f"traces under 8M: {dbs()}")
    kept = dbs()
    total = sum(x[2] for x in kept)
    n_made = max(int(re.search(r"-(\d+)\.db$", t).group(1)) for _, t, _ in kept
                 if f"-{srv[1].pid}-" in t)
    check(n_made > len([t for _, t, _ in kept if f"-{srv[1].pid}-" in t]),
          f"no trace of pid {srv[1].pid} was removed: {kept}")
    check(total > cap / 2, f"the cap removed more than it had to: {total} bytes left of {kept}")
    print(f"  note: {len(kept)} traces kept, {total} bytes; pid {srv[1].pid}'s newest is "
          f"number {n_made}")
    prom.stop()
    ag.stop()
    for s in srv:
        check(s.p.poll() is None, "a service died under the agent")


def scrape_with_site(rec):
    """The parsed exposition once it has a call site's series.  They
    appear once the recorder, at idle priority, has read the episode's
    messages: on a busy machine that can be long after the reply."""
    def with_site():
        m = parse(get(rec.url)[2])
        return m if "loopscope_blocking_site_episodes_total" in m else None
    return wait_for(with_site, 60, "a call site's series in the exposition", interval=0.2)


@case
def endpoint():
    """The exposition's grammar; bad requests and slow clients are closed
    within their bounds while scrapes go on being answered."""
    srv = Server()
    rec = Recorder(srv.pid)
    srv.request("sleep")
    st, ctype, body = get(rec.url)
    eq(st, 200, "GET /metrics")
    eq(ctype, "text/plain; version=0.0.4; charset=utf-8", "content type")
    m = scrape_with_site(rec)
    for name in ("loopscope_target_info", "loopscope_loop_iteration_seconds_bucket",
                 "loopscope_blocking_episodes_total", "loopscope_blocking_site_episodes_total",
                 "loopscope_tasks", "loopscope_dropped_messages_total",
                 "loopscope_recorder_cpu_seconds_total", "loopscope_recorder_resident_bytes"):
        check(name in m, f"no {name} in the exposition")
    buckets = [v for l, v in m["loopscope_loop_iteration_seconds_bucket"]]
    check(buckets == sorted(buckets), f"histogram buckets not cumulative: {buckets}")

    def raw(req, read=True):
        c = socket.create_connection(("127.0.0.1", rec.port), timeout=10)
        c.sendall(req)
        if not read:
            return c
        got = b""
        while True:
            try:
                b = c.recv(65536)
            except ConnectionResetError:   # closed with our bytes unread
                b = b""
            if not b:
                break
            got += b
        c.close()
        return got

    check(raw(b"GET /nope HTTP/1.1\r\n\r\n").startswith(b"HTTP/1.1 404 "), "404")
    check(raw(b"POST /metrics HTTP/1.1\r\n\r\n").startswith(b"HTTP/1.1 405 "), "405")
    check(raw(b"HEAD /metrics HTTP/1.0\r\n\r\n").split(b"\r\n\r\n", 1)[1] == b"", "HEAD: no body")
    # no end of headers in 2 KiB: closed without an answer
    try:
        eq(raw(b"GET /metrics HTTP/1.1\r\nX: " + b"a" * 4000), b"", "endless headers")
    except (BrokenPipeError, ConnectionResetError):
        pass                            # closed while we still sent: as good
    # eight clients that never send: they hold every slot until their 5 s
    # are up; a scrape then waits for one (its own bound: 10 s), then works
    idle = [raw(b"", read=False) for _ in range(8)]
    t0 = time.monotonic()
    st, _, body = get(rec.url, timeout=15)
    eq(st, 200, "a scrape behind eight idle clients")
    check(time.monotonic() - t0 < 12, "the scrape waited past the idle clients' bound")
    for c in idle:
        c.settimeout(10)
        eq(c.recv(10), b"", "an idle client is closed")
        c.close()
    # a client that asks and never reads: its answer is dropped at 5 s
    lazy = raw(b"GET /metrics HTTP/1.1\r\n\r\n", read=False)
    eq(get(rec.url)[0], 200, "a scrape beside a client that does not read")
    lazy.close()
    srv.request("sleep")
    check(parse(get(rec.url)[2]), "a scrape after all that")
    err = rec.stop()
    # the two sleeps; beside CPU hogs (tests/run.sh --stress) a step the
    # server was preempted in can add one
    n = re.search(r"recorded (\d+) blocking episodes", err)
    check(n and int(n.group(1)) >= 2, f"record's summary: {err!r}")


@case
def hostile_labels():
    """The target's name and its source's path in label values: a command
    name with a quote, a backslash and a newline, a call site whose file
    is in a directory named with the same: escaped, Prometheus-parsable,
    the values round-trip."""
    d = os.path.join(tmpdir(), 'we"ird\\dir\nname')
    os.makedirs(d)
    script = os.path.join(d, "py_server.py")
    with open(os.path.join(GEN, "py_server.py")) as src, open(script, "w") as dst:
        dst.write(src.read())
    comm = 'a"b\\c\nd\x1be'
    srv = Server(script, "--comm", comm)
    rec = Recorder(srv.pid)
    srv.request("sleep")
    m = scrape_with_site(rec)
    unesc = lambda v: re.sub(r'\\(.)', lambda x: {"n": "\n"}.get(x.group(1), x.group(1)), v)
    eq([unesc(l["comm"]) for l, _ in m["loopscope_target_info"]], [comm.replace("\x1b", "\\x1b")],
       "comm, escaped and read back (control bytes as \\xHH)")
    sites = [unesc(l["site"]) for l, v in m["loopscope_blocking_site_episodes_total"] if v]
    eq(sites, [f"sleep_work {script}:{marked_sleep_line(script)}"], "the site, read back")
    rec.stop()


def marked_sleep_line(path):
    for i, line in enumerate(open(path), 1):
        if line.strip() == "time.sleep(0.05)":
            return i
    raise Fail(f"no sleep line in {path}")


@case
def errors():
    """Bad --metrics values, a port in use, --flight-recorder: one line,
    exit 1."""
    srv = Server()
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        used = busy.getsockname()[1]
        for spec, status, want in (
                ("x", 2, r"invalid --metrics port 'x' \(0-65535\)"),
                ("70000", 2, r"invalid --metrics port '70000' \(0-65535\)"),
                (":80", 2, r"invalid --metrics ':80' \(\[HOST:\]PORT\)"),
                ("no.such.host.invalid:9", 1, r"--metrics: cannot resolve 'no\.such\.host\.invalid': .*"),
                (f"127.0.0.1:{used}", 1,
                 rf"--metrics: cannot listen on 127\.0\.0\.1 port {used}: Address already in use")):
            d = tmpdir()
            r = subprocess.run([A.loopscope, "record", "-p", str(srv.pid), "-o",
                                os.path.join(d, "t.db"), "--metrics", spec],
                               capture_output=True, text=True, timeout=60)
            eq(r.returncode, status, f"--metrics {spec}: exit status ({r.stderr!r})")
            check(re.fullmatch(rf"error: {want}\n", r.stderr), f"--metrics {spec}: {r.stderr!r}")
    r = subprocess.run([A.loopscope, "record", "-p", str(srv.pid), "--metrics", "0",
                        "--flight-recorder", "10s"], capture_output=True, text=True, timeout=60)
    eq(r.returncode, 2, f"--metrics with --flight-recorder ({r.stderr!r})")
    check("--metrics does not apply to --flight-recorder" in r.stderr, repr(r.stderr))


if __name__ == "__main__":
    A = parse_args(CASES, ("loopscope", "prometheus"))
    if not A.prometheus:
        A.prometheus = "/usr/bin/prometheus"
    sys.exit(run_case(CASES, A, cleanup))
