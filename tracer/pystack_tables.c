/*
 * pystack_tables.c -- part of pystack (CPython stacks, PYTHON.md): the
 * data, one table of CPython's structure offsets per supported minor
 * version (ls_py_table, called by ls_py_detect in pystack_detect.c).
 * Depends on pystack_int.h.
 *
 * Supported: CPython 3.10 to 3.15 (default builds, x86-64, glibc), as a
 * static interpreter or with libpython3.X.so.  One offset table per minor
 * version, read from the debug information of pyenv builds (3.10.13,
 * 3.11.7, 3.12.1, 3.13.0) and of Debian's (3.14.10, 3.15.2) with gdb
 * (3.14+: only what _Py_DebugOffsets does not publish) and checked from inside each
 * interpreter with ctypes (tests/tracer/test_pystack.py); at detect time the
 * table is checked against the target's own data: the type objects' names,
 * the first thread state's back pointer and thread id; in 3.13 the
 * offsets _Py_DebugOffsets publishes at the start of _PyRuntime replace
 * the table's (pystack_detect.c); 3.14+ must have them.  Anything else is refused with a reason.
 */
#include "pystack_int.h"

#define N LS_PY_NONE

/* Offsets read with gdb from the DWARF of pyenv's libpython3.X.so builds
 * (ptype/offsetof on PyThreadState, _PyInterpreterFrame, PyCodeObject,
 * TaskObj of _asyncio.so, ...); see PYTHON.md. */
int ls_py_table(unsigned minor, struct ls_py_cfg *c)
{
    struct ls_py_cfg t = {
        /* common to 3.10-3.13 */
        .interp_next = 0, .tstate_next = 8, .tstate_interp = 16,
        .bytes_size = 16, .bytes_sval = 32,
        .handle_callback = 24,      /* sorted __slots__: _args, _callback, ... */
        .callback_task = 16, .cfunc_self = 24, .type_basicsize = 32,
        .unicode_len = 16, .unicode_state = 32, .long_digit = 24,
        .code_filename = 112, .code_name = 120, .code_qualname = 128,
        .code_linetable = 136, .code_code = N, .pthread_tid = N,
        .cframe_current = N, .frame_owner = N, .frame_is_entry = N, .owner_cstack = N,
        .kind = LS_PY_KIND_IFRAME, .frame_localsplus = 72, .frame_read = 80,
        .tstate_running_task = N,
    };
    switch (minor) {
    case 10:
        t.kind = LS_PY_KIND_FRAMEOBJ;
        t.runtime_interp_head = 32; t.interp_threads_head = 8;      /* tstate_head */
        t.tstate_tid = 176;                                         /* thread_id */
        t.pthread_tid = 720;                                        /* glibc 2.2x-2.3x x86-64 */
        t.tstate_frame = 24;
        t.frame_code = 32; t.frame_previous = 24; t.frame_instr = 96; /* f_lasti */
        t.frame_localsplus = 352; t.frame_read = 104;
        t.code_adaptive = N; t.code_code = 48;
        t.code_filename = 104; t.code_name = 112; t.code_qualname = N;
        t.code_linetable = 120; t.code_firstlineno = 40;
        t.task_name = 168;
        t.unicode_data = 48; t.unicode_cdata = 72;
        t.long_kind = LS_PY_LONG_SIZE;
        break;
    case 11:
        t.runtime_interp_head = 40; t.interp_threads_head = 16;
        t.tstate_tid = 160; t.tstate_frame = 56; t.cframe_current = 8;
        t.frame_code = 32; t.frame_previous = 48; t.frame_instr = 56;
        t.frame_is_entry = 68; t.frame_owner = 69;
        t.code_adaptive = 184; t.code_firstlineno = 72;
        t.task_name = 144;
        t.unicode_data = 48; t.unicode_cdata = 72;
        t.long_kind = LS_PY_LONG_SIZE;
        break;
    case 12:
        t.runtime_interp_head = 40; t.interp_threads_head = 72;
        t.tstate_tid = 144; t.tstate_frame = 56; t.cframe_current = 0;
        t.frame_code = 0; t.frame_previous = 8; t.frame_instr = 56;
        t.frame_owner = 70; t.owner_cstack = 3;
        t.code_adaptive = 192; t.code_firstlineno = 68;
        t.task_name = 144;
        t.unicode_data = 40; t.unicode_cdata = 56;
        t.long_kind = LS_PY_LONG_TAG;
        break;
    case 13:
        t.runtime_interp_head = 632; t.interp_threads_head = 7344; t.interp_next = 7264;
        t.tstate_tid = 160; t.tstate_frame = 72;                    /* current_frame */
        t.frame_code = 0; t.frame_previous = 8; t.frame_instr = 56;
        t.frame_owner = 70; t.owner_cstack = 3;
        t.code_adaptive = 200; t.code_firstlineno = 68;
        t.task_name = 128;
        t.unicode_data = 40; t.unicode_cdata = 56;
        t.long_kind = LS_PY_LONG_TAG;
        break;
    case 14:
    case 15:
        /* every offset of the walk comes from _Py_DebugOffsets (required
         * from 3.14 on); the rest, from the DWARF of Debian's 3.14.10 and
         * 3.15.2: f_executable is a _PyStackRef (tag bits masked), the
         * shim frames are owned by the interpreter (3) or, 3.14, the C
         * stack (4) */
        t.runtime_interp_head = N; t.interp_threads_head = N; t.interp_next = N;
        t.tstate_tid = N; t.tstate_frame = N;
        t.frame_code = N; t.frame_previous = N; t.frame_instr = N;
        t.frame_owner = N; t.owner_cstack = 3; t.frame_localsplus = N; t.frame_read = 80;
        t.code_adaptive = N; t.code_firstlineno = N;
        t.task_name = 136;
        t.tstate_running_task = minor == 14 ? 872 : 1032;
        t.unicode_data = N; t.unicode_cdata = 56;
        t.long_kind = LS_PY_LONG_TAG;
        break;
    default:
        return -1;
    }
    t.version = 0x0300 | minor;
    t.dict_keys311 = minor >= 11;
    *c = t;
    return 0;
}

#undef N
