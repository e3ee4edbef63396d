#!/usr/bin/env python3
"""selftest_retries.py -- the diff runners' retry policy, checked with flaky fakes.

    selftest_retries.py

Runs run_diff.py and run_random.py against fake libevl binaries that print
a wrong line (or crash) on their first run only, and checks the policy in
README.md ("Retries"):

- on the virtual clock a first-run mismatch fails the test (no retry);
- on the real clock it passes on the retry, which says PASSED ON RETRY,
  is counted in run_random.py's summary and logged to --retry-log;
- a crash is never retried, on either clock;
- --retries is refused with --virtual.

Needs python3 only (the fakes replay the asyncio side).  Exit 0 = pass.
"""
import os
import shutil
import signal
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
SCENARIO = "done_callbacks_order"   # no timers: the same output on any machine

# A stand-in for diff_scenarios / diff_interp: prints what asyncio prints
# (so it agrees with the oracle), except on its first run, where it adds a
# line (MODE=mismatch) or exits 3 (MODE=crash).  The state file counts runs.
FAKE = r'''#!/usr/bin/env python3
import os, subprocess, sys
here, mode, state = sys.argv[0].rsplit("/", 1)[0], os.environ["FAKE_MODE"], os.environ["FAKE_STATE"]
first = not os.path.exists(state)
open(state, "a").write("run\n")
if first and mode == "crash":
    sys.exit(3)
if os.environ["FAKE_KIND"] == "scenario":
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    env.pop("DIFF_CLOCK", None)
    if "--virtual" in sys.argv:
        env["DIFF_CLOCK"] = "virtual"
    out = subprocess.run([sys.executable, os.path.join(os.environ["DIFF_DIR"], "py", sys.argv[1] + ".py")],
                         env=env, capture_output=True, text=True, check=True).stdout
else:
    sys.dont_write_bytecode = True
    sys.path.insert(0, os.environ["DIFF_DIR"])
    import gen
    out = "".join(l + "\n" for l in gen.interpret_virtual(gen.parse_spec(open(sys.argv[1]).read()))[0])
sys.stdout.write(out)
if first and mode == "mismatch":
    print("an extra line, first run only")
'''

failures = []


def check(cond, msg):
    print(f"{'ok  ' if cond else 'FAIL'} {msg}")
    if not cond:
        failures.append(msg)


def main():
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    tmp = tempfile.mkdtemp(prefix="evl-diff-selftest-")
    try:
        fake = os.path.join(tmp, "fake")
        with open(fake, "w") as f:
            f.write(FAKE)
        os.chmod(fake, 0o755)
        log = os.path.join(tmp, "retries.log")

        def run(kind, mode, *args):
            state = os.path.join(tmp, "state")
            if os.path.exists(state):
                os.unlink(state)
            env = dict(os.environ, FAKE_MODE=mode, FAKE_STATE=state, FAKE_KIND=kind,
                       DIFF_DIR=HERE, PYTHONDONTWRITEBYTECODE="1")
            if kind == "scenario":
                cmd = [sys.executable, os.path.join(HERE, "run_diff.py"), SCENARIO, "--bin", fake]
            else:
                cmd = [sys.executable, os.path.join(HERE, "run_random.py"), "--seed", "1",
                       "--count", "1", "--bin", fake]
            p = subprocess.run(cmd + ["--retry-log", log, *args], capture_output=True,
                               text=True, env=env, timeout=120)
            runs = len(open(state).read().splitlines()) if os.path.exists(state) else 0
            return p.returncode, p.stdout + p.stderr, runs

        def logged():
            n = len(open(log).read().splitlines()) if os.path.exists(log) else 0
            if os.path.exists(log):
                os.unlink(log)
            return n

        for kind in ("scenario", "random"):
            who = "run_diff.py" if kind == "scenario" else "run_random.py"
            rc, out, runs = run(kind, "mismatch", "--virtual")
            check(rc == 1 and runs == 1 and "PASSED ON RETRY" not in out,
                  f"{who} --virtual: a first-run mismatch fails, no retry (exit {rc}, {runs} runs)")
            check(logged() == 0, f"{who} --virtual: nothing in the retry log")

            rc, out, runs = run(kind, "mismatch")
            check(rc == 0 and runs == 2 and "PASSED ON RETRY" in out,
                  f"{who} real clock: passes on retry and says so (exit {rc}, {runs} runs)")
            if kind == "random":
                check("1 passed only on retry" in out, f"{who}: the summary counts the retry")
            check(logged() == 1, f"{who} real clock: one line in the retry log")

            for clock in ([], ["--virtual"]):
                rc, out, runs = run(kind, "crash", *clock)
                check(rc == 1 and runs == 1,
                      f"{who} {clock[0] if clock else 'real clock'}: a crash is not retried "
                      f"(exit {rc}, {runs} runs)")
            logged()

            rc, out, runs = run(kind, "mismatch", "--virtual", "--retries", "1")
            check(rc == 2 and runs == 0, f"{who}: --retries refused with --virtual (exit {rc})")
        if failures:
            print(out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"selftest_retries: {len(failures)} check(s) failed" if failures
          else "selftest_retries: all checks passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
