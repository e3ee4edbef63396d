/*
 * record_wait.bpf.h -- the generic loop mode's view of a wait call: the
 * loop thread's state (struct ls_gloop, record.h) moved at the entry into
 * a wait call and at its return, its iterations summed per window.
 *
 * Three hooks drive it (--wait-hook, tracer/README.md): the wait calls'
 * syscall tracepoints or the raw sys_enter/sys_exit pair
 * (record_generic.bpf.c) see every call; the scheduler's switches
 * (record_blocking.bpf.c's on_switch, with wait_switch) see only the
 * calls that sleep: the switch-out asleep in a wait call is its entry,
 * the switch-in that ends that sleep its return.  Included by both files;
 * everything here is always inline.
 */
#ifndef LOOPSCOPE_RECORD_WAIT_BPF_H
#define LOOPSCOPE_RECORD_WAIT_BPF_H

#include "record.bpf.h"

static const struct ls_gloop gloop_zero;  /* too big for the BPF stack */

/* The step of tid ends at now; send its on-CPU episode, if any, with the
 * step's CPU time: wall time minus time off the CPU. */
static __always_inline void oncpu_close(__u32 tid, __u64 now)
{
    struct block_msg *o = bpf_map_lookup_elem(&oncpu_open, &tid);
    if (!o)
        return;
    __u64 off = step_off_now(tid, o->b.steps, o->b.start_ns, now, false);
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

/* A wait call's count of descriptors, from its registers at entry:
 * poll, ppoll: the second argument; select, pselect6: the first. */
static __always_inline __u64 wait_nfds(struct pt_regs *regs, long nr)
{
    return nr == 7 || nr == 271 ? BPF_CORE_READ(regs, si) : BPF_CORE_READ(regs, di);
}

/* Thread tid (the current thread) enters a wait call at now.  poll: the
 * call is poll, ppoll, select or pselect6; nfds its count of descriptors:
 * none (CPython 3.10's time.sleep is select(0, ...)) makes it a sleep, not
 * a wait.  False if it is no wait. */
static __always_inline bool wait_enter(__u32 tid, __u64 now, bool poll, __u64 nfds)
{
    if (!generic || !from_target() || (poll && !nfds))
        return false;
    struct ls_gloop *g = bpf_map_lookup_elem(&gloops, &tid);
    if (poll && wait_auto && g && g->epoll)
        return false;                   /* a blocking call of an epoll loop */
    if (!g) {
        if (bpf_map_update_elem(&gloops, &tid, &gloop_zero, BPF_NOEXIST)) {
            stat_add(LS_STAT_UNTRACKED_WAITS, 1);   /* more than 1024 loop threads */
            return false;
        }
        g = bpf_map_lookup_elem(&gloops, &tid);
        if (!g)
            return false;
        g->w.start_ns = now;
        emit_loop(LS_MSG_LOOP_START, tid, 0, 0);
    }
    if (poll)
        g->polls++;
    else
        g->epoll = 1;
    if (detect_blocking) {
        episode_close(tid, now);
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
    return true;
}

/* Thread tid returns from its wait call at now (or, seen from the
 * switches, is back from a sleep in it). */
static __always_inline void wait_exit(__u32 tid, __u64 now)
{
    if (!generic)
        return;
    struct ls_gloop *g = bpf_map_lookup_elem(&gloops, &tid);
    if (!g || !g->in_wait)
        return;
    g->w.wait_ns += now - g->enter_ns;
    g->in_wait = 0;
    g->woke = 0;
    g->since = now;
    g->steps++;
}

/* Thread tid, the current thread, is at now outside a wait call: its
 * user registers say it is in the syscall orig_ax names (or, not a
 * syscall's number, in a page fault, an interrupt, or on its way back to
 * user code).  Seen where it goes to sleep (on_switch) and in a CPU
 * sample.  If it is a loop thread taken for inside its wait call, that
 * call's return was not seen (a switch-in not seen, record.bpf.h, under
 * --wait-hook switch; a run of the hook the kernel skipped): the call
 * returned when the thread came back on the CPU, or if that is not
 * known, now (counted: meta stale_waits), so that its step is seen, and
 * its sleeps as the blocking they are, not as idle time.  (A wait call's
 * number is left alone: a page fault's error code can equal one.) */
static __always_inline void wait_stale(__u32 tid, struct pt_regs *regs, __u64 now)
{
    struct ls_gloop *g = bpf_map_lookup_elem(&gloops, &tid);
    if (!g || !g->in_wait || is_wait_call((long)BPF_CORE_READ(regs, orig_ax)))
        return;
    stat_add(LS_STAT_STALE_WAITS, 1);
    __u64 back = came_back_at(bpf_get_current_task_btf(), now);
    wait_exit(tid, back >= g->enter_ns && back <= now ? back : now);
}

/* Loop thread g (tid's, outside its wait) ends a step at now, seen some
 * other way than a wait call (--wait-hook switch: a CPU sample after it
 * woke a thread), and the next begins: an iteration as wait_enter and
 * wait_exit count one, what kind of loop it is (epoll, poll) unchanged. */
static __always_inline void step_boundary(__u32 tid, struct ls_gloop *g, __u64 now)
{
    __u32 polls = g->polls;
    if (wait_enter(tid, now, !g->epoll, 1)) {
        g->polls = polls;
        wait_exit(tid, now);
    }
}

#endif /* LOOPSCOPE_RECORD_WAIT_BPF_H */
