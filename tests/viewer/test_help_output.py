#!/usr/bin/env python3
"""test_help_output.py -- help text goes through loopscope's checked stdout.

    test_help_output.py --loopscope BIN

For the top level (`loopscope --help`, `-h`, `help`) and for every command
that `loopscope help` lists (`loopscope CMD --help` and `loopscope help
CMD`): with stdout on a pipe the help is printed, exit status 0, nothing on
stderr; with stdout on /dev/full (every write fails with ENOSPC) the exit
status is not 0 and stderr is exactly one line starting with "error: ".
`loopscope --version` is checked the same way.  Depends on python3 only.
"""
import argparse
import subprocess
import sys


def run(cmd, full):
    if full:
        with open("/dev/full", "w") as out:
            p = subprocess.run(cmd, stdout=out, stderr=subprocess.PIPE, timeout=60)
        return p.returncode, b"", p.stderr
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=60)
    return p.returncode, p.stdout, p.stderr


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--loopscope", required=True)
    a = ap.parse_args()
    ls = a.loopscope

    rc, out, err = run([ls, "help"], False)
    if rc != 0:
        sys.exit(f"FAIL: 'loopscope help' exited {rc}: {err.decode(errors='replace')}")
    lines = out.decode().splitlines()
    commands = [l.split()[0] for l in lines[lines.index("commands:") + 1:]
                if l.startswith("  ") and l.strip()]
    for must in ("record", "info", "tasks", "timeline", "blocking", "graph", "export",
                 "lint", "sql", "help"):
        if must not in commands:
            sys.exit(f"FAIL: 'loopscope help' does not list {must}: {commands}")

    cases = [["--help"], ["-h"], ["help"], ["--version"]]
    for c in commands:
        cases.append([c, "--help"])
        if c != "help":
            cases.append(["help", c])

    failures = []
    bad = 0
    for args in cases:
        name = "loopscope " + " ".join(args)
        nfail = len(failures)
        rc, out, err = run([ls] + args, False)
        if rc != 0 or not out or err:
            failures.append(f"{name} (stdout on a pipe): exit {rc}, {len(out)} bytes out, "
                            f"stderr {err.decode(errors='replace')!r}")
        rc, _, err = run([ls] + args, True)
        errl = err.decode(errors="replace").splitlines()
        if rc == 0 or rc < 0 or len(errl) != 1 or not errl[0].startswith("error: "):
            failures.append(f"{name} >/dev/full: exit {rc}, stderr {errl!r} "
                            "(want a non-zero exit and one 'error: ...' line)")
        elif len(failures) == nfail:
            print(f"ok  {name}; >/dev/full: exit {rc}: {errl[0]}")
        bad += len(failures) > nfail
    for f in failures:
        print("FAIL", f)
    print(f"{len(cases) - bad}/{len(cases)} invocations ok ({len(commands)} commands)")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
