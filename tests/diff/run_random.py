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
program mismatched, else 0.  A mismatch is retried R times (default 1)
before it counts, since the asyncio side runs on a real clock.
"""
import argparse
import difflib
import os
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
    """One comparison; returns a report or None when both sides agree."""
    progs = gen.parse_spec(spec)
    if args.virtual and not args.py_real:
        py_lines = gen.interpret_virtual(progs)[0]
    else:
        py_lines = gen.interpret(progs)
    c_lines, c_err = run_c(args.bin, spec_path, args.virtual, args.timeout)
    if py_lines == c_lines and not c_err:
        return None
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
    return "\n".join(report)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seed", type=int, required=True)
    ap.add_argument("--count", type=int, default=100)
    ap.add_argument("--bin", required=True, help="path to diff_interp")
    ap.add_argument("--virtual", action="store_true", help="libevl with EVL_LOOP_VIRTUAL_CLOCK")
    ap.add_argument("--py-real", action="store_true",
                    help="with --virtual: run the asyncio side on the real clock")
    ap.add_argument("--retries", type=int, default=1)
    ap.add_argument("--timeout", type=float, default=20.0)
    ap.add_argument("--keep", metavar="DIR", help="also write failing specs to DIR")
    ap.add_argument("--stop-after", type=int, default=5,
                    help="stop after this many failing programs (0: never)")
    args = ap.parse_args()
    clock = "virtual" if args.virtual else "real"

    failures, started = 0, time.monotonic()
    with tempfile.TemporaryDirectory(prefix="evl-diff-") as tmp:
        for i in range(args.count):
            spec = gen.generate(args.seed, i)
            spec_path = os.path.join(tmp, f"prog-{args.seed}-{i}.spec")
            with open(spec_path, "w") as f:
                f.write(spec)
            report = first = None
            for n in range(args.retries + 1):
                report = attempt(spec, spec_path, args)
                if report is None:
                    if n:
                        print(f"program {i}: passed on retry {n}; first attempt:\n{first}")
                    break
                first = first or report
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
          f"{failures} failing, {elapsed:.1f} s")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
