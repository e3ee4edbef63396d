/*
 * pystack_walk PID TID -- the CPython stack of one thread, walked from user
 * space with the recorder's walker (tracer/pywalk.h through process_vm_readv,
 * ls_py_capture_user) and resolved like the recorder resolves what BPF
 * captured (ls_py_frame, ls_py_task_name).  For tests/tracer/test_pystack.py.
 *
 * Output, one line each:
 *   python CPython 3.11.2
 *   task NAME | task -
 *   flags N
 *   frame FUNCTION FILE:LINE [entry] [handle_run]      (innermost first)
 * Exit 0, 1 on a refused target (the reason on stderr), 2 on bad usage.
 *
 *   pystack_walk --cfg PID
 * prints the detected struct ls_py_cfg, one "field value" a line (the test
 * checks the table from inside the interpreter with ctypes).
 *
 *   pystack_walk --cfg-at ADDR PID TID
 * detects as usual, then points every root of the walk (_PyRuntime and the
 * type objects) at ADDR: the walker on garbage (hostile test).
 */
#include "pystack.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LS_CFG_FIELDS(X) X(runtime) X(version) X(kind) X(code_type) X(unicode_type) \
    X(long_type) X(cfunction_type) X(cmethod_type) X(method_type) X(runtime_interp_head) \
    X(interp_threads_head) X(interp_next) X(tstate_next) X(tstate_interp) X(tstate_tid) \
    X(pthread_tid) X(tstate_frame) X(cframe_current) X(frame_code) X(frame_previous) \
    X(frame_instr) X(frame_owner) X(frame_is_entry) X(frame_localsplus) X(owner_cstack) \
    X(code_adaptive) X(code_code) X(code_name) X(code_qualname) X(code_filename) \
    X(code_linetable) X(code_firstlineno) X(bytes_size) X(bytes_sval) X(handle_callback) \
    X(callback_task) X(cfunc_self) X(task_name) X(type_basicsize) X(unicode_len) \
    X(unicode_state) X(unicode_data) X(unicode_cdata) X(long_kind) X(long_digit) X(frame_read)

static int print_cfg(pid_t pid)
{
    struct ls_py_cfg c;
    char desc[64];
    const char *why = NULL;
    ls_py *py = ls_py_detect(pid, &c, desc, sizeof desc, &why);
    if (!py) {
        fprintf(stderr, "pystack_walk: %s\n", why ? why : "?");
        return 1;
    }
#define P(f) printf(#f " %llu\n", (unsigned long long)c.f);
    LS_CFG_FIELDS(P)
#undef P
    ls_py_free(py);
    return 0;
}

int main(int argc, char **argv)
{
    unsigned long long garbage = 0;
    if (argc == 3 && !strcmp(argv[1], "--cfg"))
        return print_cfg(atoi(argv[2]));
    if (argc == 5 && !strcmp(argv[1], "--cfg-at")) {
        garbage = strtoull(argv[2], NULL, 0);
        argv += 2;
        argc -= 2;
    }
    if (argc != 3) {
        fprintf(stderr, "usage: pystack_walk [--cfg-at ADDR] PID TID\n");
        return 2;
    }
    pid_t pid = atoi(argv[1]);
    __u32 tid = (__u32)atoi(argv[2]);
    struct ls_py_cfg cfg;
    char desc[64];
    const char *why = NULL;
    ls_py *py = ls_py_detect(pid, &cfg, desc, sizeof desc, &why);
    if (!py) {
        fprintf(stderr, "pystack_walk: %s\n", why ? why : "?");
        return 1;
    }
    printf("python %s\n", desc);
    if (garbage) {
        cfg.runtime = garbage;
        cfg.code_type = cfg.unicode_type = cfg.long_type = garbage;
        cfg.cfunction_type = cfg.method_type = garbage;
        ls_py_set_cfg_for_test(py, &cfg);
    }
    static struct ls_pystack s;
    ls_py_capture_user(py, tid, &s);
    const char *tn = ls_py_task_name(py, &s);
    printf("task %s\n", tn ? tn : "-");
    printf("flags %u\n", s.flags);
    for (__u32 i = 0; i < s.nframes && i < LS_PY_MAX_FRAMES; i++) {
        const char *fn, *file;
        int line;
        ls_py_frame(py, &s.f[i], &fn, &file, &line);
        printf("frame %s %s:%d%s%s\n", fn, file, line,
               s.f[i].flags & LS_PYF_ENTRY ? " entry" : "",
               s.f[i].flags & LS_PYF_HANDLE_RUN ? " handle_run" : "");
    }
    ls_py_free(py);
    return 0;
}
