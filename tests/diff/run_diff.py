#!/usr/bin/env python3
"""run_diff.py -- run one differential scenario in CPython asyncio and in libevl.

    run_diff.py SCENARIO --bin PATH/diff_scenarios [--virtual] [--retries N]
                [--python PATH [--oracle X.Y]]

Runs py/SCENARIO.py (the oracle: CPython 3.11 asyncio, or the --python
interpreter; with --oracle X.Y the test is skipped, exit status 77, when
that interpreter is older than X.Y or missing) and
`diff_scenarios SCENARIO [--virtual]`, compares the printed lines and exits
0 when they are equal.  With --virtual both sides run on a virtual clock:
libevl with EVL_LOOP_VIRTUAL_CLOCK, asyncio with vloop.py (asyncio's own
loop whose clock jumps to the next timer instead of sleeping), so the
comparison does not depend on the speed of the machine; --py-real keeps
the asyncio side on the real clock.  On a mismatch it prints a unified diff (asyncio
first, libevl second) and exits 1; a side that crashes, exits non-zero
(libevl: failed main task or leaked tasks) or times out is a failure too.

Retries.  On the virtual clock there are none: both sides are
deterministic, so a mismatch is a bug however rarely it shows (the one
scenario that still involves real time there, executor_order, keeps its
jobs 60 ms apart and runs alone).  On the real clock a scenario depends on
the machine's timing (10 ms margins), so an output mismatch is retried
--retries times (default 1).  A retry never hides anything: a side that
crashed, exited non-zero or timed out is not retried, and a pass on retry
prints "PASSED ON RETRY" with the first attempt's diff and appends one line
to --retry-log FILE (ctest passes BUILD/tests/diff/retries.log), which
tests/run.sh counts and prints after the suites.
"""
import argparse
import difflib
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def run(cmd, timeout, env=None):
    """Run cmd; return (lines, error message or None)."""
    try:
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout.decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        return out.splitlines(), f"timed out after {timeout} s"
    except OSError as exc:
        return [], f"cannot run: {exc}"
    err = None
    if p.returncode != 0:
        err = f"exit status {p.returncode}"
        if p.stderr.strip():
            err += ":\n" + p.stderr.rstrip()
    elif p.stderr.strip():
        # Not a failure, but worth seeing (leak warnings, Python warnings).
        sys.stderr.write(f"[{cmd[-1] if cmd else ''}] stderr:\n{p.stderr}")
    return p.stdout.splitlines(), err


def python_version(python):
    """(major, minor) of the interpreter python, or None if it cannot run."""
    try:
        p = subprocess.run([python, "-c", "import sys; print(*sys.version_info[:2])"],
                           stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                           timeout=30)
        return tuple(int(x) for x in p.stdout.split()) if p.returncode == 0 else None
    except (OSError, ValueError, subprocess.TimeoutExpired):
        return None


def compare(name, py_cmd, py_env, c_cmd, timeout):
    """One attempt.  Returns (report, retryable): report is None when both
    agree; retryable when the sides ran fine and only their outputs differ."""
    py_lines, py_err = run(py_cmd, timeout, py_env)
    c_lines, c_err = run(c_cmd, timeout)
    report = []
    if py_err:
        report.append(f"asyncio side failed ({' '.join(py_cmd)}): {py_err}")
    if c_err:
        report.append(f"libevl side failed ({' '.join(c_cmd)}): {c_err}")
    if py_lines != c_lines:
        diff = difflib.unified_diff(py_lines, c_lines, fromfile=f"asyncio py/{name}.py",
                                    tofile="libevl " + " ".join(c_cmd[1:]), lineterm="")
        report.append("output differs:\n" + "\n".join(diff))
    if not report:
        return None, False
    return "\n".join(report), not (py_err or c_err)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("scenario")
    ap.add_argument("--bin", required=True, help="path to diff_scenarios")
    ap.add_argument("--virtual", action="store_true", help="libevl with EVL_LOOP_VIRTUAL_CLOCK")
    ap.add_argument("--py-real", action="store_true",
                    help="with --virtual: run the asyncio side on the real clock")
    ap.add_argument("--retries", type=int, default=None,
                    help="real clock only: retries of an output mismatch (default 1)")
    ap.add_argument("--retry-log", metavar="FILE",
                    help="append a line here when a test passes only on retry")
    ap.add_argument("--timeout", type=float, default=30.0)
    ap.add_argument("--python", default=sys.executable,
                    help="the interpreter of the asyncio side (default: this one)")
    ap.add_argument("--oracle", metavar="X.Y",
                    help="skip (exit 77) unless --python is CPython X.Y or later")
    args = ap.parse_args()

    script = os.path.join(HERE, "py", f"{args.scenario}.py")
    if not os.path.exists(script):
        print(f"run_diff.py: no such scenario: {script}", file=sys.stderr)
        return 2
    if args.oracle:
        want = tuple(int(x) for x in args.oracle.split("."))
        have = python_version(args.python)
        if have is None or have < want:
            what = ".".join(map(str, have)) if have else "none"
            print(f"{args.scenario}: skipped: its oracle is CPython {args.oracle} or later, "
                  f"the asyncio side would run on {args.python} ({what})")
            return 77
    py_cmd = [args.python, "-u", script]
    c_cmd = [args.bin, args.scenario] + (["--virtual"] if args.virtual else [])
    clock = "virtual" if args.virtual else "real"
    py_env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")  # keep the tree clean
    py_env.pop("DIFF_CLOCK", None)
    if args.virtual and not args.py_real:
        py_env["DIFF_CLOCK"] = "virtual"

    if args.virtual and args.retries:
        print("run_diff.py: no retries on the virtual clock (it is deterministic)", file=sys.stderr)
        return 2
    retries = 0 if args.virtual else (1 if args.retries is None else args.retries)

    first = None
    for attempt in range(retries + 1):
        report, retryable = compare(args.scenario, py_cmd, py_env, c_cmd, args.timeout)
        if report is None:
            if attempt:
                line = f"diff.{args.scenario}.{clock}: PASSED ON RETRY {attempt} of {retries}"
                print(f"{line}; first attempt:\n{first}")
                if args.retry_log:
                    with open(args.retry_log, "a") as f:
                        f.write(line + "\n")
            print(f"{args.scenario} ({clock}): ok")
            return 0
        print(f"{args.scenario} ({clock}): attempt {attempt + 1}: "
              f"{'MISMATCH' if retryable else 'FAILED'}\n{report}")
        first = first or report
        if not retryable:
            break  # a crash, an error exit or a timeout is never retried
    return 1


if __name__ == "__main__":
    sys.exit(main())
