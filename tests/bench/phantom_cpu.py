#!/usr/bin/env python3
"""CPU time the kernel charges a loop thread's step, against what ran.

The recorder's on-CPU episodes count a step's CPU time as the kernel does
(tracer/README.md, "A step's CPU time").  Beside the stress pass's hogs on
this VM, a request served by tests/tracer/generic/py_server.py (its routes
good and sleep: well under a millisecond of CPU each) now and then shows
as an on-CPU episode of 10-20 ms.  This measures each step of that loop
thread with bpftrace, apart from the recorder:

  cpu      the thread's se.sum_exec_runtime over the step (its schedstat
           CPU time: what the kernel charged it, steal left out)
  wall     the step's wall time, epoll_wait's return to its next entry
  off      its time switched out within the step
  samples  how many ticks of a 997 Hz CPU-clock profile landed on the
           thread within the step (about one a millisecond it ran)

and prints every step of CPU_MS (8) or more, then a summary: steps, such
steps, and of their CPU time how much the profile saw (samples x 1.003
ms).  A step the kernel charges 15 ms in which the profile lands once or
never did not run 15 ms of code: the guest's clock went on while the vCPU
did not run the thread's code (taken by the host without counting it as
stolen, or with interrupts off, where a tick waits and lands at the point
they are enabled again -- the profile's stacks show which).

  tests/bench/phantom_cpu.py [--seconds S] [--hogs] [--cpu-ms MS]

Needs root and bpftrace.  --hogs: a CPU hog per CPU and the I/O hog, as
tests/run.sh --stress (lstest.cpu_hogs).
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tests", "tracer"))
from lstest import ask, cpu_hogs  # noqa: E402  (the tests' own)

SERVER = os.path.join(ROOT, "tests", "tracer", "generic", "py_server.py")

# $1 the loop thread, $2 the CPU time (ns) from which a step is printed.
# The step in progress: @since its start, @cpu0 the thread's CPU time
# then, @off its time switched out, @smp the profile's samples in it.
SCRIPT = r"""
tracepoint:syscalls:sys_exit_epoll_wait /tid == $1/ {
  @since = nsecs; @cpu0 = curtask->se.sum_exec_runtime; @off = (uint64)0; @smp = 0;
}
tracepoint:sched:sched_switch /args->prev_pid == $1 && @since/ { @out = nsecs; }
tracepoint:sched:sched_switch /args->next_pid == $1 && @out/ { @off += nsecs - @out; @out = 0; }
profile:hz:997 /tid == $1 && @since/ {
  @smp++;
  if (curtask->se.sum_exec_runtime - @cpu0 > (uint64)$2 / 2) { @late[kstack(6)] = count(); }
}
tracepoint:syscalls:sys_enter_epoll_wait /tid == $1 && @since/ {
  $cpu = curtask->se.sum_exec_runtime - @cpu0;
  @steps = count();
  if ($cpu >= (uint64)$2) {
    printf("step cpu_us %d wall_us %d off_us %d samples %d\n",
           $cpu / 1000, (nsecs - @since) / 1000, @off / 1000, @smp);
  }
  @since = 0;
}
END { clear(@since); clear(@cpu0); clear(@off); clear(@smp); clear(@out); }
"""


def run(a, tmp):
    srv = subprocess.Popen([sys.executable, SERVER], stdout=subprocess.PIPE, text=True)
    try:
        pid = int(srv.stdout.readline().split()[1])
        port = int(srv.stdout.readline().split()[1])
        script = os.path.join(tmp, "steps.bt")
        with open(script, "w") as f:
            f.write(SCRIPT)
        out = open(os.path.join(tmp, "bpftrace.out"), "w+")
        bt = subprocess.Popen(["bpftrace", script, str(pid), str(int(a.cpu_ms * 1e6))],
                              stdout=out, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 60
        while "Attaching" not in open(out.name).read():
            if bt.poll() is not None or time.monotonic() > deadline:
                sys.exit(f"phantom_cpu.py: bpftrace did not attach: {open(out.name).read()}")
            time.sleep(0.1)
        time.sleep(1)
        n = 0
        end = time.monotonic() + a.seconds
        while time.monotonic() < end:
            for route in ("good", "good", "sleep"):
                ask(port, route)
                n += 1
        bt.send_signal(2)
        bt.wait(timeout=60)
        out.seek(0)
        return n, out.read()
    finally:
        srv.kill()
        srv.wait()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--hogs", action="store_true")
    ap.add_argument("--cpu-ms", type=float, default=8)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="phantom-cpu-") as tmp:
        if a.hogs:
            with cpu_hogs(per_cpu=1, io_dir=tmp):
                n, text = run(a, tmp)
        else:
            n, text = run(a, tmp)
    steps = [tuple(map(int, m)) for m in
             re.findall(r"step cpu_us (\d+) wall_us (\d+) off_us (\d+) samples (\d+)", text)]
    total = re.search(r"@steps: (\d+)", text)
    print(f"{'with' if a.hogs else 'without'} hogs, {a.seconds:.0f} s: {n} requests, "
          f"{total.group(1) if total else '?'} steps of the loop thread")
    print(f"steps of {a.cpu_ms:g} ms of CPU or more: {len(steps)}")
    for cpu, wall, off, smp in steps:
        print(f"  cpu {cpu / 1000:6.2f} ms  wall {wall / 1000:6.2f}  off {off / 1000:6.2f}  "
              f"wall-off {(wall - off) / 1000:6.2f}  profile samples {smp:3d} "
              f"(~{smp * 1.003:.0f} ms seen running)")
    if steps:
        cpu = sum(s[0] for s in steps) / 1000
        seen = sum(s[3] for s in steps) * 1.003
        print(f"their CPU time {cpu:.1f} ms, seen running by the profile ~{seen:.0f} ms")
    late = text[text.find("@late"):] if "@late" in text else ""
    if late:
        print(f"kernel stacks of the samples past half of CPU_MS into a step:\n{late.rstrip()}")


if __name__ == "__main__":
    main()
