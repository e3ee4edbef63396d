/*
 * record_generic.bpf.c -- the generic loop mode (a process without
 * libevl).  Part of record.skel.h (record.bpf.h).
 *
 * A thread of the target that enters epoll_wait, epoll_pwait or
 * epoll_pwait2 is a loop thread; so is one that enters poll, ppoll,
 * select or pselect6 and has never entered one of those (--wait-calls
 * auto, the default: a poll loop; glibc's resolver polling on an epoll
 * loop thread stays a blocking call), or any (--wait-calls all); a poll or
 * select on no descriptor is a sleep, never a wait.  Inside that call it
 * is idle.  The entry ends an iteration's busy stretch (and any off-CPU
 * episode: the loop waits again), the return starts the next one
 * (record_wait.bpf.h).  Iterations are summed per window and sent when a
 * window of window_ns has passed, at an entry.
 */
#include "record_wait.bpf.h"

static __always_inline int wait_exit_current(void)
{
    wait_exit((__u32)bpf_get_current_pid_tgid(), bpf_ktime_get_ns());
    return 0;
}

/* Three ways to see the wait calls (--wait-hook, tracer/README.md); the
 * first two are here:
 *
 * tracepoint (default): the per-syscall tracepoints syscalls:sys_enter_NAME
 * and sys_exit_NAME of the wait calls only.  They go through perf's event
 * buffer, so each costs every process's calls of that syscall (about
 * 0.6 us per epoll_wait here), and any enabled syscall tracepoint sends
 * every syscall of the machine down the kernel's slow path (about 0.1 us).
 *
 * raw: one BTF raw tracepoint pair (sys_enter/sys_exit) for every syscall
 * of the machine, a test of the thread group and of the syscall number:
 * cheaper per epoll_wait, dearer for every other syscall.
 * Measured in tests/bench/results/generic_overhead.txt.
 *
 * switch: no syscall hook at all; the scheduler's switches see the wait
 * calls that sleep (record_blocking.bpf.c, on_switch). */
#define LS_WAIT_CALL(name, poll, nfds_arg)                                       \
    SEC("tracepoint/syscalls/sys_enter_" #name)                                  \
    int on_enter_##name(struct trace_event_raw_sys_enter *ctx)                   \
    {                                                                            \
        wait_enter((__u32)bpf_get_current_pid_tgid(), bpf_ktime_get_ns(), poll,  \
                   ctx->args[nfds_arg]);                                          \
        return 0;                                                                \
    }                                                                            \
    SEC("tracepoint/syscalls/sys_exit_" #name)                                   \
    int on_exit_##name(void *ctx) { return wait_exit_current(); }

LS_WAIT_CALL(epoll_wait, false, 2)     /* (maxevents: not looked at) */
LS_WAIT_CALL(epoll_pwait, false, 2)
LS_WAIT_CALL(epoll_pwait2, false, 2)
LS_WAIT_CALL(poll, true, 1)            /* poll(fds, nfds, ...) */
LS_WAIT_CALL(ppoll, true, 1)
LS_WAIT_CALL(select, true, 0)          /* select(nfds, ...) */
LS_WAIT_CALL(pselect6, true, 0)

SEC("tp_btf/sys_enter")
int BPF_PROG(on_wait_enter, struct pt_regs *regs, long id)
{
    if (!from_target() || !is_wait_call(id))
        return 0;
    wait_enter((__u32)bpf_get_current_pid_tgid(), bpf_ktime_get_ns(), !is_epoll_call(id),
               wait_nfds(regs, id));
    return 0;
}

SEC("tp_btf/sys_exit")
int BPF_PROG(on_wait_exit, struct pt_regs *regs, long ret)
{
    if (!from_target() || !is_wait_call((long)regs->orig_ax))
        return 0;
    return wait_exit_current();
}

/* A syscall by which a loop hands something to another thread: a reply
 * written to a client's socket or pipe, a worker woken, a connection
 * closed. */
static __always_inline bool hands_over(long nr)
{
    switch (nr) {
    case 1: case 3: case 18: case 20: case 44: case 46: case 48: /* write close pwrite64 writev
                                                                    sendto sendmsg shutdown */
    case 202: case 296: case 307: case 328: case 426:   /* futex pwritev sendmmsg pwritev2
                                                           io_uring_enter */
        return true;
    }
    return false;
}

/* --wait-hook switch: a loop thread (the current one, outside its wait)
 * wakes a thread inside one of those calls: what on_cpu_sample takes for
 * a sign that it is serving events, not running one long step.  Not any
 * wakeup while it runs: an interrupt's (another process's timer) runs
 * in its context too, also inside whatever syscall it is in (a CPU loop
 * that reads its clock with clock_gettime). Every wakeup of the machine
 * comes here: leave at once unless it is the target's. */
SEC("tp_btf/sched_waking")
int BPF_PROG(on_waking, struct task_struct *p)
{
    if (!wait_switch || !from_target())
        return 0;
    __u32 tid = (__u32)bpf_get_current_pid_tgid();
    struct ls_gloop *g = bpf_map_lookup_elem(&gloops, &tid);
    if (!g || g->woke || g->in_wait)  /* a busy step's later wakeups: nothing to do */
        return 0;
    struct pt_regs *regs = (struct pt_regs *)bpf_task_pt_regs(bpf_get_current_task_btf());
    if (hands_over((long)BPF_CORE_READ(regs, orig_ax)))
        g->woke = 1;
    return 0;
}

/* A loop thread that exits: forget it (thread ids are reused). */
SEC("tp_btf/sched_process_exit")
int BPF_PROG(on_thread_exit, struct task_struct *t)
{
    if (t->tgid != target_tgid)
        return 0;
    __u32 tid = t->pid;
    struct ls_gloop *g = bpf_map_lookup_elem(&gloops, &tid);
    if (!g)
        return 0;
    __u64 now = bpf_ktime_get_ns();
    if (!g->in_wait && g->since)      /* its last busy stretch: the window adds up */
        g->w.busy_ns += now - g->since;
    window_send(tid, g, now);
    emit_loop(LS_MSG_LOOP_STOP, tid, 0, 0);
    bpf_map_delete_elem(&gloops, &tid);
    return 0;
}
