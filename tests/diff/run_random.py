#!/usr/bin/env python3
"""run_random.py -- random differential testing of libevl against asyncio.

    run_random.py --seed S --count N --bin PATH/diff_interp [--virtual]
                  [--keep DIR] [--retries R]

Generates N timing-robust random programs with gen.py (program i of seed S
is always the same), runs each with CPython asyncio (in this process) and
with `diff_interp SPEC [--virtual]`, and compares the printed lines.  The
asyncio side runs on the real clock, or with --virtual on the virtual clock
of vloop.py (deterministic; --py-real keeps it on the real clock).  On a mismatch it prints the spec, a unified diff (asyncio first,
libevl second) and the command to reproduce; the exit status is 1 if any
program mismatched, else 0.

Retries: none on the virtual clock (both sides are deterministic; --retries
is refused there).  On the real clock an output mismatch is retried R times
(default 1), since both sides then depend on the machine's timing; a libevl
side that crashed, exited non-zero or timed out is never retried.  A pass
on retry prints "PASSED ON RETRY" with the first attempt's diff, is counted
in the summary line and appended to --retry-log FILE (tests/run.sh counts
and prints those after the suites).
"""
import argparse
import difflib
import os
import signal
import subprocess
import sys
import tempfile
import time

sys.dont_write_bytecode = True  # keep the source tree clean
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gen  # noqa: E402


def run_c(binary, spec_path, virtual, timeout):
    cmd = [binary, spec_path] + (["--virtual"] if virtual else [])
    try:
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return [], f"timed out after {timeout} s"
    err = None
    if p.returncode != 0:
        err = f"exit status {p.returncode}\n{p.stderr.rstrip()}"
    return p.stdout.splitlines(), err


def attempt(spec, spec_path, args):
    """One comparison: (report, retryable).  report is None when both sides
    agree; retryable when libevl ran fine and only the outputs differ."""
    progs = gen.parse_spec(spec)
    if args.virtual and not args.py_real:
        py_lines = gen.interpret_virtual(progs)[0]
    else:
        py_lines = gen.interpret(progs)
    c_lines, c_err = run_c(args.bin, spec_path, args.virtual, args.timeout)
    if py_lines == c_lines and not c_err:
        return None, False
    report = []
    if c_err:
        report.append(f"libevl side failed: {c_err}")
    if py_lines != c_lines:
        virt = gen.interpret_virtual(progs)[0]
        if virt != py_lines:  # only possible for a real-clock asyncio run
            report.append("note: asyncio's real-clock run differs from its virtual-clock "
                          "run (timing noise on the asyncio side)")
        report.append("\n".join(difflib.unified_diff(
            py_lines, c_lines, fromfile="asyncio", tofile="libevl", lineterm="")))
    return "\n".join(report), not c_err


def exit_on_sigterm():
    """SIGTERM (a timeout, kill) ends Python without unwinding: turn it into
    SystemExit so the finally blocks stop the children and remove the
    temporary files."""
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))


def main():
    exit_on_sigterm()
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seed", type=int, required=True)
    ap.add_argument("--count", type=int, default=100)
    ap.add_argument("--bin", required=True, help="path to diff_interp")
    ap.add_argument("--virtual", action="store_true", help="libevl with EVL_LOOP_VIRTUAL_CLOCK")
    ap.add_argument("--py-real", action="store_true",
                    help="with --virtual: run the asyncio side on the real clock")
    ap.add_argument("--retries", type=int, default=None,
                    help="real clock only: retries of an output mismatch (default 1)")
    ap.add_argument("--retry-log", metavar="FILE",
                    help="append a line here for each program that passed only on retry")
    ap.add_argument("--timeout", type=float, default=20.0)
    ap.add_argument("--keep", metavar="DIR", help="also write failing specs to DIR")
    ap.add_argument("--stop-after", type=int, default=5,
                    help="stop after this many failing programs (0: never)")
    args = ap.parse_args()
    clock = "virtual" if args.virtual else "real"
    if args.virtual and args.retries:
        print("run_random.py: no retries on the virtual clock (it is deterministic)",
              file=sys.stderr)
        return 2
    retries = 0 if args.virtual else (1 if args.retries is None else args.retries)

    failures, on_retry, started = 0, 0, time.monotonic()
    with tempfile.TemporaryDirectory(prefix="evl-diff-") as tmp:
        for i in range(args.count):
            spec = gen.generate(args.seed, i)
            spec_path = os.path.join(tmp, f"prog-{args.seed}-{i}.spec")
            with open(spec_path, "w") as f:
                f.write(spec)
            report = first = None
            for n in range(retries + 1):
                report, retryable = attempt(spec, spec_path, args)
                if report is None:
                    if n:
                        on_retry += 1
                        line = (f"diff.random.{clock}: program {i} (seed {args.seed}) "
                                f"PASSED ON RETRY {n} of {retries}")
                        print(f"{line}; first attempt:\n{first}")
                        if args.retry_log:
                            with open(args.retry_log, "a") as f:
                                f.write(line + "\n")
                    break
                first = first or report
                if not retryable:
                    break  # a crash, an error exit or a timeout is never retried
            if report is None:
                continue
            failures += 1
            print(f"=== program {i} (seed {args.seed}, {clock} clock): MISMATCH")
            print(spec, end="")
            print(report)
            print(f"reproduce: {sys.executable} {os.path.abspath(gen.__file__)} "
                  f"--seed {args.seed} --index {i} > p.spec && {args.bin} p.spec"
                  + (" --virtual" if args.virtual else ""))
            if args.keep:
                os.makedirs(args.keep, exist_ok=True)
                with open(os.path.join(args.keep, f"prog-{args.seed}-{i}.spec"), "w") as f:
                    f.write(spec)
            if args.stop_after and failures >= args.stop_after:
                print(f"stopping after {failures} failing programs")
                break
    elapsed = time.monotonic() - started
    print(f"random ({clock} clock, seed {args.seed}): {args.count} programs, "
          f"{failures} failing, {on_retry} passed only on retry, {elapsed:.1f} s")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
