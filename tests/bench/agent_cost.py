#!/usr/bin/env python3
"""agent_cost.py -- what `loopscope agent` costs the services it watches, and itself.

    tests/bench/agent_cost.py [--build DIR] [--rounds N] [--seconds S] [--idle S]
                              [--parts redis,http,idle]

Needs root (BPF), wrk, redis-server and redis-benchmark (exit status 77
otherwise).  Each service runs in a cgroup of its own (made under the
cgroup v2 hierarchy, removed on exit); "agent" means `loopscope agent
--cgroup THAT` with its defaults (a 30 s flight recorder per process,
trigger blocking>=100ms, metrics on a free port), started before the run
and stopped with SIGTERM after it; the run starts once the agent has
printed "pid N: recording".  Parts:

redis -- Debian's redis-server under `redis-benchmark -t get,set -c 8 -P 1`
    (N requests, about S seconds a run), in paired rounds: none, agent,
    agent, none (ABBA, so that a drift of the machine hurts both alike).
http  -- tests/bench/asyncio_http_server.py under `wrk -t1 -c8 -d S`, the
    same rounds.
    For both: each run's requests/s, the agent's CPU time over the run (its
    threads; the BPF programs' time is the service's and the machine's, in
    the ratio); the summary's ratio of medians (agent / none) and the
    median of the paired ratios (each agent run over its round's mean none).
idle  -- both services idle, the agent attached to both for --idle seconds:
    the agent's CPU as a share of one CPU, its resident memory.

A benchmark, not a test: it prints numbers, it never passes or fails on
speed.  It fails (exit 1) when something misbehaves: a service or the
agent exits with an error, the agent never attaches.
"""
import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tracer_bench import exit_on_sigterm  # noqa: E402
from http_overhead import cpu_seconds, free_port, wrk  # noqa: E402
from generic_overhead import Background, load, median, redis_bench  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))


def cgroup2_root():
    with open("/proc/self/mountinfo") as f:
        for line in f:
            if " - cgroup2 " in line:
                return line.split()[4]
    raise RuntimeError("no cgroup2 hierarchy mounted")


class Cgroup:
    """A cgroup of its own for a service; its processes moved back on exit."""

    def __init__(self, name):
        self.root = cgroup2_root()
        self.path = os.path.join(self.root, f"loopscope-bench-{name}-{os.getpid()}")
        os.mkdir(self.path)

    def add(self, pid):
        with open(os.path.join(self.path, "cgroup.procs"), "w") as f:
            f.write(str(pid))

    def remove(self):
        with open(os.path.join(self.path, "cgroup.procs")) as f:
            pids = f.read().split()
        for p in pids:
            try:
                with open(os.path.join(self.root, "cgroup.procs"), "w") as f:
                    f.write(p)
            except OSError:
                pass
        os.rmdir(self.path)


class Agent:
    """loopscope agent on cgroups, attached once each pid is said."""

    def __init__(self, loopscope, cgroups, pids, tmp):
        d = tempfile.mkdtemp(dir=tmp)
        args = [loopscope, "agent", "--dir", d, "--metrics", "127.0.0.1:0"]
        for c in cgroups:
            args += ["--cgroup", c]
        self.bg = Background(args, "loopscope agent")
        for p in pids:
            self.bg.wait_for(re.compile(rf"pid {p}: recording"), 60)
        self.pid = self.bg.proc.pid

    def stop(self):
        self.bg.proc.send_signal(signal.SIGTERM)
        rc = self.bg.proc.wait(timeout=60)
        self.bg.thread.join()
        if rc != 0:
            raise RuntimeError(f"the agent exited {rc}:\n{self.bg.output()}")

    def rss(self):
        with open(f"/proc/{self.pid}/status") as f:
            m = re.search(r"VmRSS:\s+(\d+) kB", f.read())
        return int(m.group(1)) * 1024 if m else 0


def rounds(a, tools, tmp, cg, pid, run_once, unit):
    """ABBA rounds of none and agent: each run's (rate, agent cpu s/s)."""
    runs = {"none": [], "agent": []}
    print(f"{'round':>5} {'mode':6} {unit:>9} {'agent cpu %':>11}")
    for r in range(a.rounds):
        for mode in ("none", "agent", "agent", "none"):
            ag = Agent(tools["loopscope"], [cg.path], [pid], tmp) if mode == "agent" else None
            try:
                c0, t0 = (cpu_seconds(ag.pid) if ag else 0), time.monotonic()
                rate = run_once()
                cpu = ((cpu_seconds(ag.pid) - c0) / (time.monotonic() - t0)) if ag else 0.0
            finally:
                if ag:
                    ag.stop()
            runs[mode].append((r, rate, cpu))
            print(f"{r + 1:5d} {mode:6} {rate:9.0f} {cpu * 100:11.2f}", flush=True)
    none = [x[1] for x in runs["none"]]
    agent = [x[1] for x in runs["agent"]]
    paired = []
    for r in range(a.rounds):
        base = median([x[1] for x in runs["none"] if x[0] == r])
        paired += [x[1] / base for x in runs["agent"] if x[0] == r]
    print(f"summary ({load()}): ratio of medians {median(agent) / median(none):.3f}, "
          f"median paired ratio {median(paired):.3f}; agent CPU "
          f"{median([x[2] for x in runs['agent']]) * 100:.2f} % of one CPU (median)")
    return median(agent) / median(none), median(paired)


def part_redis(a, tools, tmp):
    port = free_port()
    rdir = tempfile.mkdtemp(dir=tmp)
    server = subprocess.Popen([tools["redis-server"], "--port", str(port), "--bind", "127.0.0.1",
                               "--save", "", "--appendonly", "no", "--dir", rdir,
                               "--daemonize", "no"],
                              stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    cg = Cgroup("redis")
    try:
        cg.add(server.pid)
        deadline = time.monotonic() + 20
        while subprocess.run(["redis-cli", "-h", "127.0.0.1", "-p", str(port), "ping"],
                             capture_output=True, text=True).stdout.strip() != "PONG":
            if server.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("redis-server did not start")
            time.sleep(0.1)
        _, reqs, secs = redis_bench(port, 20000)                # warm up
        n = max(1000, int(reqs / secs * a.seconds / 2))
        print(f"redis: redis-server under redis-benchmark -t get,set -n {n} -c 8 -P 1 "
              f"(about {a.seconds} s a run), {a.rounds} ABBA rounds; {load()}")

        def once():
            _, reqs, secs = redis_bench(port, n)
            return reqs / secs
        return rounds(a, tools, tmp, cg, server.pid, once, "req/s")
    finally:
        server.terminate()
        server.wait(timeout=30)
        cg.remove()


def start_http():
    server = subprocess.Popen([sys.executable, os.path.join(HERE, "asyncio_http_server.py")],
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    pid = int(server.stdout.readline().split()[1])
    port = int(server.stdout.readline().split()[1])
    return server, pid, f"http://127.0.0.1:{port}/"


def part_http(a, tools, tmp):
    server, pid, url = start_http()
    cg = Cgroup("http")
    try:
        cg.add(pid)
        wrk(url, 1, 8, 1)                                       # warm up
        print(f"http: asyncio_http_server.py (python {sys.version.split()[0]}) under "
              f"wrk -t1 -c8 -d{a.seconds}s, {a.rounds} ABBA rounds; {load()}")
        return rounds(a, tools, tmp, cg, pid, lambda: wrk(url, a.seconds, 8, 1)[0], "req/s")
    finally:
        server.terminate()
        server.wait(timeout=30)
        cg.remove()


def part_idle(a, tools, tmp):
    port = free_port()
    rdir = tempfile.mkdtemp(dir=tmp)
    redis = subprocess.Popen([tools["redis-server"], "--port", str(port), "--bind", "127.0.0.1",
                              "--save", "", "--appendonly", "no", "--dir", rdir],
                             stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
    http, hpid, _ = start_http()
    cgs = [Cgroup("idle-redis"), Cgroup("idle-http")]
    try:
        cgs[0].add(redis.pid)
        cgs[1].add(hpid)
        time.sleep(1)
        ag = Agent(tools["loopscope"], [c.path for c in cgs], [redis.pid, hpid], tmp)
        try:
            time.sleep(2)                                       # attached and settled
            c0, t0 = cpu_seconds(ag.pid), time.monotonic()
            time.sleep(a.idle)
            cpu = (cpu_seconds(ag.pid) - c0) / (time.monotonic() - t0)
            rss = ag.rss()
        finally:
            ag.stop()
        print(f"idle: redis-server and asyncio_http_server.py idle, the agent on both for "
              f"{a.idle} s: {cpu * 100:.2f} % of one CPU, {rss / 2**20:.1f} MiB resident; "
              f"{load()}")
        return cpu
    finally:
        redis.terminate()
        http.terminate()
        redis.wait(timeout=30)
        http.wait(timeout=30)
        for c in cgs:
            c.remove()


def main():
    exit_on_sigterm()
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default="build")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--seconds", type=int, default=8)
    ap.add_argument("--idle", type=float, default=30)
    ap.add_argument("--parts", default="redis,http,idle")
    a = ap.parse_args()
    if os.geteuid() != 0:
        print("skip: needs root (BPF)")
        return 77
    tools = {"loopscope": os.path.join(a.build, "viewer", "loopscope"),
             "redis-server": shutil.which("redis-server")}
    for t in ("wrk", "redis-benchmark"):
        if not shutil.which(t):
            print(f"skip: no {t}")
            return 77
    if not tools["redis-server"] or not os.access(tools["loopscope"], os.X_OK):
        print("skip: no redis-server or no loopscope built")
        return 77
    with open("/proc/cpuinfo") as f:
        model = re.search(r"model name\s*:\s*(.*)", f.read())
    print(f"agent_cost.py on {os.cpu_count()} CPUs ({model.group(1) if model else '?'}), "
          f"commit {subprocess.run(['git', 'rev-parse', '--short', 'HEAD'], capture_output=True, text=True, cwd=HERE).stdout.strip()}")
    tmp = tempfile.mkdtemp(prefix="agent-cost-")
    try:
        parts = a.parts.split(",")
        if "redis" in parts:
            part_redis(a, tools, tmp)
            print()
        if "http" in parts:
            part_http(a, tools, tmp)
            print()
        if "idle" in parts:
            part_idle(a, tools, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
