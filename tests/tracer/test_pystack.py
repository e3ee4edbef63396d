#!/usr/bin/env python3
"""CPython stacks of a blocked asyncio loop thread (tracer/pystack.c, pywalk.h).

    test_pystack.py walk --python PY --walk PYSTACK_WALK
        For the CPython PY: an asyncio program whose task calls a function
        that calls time.sleep(30) at a known line, once in a task named
        "sleepy-handler" (its first step: the callback is a
        TaskStepMethWrapper), once in an unnamed task resumed after an await
        (the callback is task_wakeup, a bound C method; 3.12+: the name is a
        lazy int, "Task-N") and once with a non-ASCII name (UCS-2).  While it
        sleeps, pystack_walk must print the exact functions, files, lines
        and task name.  Before that, the interpreter checks the offset table
        pystack_walk detected (pystack_walk --cfg) with ctypes from inside:
        a wrong offset fails loudly.
    test_pystack.py hostile --python PY --walk PYSTACK_WALK
        pystack_walk --cfg-at ADDR on addresses of garbage: random words,
        words pointing into the garbage itself (cycles), small integers;
        it must exit 0 (no crash, bounded time) every time.

Needs ptrace rights over a child (root, or the same user with
ptrace_scope 0).  Exit 0 = pass, 1 = fail.
"""
import json
import os
import random
import subprocess
import sys
import textwrap
import time

from lstest import Fail, check, wait_for, tmpdir, parse_args, run_case  # shared: lstest.py

PROGRAM = textwrap.dedent('''\
    import asyncio, ctypes, json, os, sys, threading, time

    def inner():
        time.sleep(30)  # SLEEP

    def handler():
        print("sleeping", flush=True)
        inner()  # CALL

    async def sleepy(wait_first):
        if wait_first:
            await asyncio.sleep(0.01)
        handler()  # CORO

    CFG = json.loads(os.environ["PYSTACK_CFG"])

    def P(addr):
        return ctypes.c_uint64.from_address(addr).value

    def U32(addr):
        return ctypes.c_uint32.from_address(addr).value

    def U8(addr):
        return ctypes.c_uint8.from_address(addr).value

    def check(what, got, want):
        if got != want:
            print("TABLE MISMATCH %s: got %r, want %r" % (what, got, want), flush=True)
            sys.exit(3)

    api = ctypes.pythonapi
    api.PyThreadState_Get.restype = ctypes.c_void_p
    api.PyInterpreterState_Get.restype = ctypes.c_void_p
    V = sys.version_info[:2]
    NONE = 0xffffffff

    def iframe_of(f):
        """the _PyInterpreterFrame of a frame object (3.11+: f_frame, after f_back)"""
        return P(id(f) + 24)

    def check_code(co):
        c = CFG
        check("ob_type of a code object", P(id(co) + 8), c["code_type"])
        check("co_name", P(id(co) + c["code_name"]), id(co.co_name))
        check("co_filename", P(id(co) + c["code_filename"]), id(co.co_filename))
        check("co_linetable", P(id(co) + c["code_linetable"]), id(co.co_linetable))
        check("co_firstlineno", ctypes.c_int32.from_address(id(co) + c["code_firstlineno"]).value,
              co.co_firstlineno)
        if c["code_qualname"] != NONE:
            check("co_qualname", P(id(co) + c["code_qualname"]), id(co.co_qualname))
        if c["code_code"] != NONE:
            check("co_code", P(id(co) + c["code_code"]), id(co.co_code))
        lt = co.co_linetable
        check("bytes ob_size", P(id(lt) + c["bytes_size"]), len(lt))
        check("bytes ob_sval", ctypes.string_at(id(lt) + c["bytes_sval"], len(lt)), lt)

    def check_str(s):
        c = CFG
        check("str type", P(id(s) + 8), c["unicode_type"])
        check("str length", P(id(s) + c["unicode_len"]), len(s))
        st = U32(id(s) + c["unicode_state"])
        kind = (st >> 2) & 7
        if st & 0x40:
            check("ascii str data", ctypes.string_at(id(s) + c["unicode_data"], len(s)), s.encode())
        else:
            enc = {1: "latin-1", 2: "utf-16-le", 4: "utf-32-le"}[kind]
            check("compact str data (kind %d)" % kind,
                  ctypes.string_at(id(s) + c["unicode_cdata"], len(s) * kind), s.encode(enc))

    def check_frame(f, arg0=None):
        """f: the frame object of a running function; arg0: its first argument"""
        c = CFG
        check_code(f.f_code)
        if c["kind"] == 1:  # 3.10: PyFrameObject
            fr = id(f)
            check("f_code", P(fr + c["frame_code"]), id(f.f_code))
            check("f_back", P(fr + c["frame_previous"]), id(f.f_back))
            check("f_lasti * 2", ctypes.c_int32.from_address(fr + c["frame_instr"]).value * 2, f.f_lasti)
        else:
            fr = iframe_of(f)
            # 3.14+: a _PyStackRef, its low bits tags (the walker masks them)
            check("f_code/f_executable", P(fr + c["frame_code"]) & ~7, id(f.f_code))
            base = id(f.f_code) + c["code_adaptive"]
            check("instruction offset", P(fr + c["frame_instr"]) - base, f.f_lasti)
        if arg0 is not None:
            check("localsplus[0]", P(fr + c["frame_localsplus"]) & ~7, id(arg0))
        return fr

    def check_table(task):
        c = CFG
        me = sys._getframe()
        # thread state
        ts = api.PyThreadState_Get()
        interp = api.PyInterpreterState_Get()
        check("tstate->interp", P(ts + c["tstate_interp"]), interp)
        if c["pthread_tid"] != NONE:
            check("tstate->thread_id", P(ts + c["tstate_tid"]), threading.get_ident())
            check("struct pthread tid", U32(threading.get_ident() + c["pthread_tid"]),
                  threading.get_native_id())
        else:
            check("native_thread_id", P(ts + c["tstate_tid"]), threading.get_native_id())
        rt = c["runtime"]
        addr = ctypes.addressof(ctypes.c_char.in_dll(api, "_PyRuntime"))
        check("_PyRuntime address", rt, addr)
        check("interpreters.head", P(rt + c["runtime_interp_head"]), interp)
        t, seen = P(interp + c["interp_threads_head"]), False
        for _ in range(64):
            if not t:
                break
            seen = seen or t == ts
            t = P(t + c["tstate_next"])
        check("this thread state in threads.head -> next", seen, True)
        # the current frame: this function's
        # (read inline: a call to P() would be the current frame)
        cur = ctypes.c_uint64.from_address(ts + c["tstate_frame"]).value
        if c["cframe_current"] != NONE:
            cur = ctypes.c_uint64.from_address(cur + c["cframe_current"]).value
        fr = check_frame(me, task)
        check("tstate current frame", cur, fr)
        if c["kind"] == 2:
            check("previous", P(fr + c["frame_previous"]), iframe_of(me.f_back))
        # the coroutine main() was entered from C (the task's step)
        main = me.f_back
        mfr = check_frame(main)
        if c["frame_is_entry"] != NONE:
            check("is_entry of a coroutine's first frame", U8(mfr + c["frame_is_entry"]), 1)
            check("is_entry of a called frame", U8(fr + c["frame_is_entry"]), 0)
        if c["owner_cstack"] != NONE:
            shim = P(mfr + c["frame_previous"])
            check("owner of the shim frame before an entry frame (owner_cstack and up)",
                  U8(shim + c["frame_owner"]) >= c["owner_cstack"], True)
            check("owner of a called frame", U8(fr + c["frame_owner"]), 0)
        # Handle._run(self): the Handle, its _callback, the task
        f = me
        while f and not (f.f_code.co_name == "_run" and
                         f.f_code.co_filename.endswith("asyncio/events.py")):
            f = f.f_back
        h = f.f_locals["self"]
        check_frame(f, h)
        check("Handle._callback", P(id(h) + c["handle_callback"]), id(h._callback))
        cb = h._callback
        if type(cb).__name__ == "TaskStepMethWrapper":
            check("TaskStepMethWrapper.sw_task", P(id(cb) + c["callback_task"]), id(task))
        else:
            check("bound method type", P(id(cb) + 8), c["cfunction_type"])
            check("m_self", P(id(cb) + c["cfunc_self"]), id(task))
        check("tp_basicsize", P(id(type(task)) + c["type_basicsize"]), type(task).__basicsize__)
        name = ctypes.cast(P(id(task) + c["task_name"]), ctypes.py_object).value
        check("task name field", str(name) if isinstance(name, str) else "Task-%d" % name,
              task.get_name())
        if isinstance(name, str):
            check_str(name)
        else:
            check("lazy name: int", V >= (3, 12), True)
            check("int type", P(id(name) + 8), c["long_type"])
            check("lv_tag digits", P(id(name) + 16) >> 3, 1)
            check("ob_digit", U32(id(name) + c["long_digit"]), name)
        check_str("plain ascii")
        check_str("latin-1 \\xe9t\\xe9")
        check_str("ucs2 \\u2713")
        check_str("ucs4 \\U0001f40d")
        n = 1 << 40
        if c["long_kind"] == 1:
            check("lv_tag of 2**40", P(id(n) + 16) >> 3, 2)
        else:
            check("ob_size of 2**40", P(id(n) + 16), 2)
        check("2**40 digits", (U32(id(n) + c["long_digit"]) | U32(id(n) + c["long_digit"] + 4) << 30), n)

    async def checker():
        check_table(asyncio.current_task())

    async def main():
        await asyncio.create_task(checker())
        print("checked", flush=True)
        mode = sys.argv[1]
        name = {"named": "sleepy-handler", "default": None, "unicode": "schl\\xe4fer-\\u2713"}[mode]
        print("ready", os.getpid(), threading.get_native_id(), flush=True)
        await asyncio.create_task(sleepy(mode == "default"), name=name)

    asyncio.run(main())  # MODULE
''')

EXPECTED_NAME = {"named": "sleepy-handler", "default": "Task-3", "unicode": "schl\u00e4fer-\u2713"}
SLEEP_SYSCALLS = {230, 35, 23, 270, 7}   # clock_nanosleep, nanosleep, select, pselect6, poll


def line_of(marker):
    for i, l in enumerate(PROGRAM.splitlines(), 1):
        if l.rstrip().endswith("# " + marker):
            return i
    raise AssertionError(marker)


def handle_run_line(py):
    """the line of Handle._run that runs the callback, from the interpreter's own source"""
    out = subprocess.run([py, "-c", textwrap.dedent('''\
        import asyncio.events, inspect
        lines, start = inspect.getsourcelines(asyncio.events.Handle._run)
        for i, l in enumerate(lines):
            if "_context.run(" in l:
                print(start + i, asyncio.events.__file__)
                break
        ''')], check=True, capture_output=True, text=True).stdout.split()
    return int(out[0]), out[1]


def cfg_of(walk, pid):
    r = subprocess.run([walk, "--cfg", str(pid)], capture_output=True, text=True, timeout=30)
    if r.returncode:
        raise Fail("pystack_walk --cfg: %s" % r.stderr.strip())
    return {k: int(v) for k, v in (l.split() for l in r.stdout.splitlines())}


def wait_line(proc, prefix, timeout=30):
    end = time.time() + timeout
    while time.time() < end:
        l = proc.stdout.readline()
        if not l:
            raise Fail("target exited: %s" % proc.stderr.read())
        if l.startswith("TABLE MISMATCH"):
            raise Fail(l.strip())
        if l.startswith(prefix):
            return l.split()
    raise Fail("no %r from the target" % prefix)


def wait_asleep(pid, tid, timeout=10):
    def asleep():
        try:
            with open("/proc/%d/task/%d/syscall" % (pid, tid)) as f:
                nr = f.read().split()[0]
        except OSError:
            return False
        return nr.isdigit() and int(nr) in SLEEP_SYSCALLS
    wait_for(asleep, timeout, "thread %d to sleep" % tid, interval=0.02)


def stop(proc):
    proc.kill()
    proc.wait()
    for f in (proc.stdin, proc.stdout, proc.stderr):
        if f:
            f.close()


GATE = ("import json, os, sys\n"
        "os.environ['PYSTACK_CFG'] = sys.stdin.readline()\n")
SHIFT = 2   # the gate's lines


def run_walk(py, walk, d):
    script = os.path.join(d, "sleepy.py")
    with open(script, "w") as f:
        # the program waits for its cfg on stdin before anything else runs
        f.write(GATE + PROGRAM)
    hline, events = handle_run_line(py)
    minor = int(subprocess.run([py, "-c", "import sys; print(sys.version_info[1])"], check=True,
                               capture_output=True, text=True).stdout)
    return sum(one_mode(py, walk, script, mode, hline, events, minor)
               for mode in ("named", "default", "unicode"))


def detect(walk, pid, timeout=20):
    end = time.time() + timeout
    while True:
        try:
            return cfg_of(walk, pid)
        except Fail as e:
            if time.time() > end or not any(w in str(e) for w in (
                    "not initialized", "no thread state", "not CPython")):
                raise
            time.sleep(0.05)


def one_mode(py, walk, script, mode, hline, events, minor):
    proc = subprocess.Popen([py, script, mode], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True,
                            env=dict(os.environ, PYTHONDONTWRITEBYTECODE="1"))
    try:
        cfg = detect(walk, proc.pid)
        proc.stdin.write(json.dumps(cfg) + "\n")
        proc.stdin.flush()
        wait_line(proc, "checked")
        _, pid, tid = wait_line(proc, "ready")
        pid, tid = int(pid), int(tid)
        wait_line(proc, "sleeping")
        wait_asleep(pid, tid)
        r = subprocess.run([walk, str(pid), str(tid)], capture_output=True, text=True, timeout=30)
        out = r.stdout.splitlines()
        print("--- CPython 3.%d %s: pystack_walk %d %d (rc %d); table checked with ctypes"
              % (minor, mode, pid, tid, r.returncode))
        print(r.stdout + r.stderr, end="")
        if r.returncode:
            return 1
        q = (lambda cls, fn: "%s.%s" % (cls, fn)) if minor >= 11 else (lambda cls, fn: fn)
        want_task = EXPECTED_NAME[mode]
        want = [
            ("inner", script, line_of("SLEEP") + SHIFT),
            ("handler", script, line_of("CALL") + SHIFT),
            ("sleepy", script, line_of("CORO") + SHIFT),
            (q("Handle", "_run"), events, hline),
        ]
        got = []
        for l in out:
            if l.startswith("frame "):
                fr = l.split(" ")
                file, _, line = fr[2].rpartition(":")
                got.append((fr[1], file, int(line), set(fr[3:])))
        errors = []
        if ("task %s" % want_task) not in out:
            errors.append("task name: want %r" % want_task)
        for i, w in enumerate(want):
            if i >= len(got) or got[i][:3] != w:
                errors.append("frame %d: want %s %s:%d, got %s" % (
                    i, w[0], w[1], w[2], got[i][:3] if i < len(got) else None))
        if len(got) >= 4:
            if "handle_run" not in got[3][3]:
                errors.append("Handle._run not flagged")
            # entry frames: 3.10 every frame; 3.11+ the coroutine (entered
            # from the task's C step) and <module>, not inner/handler
            if "entry" not in got[2][3]:
                errors.append("the coroutine's frame is not an entry frame")
            if minor >= 11 and ("entry" in got[0][3] or "entry" in got[1][3]):
                errors.append("a called frame is flagged entry")
        names = [g[0] for g in got]
        order = [q("BaseEventLoop", "_run_once"), q("BaseEventLoop", "run_forever"),
                 q("BaseEventLoop", "run_until_complete")]
        idx = [names.index(n) if n in names else -1 for n in order]
        if -1 in idx or idx != sorted(idx):
            errors.append("event loop frames missing or out of order: %s" % names)
        if not got or got[-1][:3] != ("<module>", script, line_of("MODULE") + SHIFT) \
                or "entry" not in got[-1][3]:
            errors.append("outermost frame: want <module> %s:%d entry" % (
                script, line_of("MODULE") + SHIFT))
        for e in errors:
            print("FAIL: " + e)
        return 1 if errors else 0
    finally:
        stop(proc)


GARBAGE = textwrap.dedent('''\
    import ctypes, os, random, struct, sys, threading, time
    random.seed(int(sys.argv[1]))
    tid = threading.get_native_id()
    n = 1 << 20
    buf = bytearray(n)
    base = ctypes.addressof((ctypes.c_char * n).from_buffer(buf))
    words = []
    for i in range(n // 8):
        r = random.random()
        if r < 0.5:
            w = base + random.randrange(0, n - 8) // 8 * 8      # into the garbage: cycles
        elif r < 0.6:
            w = base                                            # "the type object"
        elif r < 0.75:
            w = tid                                             # "this thread"
        elif r < 0.85:
            w = random.randrange(0, 100)                        # small counts and lengths
        else:
            w = random.getrandbits(64)
        words.append(w)
    buf[:] = struct.pack("<%dQ" % len(words), *words)
    print(base, flush=True)
    time.sleep(60)
''')


def run_hostile(py, walk, d):
    script = os.path.join(d, "garbage.py")
    with open(script, "w") as f:
        f.write(GARBAGE)
    failures = walked = 0
    for seed in range(6):
        proc = subprocess.Popen([py, script, str(seed)], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        try:
            base = int(proc.stdout.readline())
            tids = [proc.pid]
            rng = random.Random(seed)
            addrs = [base + 8 * rng.randrange(0, 1 << 17) for _ in range(40)]
            addrs += [base, base + (1 << 20) - 8, rng.getrandbits(47), 1, (1 << 64) - 8]
            for a in addrs:
                t0 = time.time()
                r = subprocess.run([walk, "--cfg-at", str(a), str(proc.pid), str(tids[0])],
                                   capture_output=True, text=True, timeout=60)
                dt = time.time() - t0
                nf = sum(1 for l in r.stdout.splitlines() if l.startswith("frame "))
                walked += nf
                if nf or r.returncode or dt > 5:
                    print("seed %d addr %#x: rc %d, %.2fs, %d frames" % (seed, a, r.returncode, dt, nf))
                if r.returncode != 0:
                    print("FAIL: pystack_walk exited %d: %s" % (r.returncode, r.stderr.strip()[-2000:]))
                    failures += 1
                for l in r.stdout.splitlines():
                    try:
                        l.encode("utf-8")
                    except UnicodeEncodeError:
                        print("FAIL: invalid UTF-8 in output")
                        failures += 1
        finally:
            stop(proc)
    # the garbage must have been walked, not refused at the first read
    if not walked:
        print("FAIL: no frame was ever walked in the garbage")
        failures += 1
    return failures


def main():
    def mode(run):
        def case():
            check(os.access(a.python, os.X_OK), "%s is not installed" % a.python)
            fails = run(a.python, a.walk, tmpdir())
            check(not fails, "%d failed (above)" % fails)
        return case
    cases = {"walk": mode(run_walk), "hostile": mode(run_hostile)}
    a = parse_args(cases, ("python", "walk"))
    return run_case(cases, a, root_why=None)      # ptrace of a child: no root needed


if __name__ == "__main__":
    sys.exit(main())
