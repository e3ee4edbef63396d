#!/usr/bin/env python3
"""test_symbols_node.py -- JS frames of a real Node.js, unwound and named by
tracer/symbols.c (through tests/tracer/symbols_stack).

    test_symbols_node.py CASE --tool symbols_stack [--node /usr/bin/node]

The script below is started with node; symbols_stack stops its main thread
(ptrace), copies registers and 64 KiB of stack as the recorder's BPF side
does, and prints the unwound, symbolized frames.

Cases:
  spin      node --perf-basic-prof --interpreted-frames-native-stack, busy
            in spinForever: the innermost JS frame is spinForever, FILE:LINE
  wait      same flags, in Atomics.wait inside waitHere: libc's futex wait,
            V8's C++, then waitHere and its JS callers, then JSEntry and
            node's C++ again (unwound through JIT frames by frame pointers)
  read      same flags, fs.readFileSync of a FIFO nobody writes (blocks in
            open) in readHere: libuv's uv_fs_open, readFileSync, readHere
  noflags   no flags: "no perf map", JS frames counted as unnamed
  basic     --perf-basic-prof only, busy long enough to be optimized:
            spinForever named from its compiled code
  pidns     both flags, node in its own pid and mount namespace with a
            private /tmp: the map is /tmp/perf-<pid in its namespace>.map
            there, found through /proc/PID/root

Exit 0 pass, 1 fail, 77 skip (no node, not root: ptrace of a non-child).
"""
import os
import shutil
import subprocess
import sys
import time

from lstest import (Fail, Skip, check, wait_for, tmpdir, parse_args,
                    run_case, thread_state)  # the copy every script shares

SCRIPT = r"""'use strict';
const fs = require('fs');
function spinForever() {
  let x = 0;
  for (;;) { x = (x * 31 + 7) | 0; }
}
function waitHere() {
  const sab = new Int32Array(new SharedArrayBuffer(4));
  Atomics.wait(sab, 0, 0);
}
function readHere(p) {
  return fs.readFileSync(p);
}
const mode = process.argv[2];
process.stdout.write('ready\n');
if (mode === 'spin') spinForever();
else if (mode === 'wait') waitHere();
else if (mode === 'read') readHere(process.argv[3]);
"""
FLAGS = ["--perf-basic-prof", "--interpreted-frames-native-stack"]


def line_of(fn):
    for i, l in enumerate(SCRIPT.splitlines(), 1):
        if l.startswith(f"function {fn}("):
            return i
    raise AssertionError(fn)


A = None
TMP = None
PROCS = []
PIDS = []


def start(flags, mode, *, ns=False):
    script = os.path.join(TMP, "app.js")
    fifo = os.path.join(TMP, "fifo")
    cmd = [A.node, *flags, script, mode, fifo]
    if ns:
        # own pid and mount namespaces, a private /tmp (the script is not in /tmp)
        inner = "mount -t tmpfs none /tmp && exec " + " ".join(cmd)
        cmd = ["unshare", "--pid", "--fork", "--mount", "--propagation", "private",
               "sh", "-c", inner]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True,
                         start_new_session=True)
    PROCS.append(p)
    line = p.stdout.readline()
    check(line.strip() == "ready", f"node printed {line!r}")
    pid = p.pid
    if ns:   # node is unshare's child
        with open(f"/proc/{p.pid}/task/{p.pid}/children") as f:
            kids = f.read().split()
        check(len(kids) == 1, f"unshare's children: {kids}")
        pid = int(kids[0])
    else:
        PIDS.append(pid)
    return p, pid


def wait_blocked(pid, timeout=10):
    """Until the main thread sleeps (in open of the fifo, in the futex)."""
    wait_for(lambda: thread_state(pid) == "S", timeout, "node to block")


def stack(pid):
    out = subprocess.run([A.tool, str(pid)], capture_output=True, text=True, timeout=60)
    sys.stdout.write(out.stdout)
    check(out.returncode == 0, f"symbols_stack exited {out.returncode}: {out.stderr}")
    frames, info = [], {}
    for l in out.stdout.splitlines():
        w = l.split(" ")
        if w[0] == "frame":
            frames.append({"pc": w[2], "function": w[3], "file": w[4], "line": int(w[5]),
                           "module": w[6]})
        elif w[0] == "jsframes":
            info["js"], info["unnamed"] = int(w[1]), int(w[3])
        elif w[0] == "perfmap":
            info["perfmap"] = w[1]
            info["status"] = " ".join(w[2:])
    return frames, info


def index(frames, fn, what):
    for i, f in enumerate(frames):
        if f["function"] == fn:
            return i
    raise Fail(f"{what}: no frame {fn} in {[f['function'] for f in frames]}")


def js_frame(frames, fn):
    i = index(frames, fn, "JS frame")
    f = frames[i]
    check(f["module"] == "[jit]", f"{fn}: module {f['module']}")
    check(f["file"] == os.path.join(TMP, "app.js"), f"{fn}: file {f['file']}")
    check(f["line"] == line_of(fn), f"{fn}: line {f['line']}, expected {line_of(fn)}")
    return i


def unwound_past_js(frames, i):
    """Frames below JS frame i reach node's JSEntry and main (CFI again)."""
    names = [f["function"] for f in frames[i:]]
    check("Builtins_JSEntry" in names, f"no Builtins_JSEntry below the JS frames: {names}")
    check(any(n.startswith("__libc_start") for n in names), f"not unwound to libc start: {names}")


# --------------------------------------------------------------- cases

def spin():
    p, pid = start(FLAGS, "spin")
    time.sleep(0.5)
    frames, info = stack(pid)
    check(info["perfmap"] == "yes", f"perf map: {info['status']}")
    i = js_frame(frames, "spinForever")
    check(i == 0, f"spinForever is frame {i}, not the innermost")
    unwound_past_js(frames, i)


def wait():
    p, pid = start(FLAGS, "wait")
    wait_blocked(pid)
    frames, info = stack(pid)
    i = js_frame(frames, "waitHere")
    names = [f["function"] for f in frames[:i]]
    check(any("futex" in n for n in names), f"no futex frame above waitHere: {names}")
    check(any("AtomicsWait" in n for n in names), f"no AtomicsWait above waitHere: {names}")
    unwound_past_js(frames, i)


def read():
    os.mkfifo(os.path.join(TMP, "fifo"))
    p, pid = start(FLAGS, "read")
    wait_blocked(pid)
    frames, info = stack(pid)
    i = js_frame(frames, "readHere")
    j = index(frames, "readFileSync", "fs")
    check(frames[j]["file"] == "node:fs" and j < i, f"readFileSync: {frames[j]}")
    k = index(frames, "uv_fs_open", "libuv")
    check(k < j, "uv_fs_open not above readFileSync")
    unwound_past_js(frames, i)
    check(info["unnamed"] == 0, f"unnamed JS frames: {info}")


def noflags():
    p, pid = start([], "wait")
    wait_blocked(pid)
    frames, info = stack(pid)
    check(info["perfmap"] == "no", f"perf map: {info['status']}")
    check(info["status"].startswith("no perf map ("), f"status: {info['status']}")
    check(info["unnamed"] > 0, f"no unnamed JS frames counted: {info}")
    names = [f["function"] for f in frames]
    check("waitHere" not in names, "waitHere named without the flags")
    unwound_past_js(frames, index(frames, "Builtins_InterpreterEntryTrampoline", "interpreter"))


def basic():
    p, pid = start(["--perf-basic-prof"], "spin")
    # optimized (OSR) within a few seconds: retry until named
    for _ in range(20):
        time.sleep(0.5)
        frames, info = stack(pid)
        if frames and frames[0]["function"] == "spinForever":
            break
    js_frame(frames, "spinForever")
    check(frames[0]["function"] == "spinForever", "spinForever never named")
    unwound_past_js(frames, 0)


def pidns():
    p, pid = start(FLAGS, "spin", ns=True)
    with open(f"/proc/{pid}/status") as f:
        nspid = [l.split()[-1] for l in f if l.startswith("NStgid:")][0]
    check(nspid != str(pid), f"node not in its own pid namespace ({pid})")
    time.sleep(0.5)
    frames, info = stack(pid)
    check(info["perfmap"] == "yes", f"perf map: {info['status']}")
    check(f"/proc/{pid}/root/tmp/perf-{nspid}.map" in info["status"], info["status"])
    js_frame(frames, "spinForever")


def in_workdir(fn):
    """Case fn, skipped without node (or unshare for pidns), run with
    app.js written in a new TMP (in /var/tmp: pidns mounts its own /tmp)."""
    def run():
        global TMP
        if not os.path.exists(A.node):
            raise Skip("no node")
        if fn is pidns and not shutil.which("unshare"):
            raise Skip("no unshare")
        TMP = tmpdir(dir="/var/tmp")
        with open(os.path.join(TMP, "app.js"), "w") as f:
            f.write(SCRIPT)
        fn()
    return run


CASES = {f.__name__: in_workdir(f) for f in (spin, wait, read, noflags, basic, pidns)}


def cleanup():
    for p in PROCS:
        try:
            os.killpg(p.pid, 9)
        except ProcessLookupError:
            pass
        p.wait()
    for pid in PIDS:      # node leaves its map behind
        try:
            os.unlink(f"/tmp/perf-{pid}.map")
        except FileNotFoundError:
            pass


def main():
    global A
    A = parse_args(CASES, ("tool", "node"))
    if not A.node:
        A.node = shutil.which("node") or "/usr/bin/node"
    return run_case(CASES, A, cleanup,
                    "needs root (ptrace of a process that is not the tool's child)")


if __name__ == "__main__":
    sys.exit(main())
