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
 * is idle.  The entry ends an
 * iteration's busy stretch (and any off-CPU episode: the loop waits
 * again), the return starts the next one.  Iterations are summed per
 * window and sent when a window of window_ns has passed, at an entry.
 */
#include "record.bpf.h"

static const struct ls_gloop gloop_zero;  /* too big for the BPF stack */

/* Generic mode: the step of tid ends at now; send its on-CPU episode, if
 * any, with the step's CPU time: wall time minus time switched out. */
static __always_inline void oncpu_close(__u32 tid, __u64 now)
{
    struct block_msg *o = bpf_map_lookup_elem(&oncpu_open, &tid);
    if (!o)
        return;
    __u64 off = 0;
    struct ls_step_off *so = bpf_map_lookup_elem(&step_off, &tid);
    if (so && so->steps == o->b.steps)
        off = so->off_ns;
    __u64 wall = now - o->b.start_ns;
    o->b.dur_ns = wall > off ? wall - off : 0;
    block_send(o);
    bpf_map_delete_elem(&oncpu_open, &tid);
}

static __always_inline __u32 log2_u64(__u64 v)
{
    __u32 r = 0, s;
    s = (v > 0xffffffffull) << 5; v >>= s; r |= s;
    s = (v > 0xffff) << 4; v >>= s; r |= s;
    s = (v > 0xff) << 3; v >>= s; r |= s;
    s = (v > 0xf) << 2; v >>= s; r |= s;
    s = (v > 0x3) << 1; v >>= s; r |= s;
    r |= (v >> 1);
    return r;
}

static __always_inline void window_send(__u32 tid, struct ls_gloop *g, __u64 now)
{
    struct {
        struct ls_msg_hdr h;
        struct ls_window w;
    } *m = bpf_ringbuf_reserve(&events, sizeof(*m), 0);
    g->w.end_ns = now;
    if (!m) {
        stat_add(LS_STAT_DROPPED_MSGS, 1);
        stat_add(LS_STAT_DROPPED_BYTES, sizeof(g->w));
    } else {
        fill_hdr(&m->h, LS_MSG_WINDOW, tid, 0);
        m->h.len = sizeof(m->w);
        __builtin_memcpy(&m->w, &g->w, sizeof(m->w));
        bpf_ringbuf_submit(m, BPF_RB_NO_WAKEUP);
    }
    __builtin_memset(&g->w, 0, sizeof(g->w));
    g->w.start_ns = now;
}

/* poll: the call is poll, ppoll, select or pselect6; nfds its count of
 * descriptors: none (CPython 3.10's time.sleep is select(0, ...)) makes it
 * a sleep, not a wait. */
static __always_inline int wait_enter(bool poll, __u64 nfds)
{
    if (!generic || !from_target() || (poll && !nfds))
        return 0;
    __u32 tid = (__u32)bpf_get_current_pid_tgid();
    __u64 now = bpf_ktime_get_ns();
    struct ls_gloop *g = bpf_map_lookup_elem(&gloops, &tid);
    if (poll && wait_auto && g && g->epoll)
        return 0;                       /* a blocking call of an epoll loop */
    if (!g) {
        if (bpf_map_update_elem(&gloops, &tid, &gloop_zero, BPF_NOEXIST)) {
            stat_add(LS_STAT_UNTRACKED_WAITS, 1);   /* more than 1024 loop threads */
            return 0;
        }
        g = bpf_map_lookup_elem(&gloops, &tid);
        if (!g)
            return 0;
        g->w.start_ns = now;
        emit_loop(LS_MSG_LOOP_START, tid, 0, 0);
    }
    if (poll)
        g->polls++;
    else
        g->epoll = 1;
    if (detect_blocking) {
        episode_close(tid);
        oncpu_close(tid, now);
    }
    if (g->since) {
        __u64 busy = now - g->since;
        g->w.iterations++;
        g->w.busy_ns += busy;
        if (busy > g->w.max_busy_ns)
            g->w.max_busy_ns = busy;
        __u32 b = log2_u64(busy);
        if (b >= LS_HIST_BUCKETS)
            b = LS_HIST_BUCKETS - 1;
        g->w.hist[b]++;
        g->w.hist_ns[b] += busy;
    }
    g->in_wait = 1;
    g->enter_ns = now;
    if (now - g->w.start_ns >= window_ns)
        window_send(tid, g, now);
    return 0;
}

static __always_inline int wait_exit(void)
{
    if (!generic)
        return 0;
    __u32 tid = (__u32)bpf_get_current_pid_tgid();
    struct ls_gloop *g = bpf_map_lookup_elem(&gloops, &tid);
    if (!g || !g->in_wait)
        return 0;
    __u64 now = bpf_ktime_get_ns();
    g->w.wait_ns += now - g->enter_ns;
    g->in_wait = 0;
    g->since = now;
    g->steps++;
    return 0;
}

/* Two ways to see the wait calls (--wait-hook, tracer/README.md):
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
 * Measured in tests/bench/results/generic_overhead.txt. */
#define LS_WAIT_CALL(name, poll, nfds_arg)                                       \
    SEC("tracepoint/syscalls/sys_enter_" #name)                                  \
    int on_enter_##name(struct trace_event_raw_sys_enter *ctx)                   \
    {                                                                            \
        return wait_enter(poll, ctx->args[nfds_arg]);                            \
    }                                                                            \
    SEC("tracepoint/syscalls/sys_exit_" #name)                                   \
    int on_exit_##name(void *ctx) { return wait_exit(); }

LS_WAIT_CALL(epoll_wait, false, 2)     /* (maxevents: not looked at) */
LS_WAIT_CALL(epoll_pwait, false, 2)
LS_WAIT_CALL(epoll_pwait2, false, 2)
LS_WAIT_CALL(poll, true, 1)            /* poll(fds, nfds, ...) */
LS_WAIT_CALL(ppoll, true, 1)
LS_WAIT_CALL(select, true, 0)          /* select(nfds, ...) */
LS_WAIT_CALL(pselect6, true, 0)

static __always_inline bool is_epoll_call(long nr)
{
    return nr == 232 || nr == 281 || nr == 441; /* epoll_wait, epoll_pwait, epoll_pwait2 */
}

static __always_inline bool is_wait_call(long nr)
{
    if (is_epoll_call(nr))
        return true;
    return (wait_all || wait_auto) && (nr == 7 || nr == 23 || nr == 270 || nr == 271);
                                                /* poll, select, pselect6, ppoll */
}

SEC("tp_btf/sys_enter")
int BPF_PROG(on_wait_enter, struct pt_regs *regs, long id)
{
    if (!from_target() || !is_wait_call(id))
        return 0;
    bool poll = !is_epoll_call(id);
    /* poll, ppoll: nfds second; select, pselect6: first */
    __u64 nfds = id == 7 || id == 271 ? BPF_CORE_READ(regs, si) : BPF_CORE_READ(regs, di);
    return wait_enter(poll, nfds);
}

SEC("tp_btf/sys_exit")
int BPF_PROG(on_wait_exit, struct pt_regs *regs, long ret)
{
    if (!from_target() || !is_wait_call((long)regs->orig_ax))
        return 0;
    return wait_exit();
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
    window_send(tid, g, bpf_ktime_get_ns());
    emit_loop(LS_MSG_LOOP_STOP, tid, 0, 0);
    bpf_map_delete_elem(&gloops, &tid);
    return 0;
}
