#!/usr/bin/env python3
"""run_golden.py -- golden-output tests of the loopscope viewer commands.

    run_golden.py --loopscope BIN --fixtures DIR CMD.NAME    run one case
    run_golden.py --loopscope BIN --fixtures DIR --list      list the cases
    run_golden.py --loopscope BIN --fixtures DIR --update [CMD.NAME...]
                                                   rewrite golden files

Cases live in tests/viewer/cases/CMD.txt, one per line:

    NAME: ARGS...

ARGS is split like a shell would (shlex).  Placeholders:
    {fixture:NAME}   tests/viewer/fixtures/NAME.sql built into DIR/NAME.db
    {bad:KIND}       a broken input: missing, text, empty, foreign, newer,
                     older, truncated, directory; or schema3: blocking's
                     events in chunks of 1024 under schema version 3, which
                     is read
    {out:FILE}       a file in a scratch directory the command may write

The expected result is tests/viewer/golden/CMD.NAME.out: the exit status,
stdout and stderr (with the placeholders' paths written back as
placeholders).  Files written to {out:FILE} are compared too when their
golden copy CMD.NAME.FILE exists (text outputs such as .dot and .json), and
checked for well-formedness when the command succeeded: .svg is parsed as
XML, .json as JSON, .dot is parsed back by Graphviz (dot -Tcanon), .png and
.pdf must start with their signatures; when it failed, the file must not
exist.  To refresh after an intended change: --update, then review the
diff before committing: --update prints the diff of every golden file it
changes (and "unchanged CASE" for the others).
"""
import argparse
import difflib
import json
import os
import shlex
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import lstrace  # noqa: E402  (tests/lstrace.py: events through the extension, for {bad:schema3})

HERE = os.path.dirname(os.path.abspath(__file__))


def load_cases():
    cases = {}
    for fn in sorted(os.listdir(os.path.join(HERE, "cases"))):
        if not fn.endswith(".txt"):
            continue
        cmd = fn[:-4]
        for line in open(os.path.join(HERE, "cases", fn)):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            name, _, args = line.partition(":")
            cases[f"{cmd}.{name.strip()}"] = shlex.split(args)
    return cases


def make_bad(kind, fixtures, tmp):
    p = os.path.join(tmp, f"bad-{kind}.db")
    good = os.path.join(fixtures, "lifecycle.db")
    if kind == "missing":
        return p
    if kind == "directory":
        os.makedirs(p, exist_ok=True)
    elif kind == "text":
        open(p, "w").write("this is not a database\n" * 100)
    elif kind == "empty":
        open(p, "w").close()
    elif kind == "foreign":
        con = sqlite3.connect(p)
        con.execute("CREATE TABLE t(x)")
        con.commit()
        con.close()
    elif kind in ("newer", "older"):     # a schema after this loopscope's, or before chunks
        shutil.copy(good, p)
        con = sqlite3.connect(p)
        con.execute(f"PRAGMA user_version = {99 if kind == 'newer' else 2}")
        con.commit()
        con.close()
    elif kind == "schema3":              # readable: schema 4 only allows larger chunks
        shutil.copy(os.path.join(fixtures, "blocking.db"), p)
        rows = lstrace.event_rows(p)
        con = sqlite3.connect(p)
        for table in ("event_chunks", "event_chunk_data", "event_chunk_tasks"):
            con.execute(f"DELETE FROM {table}")
        lstrace.write_events(con, rows, per_chunk=1024)  # chunks of 1024, as schema 3 wrote them
        if con.execute("SELECT count(*) FROM event_chunks").fetchone()[0] < 2:
            raise SystemExit("{bad:schema3}: blocking.db should need several 1024-event chunks")
        con.execute("PRAGMA user_version = 3")
        con.commit()
        con.close()
    elif kind == "truncated":
        data = open(good, "rb").read()
        open(p, "wb").write(data[: len(data) // 3])
    else:
        raise SystemExit(f"unknown {{bad:{kind}}}")
    return p


def expand(args, fixtures, tmp):
    subst = {}
    out = []
    for a in args:
        while "{" in a and "}" in a[a.index("{"):]:
            i = a.index("{")
            j = a.index("}", i)
            kind, _, val = a[i + 1:j].partition(":")
            if kind == "fixture":
                path = os.path.join(fixtures, f"{val}.db")
            elif kind == "bad":
                path = make_bad(val, fixtures, tmp)
            elif kind == "out":
                path = os.path.join(tmp, val)
            else:
                raise SystemExit(f"unknown placeholder {a[i:j + 1]}")
            subst[path] = a[i:j + 1]
            a = a[:i] + path + a[j + 1:]
        out.append(a)
    return out, subst


def normalize(text, subst):
    for path, ph in sorted(subst.items(), key=lambda kv: -len(kv[0])):
        text = text.replace(path, ph)
    return text


def check_file(path, name):
    """Well-formedness of a written file; returns an error string or None."""
    if not os.path.exists(path):
        return f"{name} was not written"
    data = open(path, "rb").read()
    if not data:
        return f"{name} is empty"
    try:
        if name.endswith(".svg"):
            ET.fromstring(data)
        elif name.endswith(".json"):
            json.loads(data)
        elif name.endswith(".png") and not data.startswith(b"\x89PNG\r\n\x1a\n"):
            return f"{name} is not a PNG"
        elif name.endswith(".pdf") and not data.startswith(b"%PDF-"):
            return f"{name} is not a PDF"
        elif name.endswith(".dot"):
            p = subprocess.run(["dot", "-Tcanon", path], capture_output=True, text=True)
            if p.returncode != 0:
                return f"{name}: Graphviz cannot parse it: {p.stderr.strip()}"
    except Exception as e:                       # noqa: BLE001 -- report any parse error
        return f"{name} is malformed: {e}"
    return None


def write_golden(path, text):
    """Write a golden file; print its diff and return True if it changed."""
    old = open(path).read() if os.path.exists(path) else None
    if old == text:
        return False
    rel = os.path.relpath(path, HERE)
    sys.stdout.writelines(difflib.unified_diff(
        (old or "").splitlines(True), text.splitlines(True),
        f"a/{rel}" if old is not None else "/dev/null", f"b/{rel}"))
    if not text.endswith("\n"):
        print("\n\\ No newline at end of file")
    open(path, "w").write(text)
    return True


def run_case(a, case, args, update):
    tmp = tempfile.mkdtemp(prefix="lsgold-")
    try:
        argv, subst = expand(args, a.fixtures, tmp)
        p = subprocess.run([a.loopscope, *argv], capture_output=True, text=True, timeout=120,
                           env={**os.environ, "COLUMNS": "100", "NO_COLOR": "1"})
        got = normalize(f"exit {p.returncode}\n--- stdout\n{p.stdout}--- stderr\n{p.stderr}",
                        subst)
        errors = []
        files = {}
        for path, ph in subst.items():
            if not ph.startswith("{out:"):
                continue
            name = ph[5:-1]
            if p.returncode != 0:         # a failing command must not leave it behind
                if os.path.exists(path):
                    errors.append(f"{name} was written although the command failed")
                continue
            err = check_file(path, name)
            if err:
                errors.append(err)
            elif not name.endswith((".png", ".svg", ".pdf")):
                files[name] = normalize(open(path, errors="replace").read(), subst)
        golden = os.path.join(HERE, "golden", f"{case}.out")
        if update:
            # Print what changes, so that an update is reviewed, not waved through.
            changed = write_golden(golden, got)
            for name, text in files.items():
                changed |= write_golden(os.path.join(HERE, "golden", f"{case}.{name}"), text)
            print(f"updated {case}" if changed else f"unchanged {case}")
            if errors:
                print("\n".join(errors))
            return 0 if not errors else 1
        if not os.path.exists(golden):
            errors.append(f"no golden file {golden} (run with --update, then review)")
        else:
            want = open(golden).read()
            if want != got:
                errors.append("output differs from " + golden + ":\n" + "".join(
                    difflib.unified_diff(want.splitlines(True), got.splitlines(True),
                                         "expected", "got")))
        for name, text in files.items():
            g = os.path.join(HERE, "golden", f"{case}.{name}")
            if os.path.exists(g) and open(g).read() != text:
                errors.append(f"{name} differs from {g}:\n" + "".join(difflib.unified_diff(
                    open(g).read().splitlines(True), text.splitlines(True), "expected", "got")))
        if errors:
            print(f"FAIL {case}: {' '.join(shlex.quote(x) for x in args)}")
            print("\n".join(errors))
            return 1
        print(f"ok {case}")
        return 0
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--loopscope", required=True)
    ap.add_argument("--fixtures", required=True)
    ap.add_argument("--update", action="store_true")
    ap.add_argument("--list", action="store_true")
    ap.add_argument("case", nargs="*")
    a = ap.parse_args()
    a.loopscope = os.path.abspath(a.loopscope)
    a.fixtures = os.path.abspath(a.fixtures)
    cases = load_cases()
    if a.list:
        print("\n".join(cases))
        return 0
    names = a.case or (list(cases) if a.update else [])
    if not names:
        ap.error("name a case (or --list)")
    rc = 0
    for n in names:
        if n not in cases:
            print(f"unknown case {n}")
            return 2
        rc |= run_case(a, n, cases[n], a.update)
    return rc


if __name__ == "__main__":
    sys.exit(main())
