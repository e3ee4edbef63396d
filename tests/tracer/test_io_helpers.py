#!/usr/bin/env python3
"""test_io_helpers.py -- libevl's socket helpers seen by `loopscope record`
(needs root).

    test_io_helpers.py CASE --loopscope BIN --examples DIR --sem-read BIN

evl_getaddrinfo runs getaddrinfo(3) in the executor: recorded, a libevl
program resolving names shows no blocking episode, and the resolving task
suspends with the reason "executor".  The program is
examples/blocking_server --good, whose `dns` route calls evl_getaddrinfo.
Each CASE is one ctest entry (tests/tracer/CMakeLists.txt).  Exit 0 pass,
1 fail, 77 skip (only when not root).  The helpers (Server, record_requests,
episodes, sequences, the DNS stub) are test_record.py's.
"""
import os
import subprocess
import sys

import test_record as tr
from lstest import Fail, check, eq, query, tmpdir, parse_args, run_case  # shared: lstest.py

CASES = {}
REQUESTS = 5


def case(fn):
    CASES[fn.__name__] = fn
    return fn


def resolve_recorded(server_args, requests=REQUESTS):
    """blocking_server --good answering `dns` requests while recorded: the
    trace, after checking that nothing blocked and that every handler
    awaited the executor (and nothing else but its socket)."""
    s = tr.Server("--good", *server_args)
    try:
        db = tr.record_requests(s, ["dns"], 10, repeat=requests)
    finally:
        s.stop()
    # the bug this guards against: getaddrinfo on the loop thread.  Beside
    # an I/O hog (tests/run.sh --stress) the loop thread can still be held
    # elsewhere, e.g. a 26 ms on-CPU episode in send(): interrupt work
    # charged to it (this kernel does not account interrupt time apart)
    eps = tr.episodes(db)
    eq([e for e in eps if any("getaddrinfo" in (f[0] or "") for f in e[5])], [],
       "blocking episodes while resolving")
    if eps:
        print(f"  note: episodes outside the resolver: {eps}")
    seqs = tr.sequences(db)
    handlers = {n: q for n, q in seqs.items() if n.startswith("handle_conn#")}
    eq(len(handlers), requests, f"handler tasks recorded ({sorted(handlers)})")
    for name, seq in handlers.items():
        check("suspend(executor) wake(executor)" in seq,
              f"{name} never suspended on the executor: {seq}")
        reasons = {w[len("suspend("):-1] for w in seq.split() if w.startswith("suspend(")}
        check(reasons <= {"executor", "io"}, f"{name} suspended for {reasons}: {seq}")
        check(seq.endswith("finish(finished)"), f"{name} did not finish: {seq}")
    return db


@case
def getaddrinfo_localhost():
    """getaddrinfo of localhost (blocking_server's default name), as asked
    of evl_getaddrinfo: no blocking episode, an executor suspension per
    request."""
    resolve_recorded([])


@case
def getaddrinfo_slow_resolver():
    """The same against a resolver that answers after test_record's
    DNS_DELAY (its own network and mount namespaces, as blocking_dns): a
    synchronous getaddrinfo would block the loop that long (blocking_dns
    checks that it is seen), evl_getaddrinfo must not."""
    p = subprocess.run(["unshare", "--net", "--mount", sys.executable, os.path.abspath(__file__),
                        "getaddrinfo_slow_resolver_ns", "--loopscope", tr.A.loopscope,
                        "--examples", tr.A.examples, "--sem-read", tr.A.sem_read],
                       capture_output=True, text=True, timeout=120)
    sys.stdout.write(p.stdout)
    check(p.returncode == 0, f"in the namespace: exit {p.returncode}: {p.stdout.strip()} "
                             f"{p.stderr.strip()[-1500:]}")


def getaddrinfo_slow_resolver_ns():
    """getaddrinfo_slow_resolver inside its namespaces (not a ctest case)."""
    if subprocess.run(["ip", "link", "set", "lo", "up"]).returncode != 0:
        raise Fail("cannot bring up lo in the network namespace")
    d = tmpdir()
    conf = os.path.join(d, "resolv.conf")
    with open(conf, "w") as f:
        f.write("nameserver 127.0.0.1\noptions timeout:5 attempts:1\n")
    subprocess.run(["mount", "--bind", conf, "/etc/resolv.conf"], check=True)
    tr.dns_stub()
    db = resolve_recorded(["--dns-name", tr.DNS_NAME])
    # The lookups did take the resolver's time, in the executor: each
    # handler stayed suspended on it at least DNS_DELAY.
    executor = query(db, "SELECT id FROM suspend_reasons WHERE name = 'executor'")[0][0]
    evs = query(db, """
        SELECT t.name, k.name, e.reason, e.ts_ns FROM events e
        JOIN tasks t ON t.id = e.task_id JOIN event_kinds k ON k.id = e.kind
        WHERE t.name LIKE 'handle_conn#%' ORDER BY e.rowid""")
    rows, since = [], {}
    for name, kind, reason, ts in evs:
        if kind == "task_suspend" and reason == executor:
            since[name] = ts
        elif kind == "task_wake" and name in since:
            rows.append((name, ts - since.pop(name)))
    eq(len(rows), REQUESTS, f"executor suspensions with their wake ({rows})")
    for name, ns in rows:
        check(ns >= tr.DNS_DELAY * 1e9 * 0.9,
              f"{name} waited only {ns / 1e6:.1f} ms on the executor for a resolver "
              f"that answers after {tr.DNS_DELAY * 1000:.0f} ms")


CASES["getaddrinfo_slow_resolver_ns"] = getaddrinfo_slow_resolver_ns


def main():
    a = parse_args(CASES, ("loopscope", "examples", "sem_read"))
    tr.A = a                          # test_record's helpers read their arguments there
    return run_case(CASES, a)

if __name__ == "__main__":
    sys.exit(main())
