/*
 * attach.c -- the source stage's programs: which BPF programs load and
 * attaching them: the scheduler and syscall programs every mode uses
 * (ls_attach_all), then the decoder's own (decode.h, attach): libevl's
 * USDT probes (ls_attach_evl) or the generic mode's wait-call
 * tracepoints (ls_attach_generic).  Part of the recorder (recorder.h).
 */
#define _GNU_SOURCE
#include "recorder.h"
#include "stapsdt.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <unistd.h>

static int attach_usdt(recorder *r, struct bpf_program *prog, const char *probe)
{
    if (r->nlinks == LS_MAX_LINKS)
        return -E2BIG;
    struct bpf_link *l = bpf_program__attach_usdt(prog, r->child ? r->child : r->pid,
                                                  r->binary, "evl", probe, NULL);
    if (!l)
        return -errno;
    r->links[r->nlinks++] = l;
    return 0;
}

/* The generic mode's wait-call programs, enter and exit (tracepoints
 * syscalls:sys_enter_NAME / sys_exit_NAME); the first three are the epoll
 * family, the rest only with --wait-calls all. */
#define LS_WAIT_PROGS(s) { \
    { s->progs.on_enter_epoll_wait, s->progs.on_exit_epoll_wait }, \
    { s->progs.on_enter_epoll_pwait, s->progs.on_exit_epoll_pwait }, \
    { s->progs.on_enter_epoll_pwait2, s->progs.on_exit_epoll_pwait2 }, \
    { s->progs.on_enter_poll, s->progs.on_exit_poll }, \
    { s->progs.on_enter_ppoll, s->progs.on_exit_ppoll }, \
    { s->progs.on_enter_select, s->progs.on_exit_select }, \
    { s->progs.on_enter_pselect6, s->progs.on_exit_pselect6 } }

/* libbpf finds the syscall tracepoints' ids in tracefs: mount it where it
 * looks first when it is not mounted anywhere (a bare system, a fresh
 * container; we run as root). */
static int need_tracefs(void)
{
    if (access("/sys/kernel/tracing/events/syscalls", F_OK) == 0 ||
        access("/sys/kernel/debug/tracing/events/syscalls", F_OK) == 0)
        return 0;
    if (mount("nodev", "/sys/kernel/tracing", "tracefs", 0, NULL) < 0)
        return ls_error("the generic mode needs the syscall tracepoints: tracefs is not mounted "
                        "and mounting it on /sys/kernel/tracing failed: %s", strerror(errno));
    if (access("/sys/kernel/tracing/events/syscalls", F_OK) != 0)
        return ls_error("the generic mode needs the syscall tracepoints: this kernel has none "
                        "(CONFIG_FTRACE_SYSCALLS)");
    return 0;
}

int ls_attach_generic(recorder *r)
{
    struct record_bpf *s = r->skel;
    struct bpf_program *wait[][2] = LS_WAIT_PROGS(s);
    int n = r->wait_hook != LS_HOOK_TRACEPOINT ? 0
            : r->wait_calls != LS_WAIT_EPOLL ? (int)(sizeof(wait) / sizeof(wait[0])) : LS_EPOLL_CALLS;
    int err = n ? need_tracefs() : 0;
    if (err)
        return err;
    for (int i = 0; i < n; i++)
        for (int j = 0; j < 2; j++) {
            struct bpf_link *l = r->nlinks < LS_MAX_LINKS ? bpf_program__attach(wait[i][j]) : NULL;
            if (!l)
                return ls_error("cannot attach to the tracepoint of %s: %s",
                                bpf_program__name(wait[i][j]), strerror(errno));
            r->links[r->nlinks++] = l;
        }
    struct bpf_program *more[] = { s->progs.on_thread_exit,
                                   r->wait_hook == LS_HOOK_SWITCH ? s->progs.on_waking
                                                                   : s->progs.on_wait_enter,
                                   s->progs.on_wait_exit };
    int nmore = r->wait_hook == LS_HOOK_RAW ? 3 : r->wait_hook == LS_HOOK_SWITCH ? 2 : 1;
    for (int i = 0; i < nmore; i++) {
        struct bpf_link *l = r->nlinks < LS_MAX_LINKS ? bpf_program__attach(more[i]) : NULL;
        if (!l)
            return ls_error("cannot attach %s: %s", bpf_program__name(more[i]), strerror(errno));
        r->links[r->nlinks++] = l;
    }
    return 0;
}

/* waits (the generic mode): only the programs of the wait calls asked
 * for are loaded (none with --wait-hook switch: on_switch sees them), and
 * none of the USDT ones; else (libevl) none of the wait-call programs. */
void ls_choose_programs(recorder *r, bool waits)
{
    struct record_bpf *s = r->skel;
    struct bpf_program *wait[][2] = LS_WAIT_PROGS(s);
    int n = !waits || r->wait_hook != LS_HOOK_TRACEPOINT ? 0
            : r->wait_calls != LS_WAIT_EPOLL ? (int)(sizeof(wait) / sizeof(wait[0])) : LS_EPOLL_CALLS;
    r->skel->rodata->wait_switch = waits && r->wait_hook == LS_HOOK_SWITCH;
    for (size_t i = 0; i < sizeof(wait) / sizeof(wait[0]); i++)
        for (int j = 0; j < 2; j++)
            bpf_program__set_autoload(wait[i][j], (int)i < n);
    bpf_program__set_autoload(s->progs.on_thread_exit, waits);
    bpf_program__set_autoload(s->progs.on_pytask_init, waits);   /* decode_asyncio.c */
    bpf_program__set_autoload(s->progs.on_pytask_final, waits);
    bpf_program__set_autoload(s->progs.on_waking, waits && r->wait_hook == LS_HOOK_SWITCH);
    bpf_program__set_autoload(s->progs.on_wait_enter, waits && r->wait_hook == LS_HOOK_RAW);
    bpf_program__set_autoload(s->progs.on_wait_exit, waits && r->wait_hook == LS_HOOK_RAW);
    struct bpf_program *usdt[] = {
        s->progs.on_loop_start, s->progs.on_loop_stop, s->progs.on_batch,
        s->progs.on_task_create, s->progs.on_task_run, s->progs.on_task_suspend,
        s->progs.on_task_wake, s->progs.on_task_finish, s->progs.on_task_cancel,
        s->progs.on_task_leak, s->progs.on_poll_enter, s->progs.on_poll_exit,
        s->progs.on_callback_begin, s->progs.on_callback_end, s->progs.on_batch_gate,
    };
    if (waits)
        for (size_t i = 0; i < sizeof(usdt) / sizeof(usdt[0]); i++)
            bpf_program__set_autoload(usdt[i], false);
}

/* libevl: loop_start, loop_stop and batch (and the gate), or with
 * --no-batch one program per lifecycle probe. */
int ls_attach_evl(recorder *r)
{
    struct record_bpf *s = r->skel;
    struct { struct bpf_program *prog; const char *probe; bool batched; } t[] = {
        { s->progs.on_loop_start, "loop_start", true },
        { s->progs.on_loop_stop, "loop_stop", true },
        { s->progs.on_batch, "batch", true },
        { s->progs.on_task_create, "task_create", false },
        { s->progs.on_task_run, "task_run", false },
        { s->progs.on_task_suspend, "task_suspend", false },
        { s->progs.on_task_wake, "task_wake", false },
        { s->progs.on_task_finish, "task_finish", false },
        { s->progs.on_task_cancel, "task_cancel", false },
        { s->progs.on_task_leak, "task_leak", false },
        { s->progs.on_poll_enter, "poll_enter", false },
        { s->progs.on_poll_exit, "poll_exit", false },
        { s->progs.on_callback_begin, "callback_begin", false },
        { s->progs.on_callback_end, "callback_end", false },
    };
    /* LOOPSCOPE_TEST_ATTACH_WINDOW_MS=N (tests): the window between the
     * batch semaphore's rise and on_batch, N ms long: a program that
     * records nothing on `batch` first. */
    const char *window = getenv("LOOPSCOPE_TEST_ATTACH_WINDOW_MS");
    if (window && atoi(window) > 0 && !r->no_batch) {
        int rc = attach_usdt(r, s->progs.on_batch_gate, "batch");
        if (rc < 0)
            return ls_error("cannot attach to probe evl:batch in '%s': %s", r->binary,
                            strerror(-rc));
        usleep((useconds_t)atoi(window) * 1000);
    }
    for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
        bool want = i < 2 || t[i].batched != r->no_batch;
        if (!want)
            continue;
        int rc = attach_usdt(r, t[i].prog, t[i].probe);
        if (rc < 0)
            return ls_error("cannot attach to probe evl:%s in '%s': %s%s", t[i].probe, r->binary,
                            strerror(-rc), rc == -EACCES || rc == -EPERM
                                             ? " (uprobes need CAP_SYS_ADMIN)" : "");
    }
    /* The gate, last: evl_gate:batch, a site that never runs with the batch
     * semaphore, which rises by one now that on_batch is in place; the
     * loop takes the rise for a snapshot request, and its snapshot reaches
     * on_batch (the kernel raises a semaphore a moment before libbpf
     * attaches the program: tracer/README.md, "Every attach gets the
     * snapshot").  A libevl without it has no rule for the rise either. */
    if (!r->no_batch && ls_sdt_has_provider(r->binary, "evl_gate")) {
        struct bpf_link *l = r->nlinks == LS_MAX_LINKS ? NULL
            : bpf_program__attach_usdt(s->progs.on_batch_gate, r->child ? r->child : r->pid,
                                       r->binary, "evl_gate", "batch", NULL);
        if (!l)
            return ls_error("cannot attach to probe evl_gate:batch in '%s': %s", r->binary,
                            strerror(errno));
        r->links[r->nlinks++] = l;
    }
    return 0;
}

/* The programs every mode uses (--syscalls, blocking detection), then the
 * decoder's own (decode.h). */
int ls_attach_all(recorder *r)
{
    struct record_bpf *s = r->skel;
    if (r->syscalls) {
        struct bpf_link *e = bpf_program__attach(s->progs.on_sys_enter);
        struct bpf_link *x = e ? bpf_program__attach(s->progs.on_sys_exit) : NULL;
        if (!x) {
            bpf_link__destroy(e);
            return ls_error("cannot attach to the raw_syscalls tracepoints: %s", strerror(errno));
        }
        r->links[r->nlinks++] = e;
        r->links[r->nlinks++] = x;
    }
    if (r->watch_procs) {             /* a group's --children (group.c) */
        struct bpf_program *p[] = { s->progs.on_fork, s->progs.on_exec };
        for (int i = 0; i < 2; i++) {
            struct bpf_link *l = bpf_program__attach(p[i]);
            if (!l)
                return ls_error("cannot attach %s: %s", bpf_program__name(p[i]), strerror(errno));
            r->links[r->nlinks++] = l;
        }
    }
    if (!r->no_blocking) {
        struct bpf_link *l = bpf_program__attach(s->progs.on_switch);
        if (!l)
            return ls_error("cannot attach to the sched_switch tracepoint: %s", strerror(errno));
        r->links[r->nlinks++] = l;
    }
    return r->dec->attach(r);
}
