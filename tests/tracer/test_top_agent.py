#!/usr/bin/env python3
"""test_top_agent.py -- `loopscope top --agent` (viewer/cmd_top_agent.c):
what a `loopscope agent` sees, read from its /metrics.

    test_top_agent.py CASE --loopscope BIN

Cases:
    agent        loopscope agent on two generic/py_server.py (by name, from
                 its configuration file), K sleep requests each (a 50 ms
                 blocking episode at sleep_work): `top --agent ADDR --text
                 -d 3` shows both processes with K episodes in total and
                 the sleep_work site per pid, the agent's CPU share and RSS;
                 one more request while top runs shows in one interval; a
                 service killed under the agent leaves the view
    bad_address  nothing listening, a bad port, a name that does not
                 resolve: one error line, a non-zero exit, nothing on stdout
    hostile      a fake agent (Python HTTP server) answering a hostile
                 exposition: escapes, ANSI and control bytes in comm and site,
                 malformed lines, more loops than top keeps; the output has
                 no control byte; 404, an endless answer, more than 16 MiB,
                 silence: one error line each; an agent that goes away
                 while top runs: said, retried, back

Needs root (the agent records).  Exit 0 = pass, 1 = fail, 77 = skipped.
"""
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from lstest import Fail, ask, check, eq, wait_for, tmpdir, schedstat, parse_args, run_case

HERE = os.path.dirname(os.path.abspath(__file__))
GEN = os.path.join(HERE, "generic")
PY = "/usr/bin/python3.11"          # the targets' CPython, as in test_metrics.py
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


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """generic/py_server.py: "pid N", "port P"; a route per request."""

    def __init__(self, *args):
        self.p = spawn([PY, os.path.join(GEN, "py_server.py"), *args],
                       stdout=subprocess.PIPE, text=True)
        self.pid = int(self.p.stdout.readline().split()[1])
        self.port = int(self.p.stdout.readline().split()[1])

    def request(self, route):
        ask(self.port, route)


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


def top(addr, *args, timeout=60):
    r = subprocess.run([A.loopscope, "top", "--agent", addr, "--text", *args],
                       capture_output=True, text=True, timeout=timeout)
    return r


LOOP = re.compile(r"loop: pid (\d+)  loop (\S+)  iterations/s (\S+)  busy (\S+)  idle (\S+)  "
                  r"lag p50 (\S+)  p99 (\S+)  blocking (\S+) \(total (\S+)\)  "
                  r"blocked (\S+) \(total (\S+)\)  comm (.*)")
SITE = re.compile(r"site: pid (\d+)  episodes (\S+) \(total (\S+)\)  blocked (\S+) "
                  r"\(total (\S+)\)  (.*)")


def blocks(out):
    """The text blocks: [(header, {pid: loop match}, [site matches])]."""
    res = []
    for chunk in out.split("\n\n"):
        lines = chunk.strip("\n").splitlines()
        if not lines or not lines[0].startswith("top: agent "):
            continue
        loops = {}
        sites = []
        for l in lines[1:]:
            m = LOOP.fullmatch(l)
            if m:
                loops[int(m.group(1))] = m
            m = SITE.fullmatch(l)
            if m:
                sites.append(m)
        res.append((lines[0], loops, sites))
    return res


def metric_total(port, name, pid):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        body = r.read().decode()
    return sum(float(v) for v in re.findall(rf'^{name}{{pid="{pid}",[^}}]*}} (\S+)$', body, re.M))


@case
def agent():
    """Two services under the agent: top --agent shows each with its
    episodes and the sleep_work site; an episode while it runs shows in one
    interval; a killed service leaves the view."""
    d = tmpdir()
    port = free_port()
    names = [f"lstaA{os.getpid() % 10000}", f"lstaB{os.getpid() % 10000}"]
    conf = os.path.join(d, "agent.conf")
    with open(conf, "w") as f:
        f.write(f"comm {names[0]}\ncomm {names[1]}\ndir {d}/traces\nmax-total 16M\n"
                f"metrics 127.0.0.1:{port}\ntrigger blocking>=30ms   # each 50 ms sleep an episode\n"
                # and no step the VM's host stalls (lstest.charged)
                "block-threshold 30\n")
    srv = [Server("--comm", n) for n in names]
    ag = Agent(conf)
    for s in srv:
        ag.wait_member(s.pid)
    K = {srv[0].pid: 2, srv[1].pid: 3}
    delay = {}                          # each loop thread's wait for a CPU
    for s in srv:
        s.request("good")
        d0 = schedstat(s.pid)[1]
        for _ in range(K[s.pid]):
            s.request("sleep")          # 50 ms of time.sleep on the loop thread
            time.sleep(0.2)             # the loop waits between two: two episodes
        delay[s.pid] = schedstat(s.pid)[1] - d0
    for s in srv:
        wait_for(lambda: metric_total(port, "loopscope_blocking_episodes_total", s.pid)
                 == K[s.pid], 30, lambda: f"the agent counting pid {s.pid}'s episodes: "
                 f"{metric_total(port, 'loopscope_blocking_episodes_total', s.pid)} "
                 f"(agent: {ag.lines})")

    r = top(f"127.0.0.1:{port}", "-d", "3")
    eq(r.returncode, 0, f"top --agent's exit status ({r.stderr!r})")
    eq(r.stderr, "", "top --agent's stderr")
    bl = blocks(r.stdout)
    eq(len(bl), 3, f"text blocks in 3 s:\n{r.stdout}")
    check(r.stdout.endswith("top: stopped: duration reached\n"), f"last line:\n{r.stdout}")
    head, loops, sites = bl[-1]
    check(re.search(r"agent cpu \d+\.\d%  rss \d+\.\d MiB  processes 2  loops 2$", head),
          f"header: {head!r}")
    for s, n in zip(srv, names):
        m = loops.get(s.pid)
        check(m, f"no loop line for pid {s.pid}:\n{r.stdout}")
        eq(m.group(2), str(s.pid), "a generic loop's id: its thread")
        eq(m.group(9), str(K[s.pid]), f"pid {s.pid}'s episodes in total")
        eq(m.group(8), "0", f"pid {s.pid}'s episodes in the last interval")
        check(m.group(12).startswith(f"{n} (generic, CPython"), f"comm: {m.group(12)!r}")
        # an episode lasts until the sleeping thread is back on a CPU:
        # beside CPU hogs (tests/run.sh --stress) its wait for one, too
        ms = float(m.group(11).removesuffix("ms"))
        hi = 60 * K[s.pid] + delay[s.pid] / 1e6
        check(m.group(11).endswith("ms") and 50 * K[s.pid] <= ms < hi,
              f"pid {s.pid} blocked in total: {m.group(11)}, not in [{50 * K[s.pid]}, {hi:.1f}) "
              f"(its wait for a CPU {delay[s.pid] / 1e6:.1f} ms)")
        st = [x for x in sites if int(x.group(1)) == s.pid]
        eq(len(st), 1, f"pid {s.pid}'s sites:\n{r.stdout}")
        eq(st[0].group(3), str(K[s.pid]), f"pid {s.pid}'s site episodes in total")
        check(re.fullmatch(r"sleep_work \S+/py_server\.py:\d+", st[0].group(6)),
              f"site: {st[0].group(6)!r}")
    # every block compares two answers: nothing blocked in those intervals
    eq([b[1][s.pid].group(8) for b in bl for s in srv], ["0"] * 6, "interval episodes")

    # one more episode while top runs: in one interval exactly
    p = spawn([A.loopscope, "top", "--agent", str(port), "--text", "-d", "6"],
              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    first = p.stdout.readline()
    check(first.startswith(f"top: agent 127.0.0.1:{port}  "), f"first line: {first!r}")
    srv[0].request("sleep")
    out, err = p.communicate(timeout=60)
    eq(p.returncode, 0, f"top --agent's exit status ({err!r})")
    bl = blocks(first + out)
    per = [b[1][srv[0].pid].group(8) for b in bl]
    eq(sorted(per), ["0"] * (len(per) - 1) + ["1"], f"pid {srv[0].pid}'s episodes "
       f"per interval:\n{first + out}")
    eq(bl[-1][1][srv[0].pid].group(9), str(K[srv[0].pid] + 1), "its total")
    check(any(x.group(2) == "1" and int(x.group(1)) == srv[0].pid for b in bl for x in b[2]),
          "the site's interval episode")

    # a service gone: its rows go
    gone = srv[1].pid
    srv[1].p.kill()
    srv[1].p.wait()
    def without():
        r = top(str(port), "-d", "1")
        return r.returncode == 0 and gone not in blocks(r.stdout)[-1][1]
    wait_for(without, 30, f"pid {gone} leaving top --agent's view")
    r = top(str(port), "-d", "1")
    check(srv[0].pid in blocks(r.stdout)[-1][1], f"pid {srv[0].pid} still there:\n{r.stdout}")
    check(not any(int(x.group(1)) == gone for x in blocks(r.stdout)[-1][2]),
          f"pid {gone}'s site gone:\n{r.stdout}")
    ag.stop()


@case
def bad_address():
    """Nothing listening, a bad port, an unknown host: one error line,
    non-zero, stdout empty."""
    port = free_port()
    for spec, status, want in (
            (str(port), 1, rf"cannot connect to 127\.0\.0\.1 port {port}: Connection refused"),
            (f"127.0.0.1:{port}", 1,
             rf"cannot connect to 127\.0\.0\.1 port {port}: Connection refused"),
            ("70000", 2, r"invalid --agent port '70000' \(1-65535\)"),
            ("host:x", 2, r"invalid --agent port 'x' \(1-65535\)"),
            ("no.such.host.invalid:9", 1, r"cannot resolve 'no\.such\.host\.invalid': .*")):
        r = top(spec, "-d", "3")
        eq(r.returncode, status, f"--agent {spec}: exit status ({r.stderr!r})")
        check(re.fullmatch(rf"error: {want}\n", r.stderr), f"--agent {spec}: {r.stderr!r}")
        eq(r.stdout, "", f"--agent {spec}: stdout")
    r = subprocess.run([A.loopscope, "top", f"--agent={port}", "-p", "1"], capture_output=True,
                       text=True, timeout=30)
    eq(r.returncode, 2, "--agent with -p")


class Fake:
    """A fake agent: answers GET /metrics with self.body (bytes), or as
    self.mode says: 'ok', '404', 'silent', 'endless', 'huge'."""

    def __init__(self):
        fake = self
        self.body = b""
        self.mode = "ok"

        class H(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_GET(self):
                if fake.mode == "silent":
                    time.sleep(8)
                    return
                if fake.mode == "404":
                    self.send_error(404)
                    return
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.end_headers()
                try:
                    if fake.mode == "endless":       # a byte a second
                        for _ in range(30):
                            self.wfile.write(b"#")
                            self.wfile.flush()
                            time.sleep(1)
                    elif fake.mode == "huge":
                        chunk = b"x 1\n" * 65536
                        for _ in range(80):          # 20 MiB
                            self.wfile.write(chunk)
                    else:
                        self.wfile.write(fake.body)
                except OSError:
                    pass

        self.srv = ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.srv.daemon_threads = True
        self.port = self.srv.server_address[1]
        threading.Thread(target=self.srv.serve_forever, daemon=True).start()

    def close(self):
        self.srv.shutdown()
        self.srv.server_close()


def hostile_body(n_loops, cpu):
    esc = lambda s: s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    comm = 'ev\x1b[2Jil\x07"\\\n\u202e\udcff'
    site = "f\x1b]0;title\x07 /a\nb\x9b.py:1"
    out = ["# HELP loopscope_target_info x", "# TYPE loopscope_target_info gauge",
           f'loopscope_target_info{{pid="100",comm="{esc(comm)}",mode="gen\x1b[31m",'
           f'runtime="\\\\x01"}} 1',
           f'loopscope_target_info{{pid="200",comm="{"c" * 2000}"}} 1',   # cut to 63 bytes
           f'loopscope_target_info{{pid="300",comm="{"c" * 3000}"}} 1',   # over the bound
           'loopscope_target_info{pid="-5",comm="neg"} 1',
           'loopscope_target_info{pid="99999999999",comm="big"} 1',
           'loopscope_tasks{pid="100",state="ready"} NaN',
           "garbage line {{{", 'loopscope_loop_wait_seconds_total{pid="100",loop="x"} 1',
           'loopscope_blocking_episodes_total{pid="100",loop="100",kind="off-cpu"} 1e308',
           f"loopscope_recorder_cpu_seconds_total {cpu}",
           "loopscope_recorder_resident_bytes -1",
           f'loopscope_blocking_site_episodes_total{{pid="100",site="{esc(site)}"}} 4',
           f'loopscope_blocking_site_seconds_total{{pid="100",site="{esc(site)}"}} 0.2']
    for i in range(n_loops):
        lab = f'pid="100",loop="{1000 + i}"'
        for b in (0.001, 0.002, "+Inf", 0.002, "1e-3", "NaN", "x"):
            out.append(f'loopscope_loop_iteration_seconds_bucket{{{lab},le="{b}"}} {i}')
        out.append(f"loopscope_loop_iteration_seconds_count{{{lab}}} {i}")
        out.append(f"loopscope_loop_iteration_seconds_sum{{{lab}}} {i / 1000}")
    return ("\n".join(out) + "\n").encode("utf-8", "surrogateescape")


def clean(text, what):
    bad = [c for c in text if (ord(c) < 32 and c != "\n") or 0x7f <= ord(c) < 0xa0
           or c in "\u202e\ufffd"]
    check(not bad, f"{what}: control characters in the output: {bad[:10]}")


@case
def hostile():
    """A fake agent: hostile strings escaped, bounds kept, broken answers
    one error line each, an agent that goes away said and retried."""
    fk = Fake()
    fk.body = hostile_body(5000, 1.0)
    r = subprocess.run([A.loopscope, "top", "--agent", str(fk.port), "--text", "-d", "2"],
                       capture_output=True, timeout=60)
    out = r.stdout.decode("utf-8", "replace")
    eq(r.returncode, 0, f"exit status ({r.stderr!r})")
    clean(out, "hostile exposition")
    bl = blocks(out)
    check(bl, f"no block:\n{out[:2000]}")
    head, loops, sites = bl[-1]
    check("processes 2  loops 4096  (some series ignored)" in head, f"header: {head!r}")
    check("agent cpu 0.0%  rss -" in head, f"header: {head!r}")
    m = loops.get(100)
    check(m and m.group(12).startswith(r'ev\x1b[2Jil\x07"\\n\u202e\xff (gen\x1b[31m, \x01)'),
          f"comm: {m and m.group(12)!r}")
    eq(len(sites), 1, "one site")
    check(sites[0].group(6).startswith("f\\x1b]0;title\\x07 /a\\nb"), f"site: {sites[0].group(6)!r}")
    check(re.search(r"^loop: pid 200  loop -  .* comm c{63} \(\)$", out, re.M),
          "pid 200: no loop series, its comm cut")
    check("pid 300" not in out, "pid 300: its comm over the bound, the line skipped")
    check("pid -5" not in out and "99999999999" not in out, "bad pids ignored")

    # broken answers at start: one error line, exit 1
    for mode, want in (("404", r"127\.0\.0\.1 port \d+ answered HTTP 404, not the metrics"),
                       ("silent", r"127\.0\.0\.1 port \d+: no whole answer in time"),
                       ("endless", r"127\.0\.0\.1 port \d+: no whole answer in time"),
                       ("huge", r"127\.0\.0\.1 port \d+: answer larger than 16 MiB")):
        fk.mode = mode
        t0 = time.monotonic()
        r = top(str(fk.port), "-d", "1")
        eq(r.returncode, 1, f"{mode}: exit status ({r.stderr!r})")
        check(re.fullmatch(rf"error: {want}\n", r.stderr), f"{mode}: {r.stderr!r}")
        check(time.monotonic() - t0 < 15, f"{mode}: took {time.monotonic() - t0:.1f} s")

    # the agent goes away while top runs, then comes back on the same port
    fk.mode = "ok"
    fk.body = hostile_body(2, 1.0)
    port = fk.port
    p = spawn([A.loopscope, "top", "--agent", str(port), "--text", "-d", "6"],
              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    check(p.stdout.readline().startswith("top: agent "), "first block")
    fk.close()
    time.sleep(2.5)
    back = ThreadingHTTPServer(("127.0.0.1", port), fk.srv.RequestHandlerClass)
    fk.body = hostile_body(2, 1.5)
    threading.Thread(target=back.serve_forever, daemon=True).start()
    out, err = p.communicate(timeout=60)
    back.shutdown()
    eq(p.returncode, 0, f"exit status ({err!r})")
    check(re.search(r"^top: agent unreachable for \d+s: cannot connect to 127\.0\.0\.1 port "
                    rf"{port}: Connection refused \(retrying\)$", out, re.M),
          f"no unreachable line:\n{out}")
    last = blocks(out)[-1]
    check(100 in last[1], f"back: the last block shows the agent again:\n{out}")
    check(out.endswith("top: stopped: duration reached\n"), f"last line:\n{out}")


if __name__ == "__main__":
    A = parse_args(CASES, ("loopscope",))
    sys.exit(run_case(CASES, A, cleanup))
