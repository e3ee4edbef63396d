/*
 * record.bpf.h -- what the BPF programs of `loopscope record` share (see
 * tracer/README.md).  The programs are one BPF object, the skeleton
 * record.skel.h (struct record_bpf), compiled from one C file per program
 * family and linked by `bpftool gen object` (cmake/BpfSkeleton.cmake):
 *
 *   record.bpf.c            the definitions of everything declared here;
 *                           libevl's default mode: loop_start, loop_stop,
 *                           batch (each batch copied whole, or its place),
 *                           and the gate (evl_gate:batch)
 *   record_unbatched.bpf.c  libevl with --no-batch: one record per probe hit
 *   record_blocking.bpf.c   blocking detection, both modes: sched_switch,
 *                           CPU-clock samples, the loop thread's view
 *   record_generic.bpf.c    the generic loop mode: the wait calls
 *   record_syscalls.bpf.c   --syscalls
 *
 * USDT programs forward lifecycle events to user space through one ring
 * buffer: in batched mode (the default) only loop_start, loop_stop and
 * batch are attached and each batch is copied whole; in unbatched mode
 * (--no-batch) every lifecycle probe is attached and becomes one record.
 * In the generic loop mode (a process without libevl) the wait-call
 * programs keep each loop thread's state instead (struct ls_gloop) and
 * send its iterations per window.  Blocking detection (sched_switch,
 * CPU-clock samples) serves both modes through one view of the loop
 * thread (loop_view).  Every message that does not fit is counted in
 * `stats`.
 *
 * Linking: a global the loader sets and a map more than one family uses
 * is declared here `extern` and defined once, in record.bpf.c (libbpf's
 * static linker resolves an extern to the one definition, checks that an
 * extern map's definition is the same, and refuses two definitions); a
 * map one family uses is defined in its file.  The helpers here are
 * always inline: each program is compiled as it was in one file.
 */
#ifndef LOOPSCOPE_RECORD_BPF_H
#define LOOPSCOPE_RECORD_BPF_H

#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/usdt.bpf.h>
#include <bpf/bpf_core_read.h>

#include "record.h"

/* Set by the loader before load (.rodata). */
extern const volatile __u32 target_tgid;
extern const volatile __u64 block_threshold_ns;
extern const volatile bool detect_blocking;
extern const volatile bool trace_syscalls;
/* Generic loop mode (a process without libevl): loop threads, iterations
 * and idle time come from the wait syscalls, not from libevl's probes. */
extern const volatile bool generic;
extern const volatile __u64 window_ns;
extern const volatile bool wait_all;   /* --wait-calls all */
extern const volatile bool wait_auto;  /* --wait-calls auto: poll/select on threads
                                        * that never wait in epoll */
extern const volatile bool wait_switch;  /* --wait-hook switch: the waits that sleep,
                                          * seen from sched_switch alone */
extern const volatile bool watch_procs;  /* a process group's --children: forks, execs */

/* Written by the recorder while it runs (.bss): nonzero while it drains
 * the ring on a short timer of its own (ls_recorder_run), so a batch
 * need not wake it.  A wakeup from here is an interrupt in the
 * target's thread (the ring buffer's irq_work) and the recorder's wakeup
 * behind it, about two thirds of on_batch's time on a virtual machine
 * (tests/bench/results/bpf_prog_cost_wakeup.txt). */
extern volatile __u32 recorder_polling;

struct ls_map_events {
    __uint(type, BPF_MAP_TYPE_RINGBUF);
    __uint(max_entries, 64 << 20);      /* resized by --ringbuf-kb */
};
extern struct ls_map_events events SEC(".maps");

struct ls_map_stats {
    __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
    __uint(max_entries, LS_STAT_COUNT);
    __type(key, __u32);
    __type(value, __u64);
};
extern struct ls_map_stats stats SEC(".maps");

/* Loop threads of the target: tid -> where its evl_loop_pub lives. */
struct loop_thread {
    __u64 pub;
    __u64 loop;
};

struct ls_map_loop_threads {
    __uint(type, BPF_MAP_TYPE_HASH);
    __uint(max_entries, 1024);
    __type(key, __u32);
    __type(value, struct loop_thread);
};
extern struct ls_map_loop_threads loop_threads SEC(".maps");

/* A blocking episode; in map offcpu, the open off-CPU episode of a loop
 * thread.  It opens when the thread is switched out asleep (not
 * TASK_RUNNING) while not idle (libevl: its published phase is not POLL;
 * generic mode: it is not inside its wait call).  A later sleep in the
 * same call (same step, syscall and instruction pointer: fsync sleeps
 * several times) extends it: b.dur_ns is set at each switch-in that ends
 * one of its sleeps (LS_ASLEEP, record.h).  episode_close ends it, and
 * sends it if it lasted at least block_threshold_ns, when the thread
 * sleeps in another call or step (that one opens next), when the loop
 * hands over a batch (batched mode: before a poll that may sleep, when
 * the buffer is full, at a snapshot, at loop stop), at poll_enter
 * (--no-batch), or at the entry into a wait call (generic mode).  Those
 * still open when the recorder detaches are read from the map and closed
 * there (tracer/blocks.c, ls_flush_open_episodes). */
struct block_msg {
    struct ls_msg_hdr h;
    struct ls_block b;
    struct ls_pystack py;     /* nframes 0 unless the target is CPython */
    __u8 stack[LS_STACK_BYTES];
};

/* Off-CPU time of the current step of each loop thread (record.h). */
struct ls_map_step_off {
    __uint(type, BPF_MAP_TYPE_HASH);
    __uint(max_entries, 1024);
    __type(key, __u32);
    __type(value, struct ls_step_off);
};
extern struct ls_map_step_off step_off SEC(".maps");

struct ls_map_offcpu {
    __uint(type, BPF_MAP_TYPE_HASH);
    __uint(max_entries, LS_OPEN_EPISODES);
    __type(key, __u32);
    __type(value, struct block_msg);
};
extern struct ls_map_offcpu offcpu SEC(".maps");

/* Generic mode: an on-CPU episode is sent when its step ends (the next
 * wait call), with its duration; until then it waits here. */
struct ls_map_oncpu_open {
    __uint(type, BPF_MAP_TYPE_HASH);
    __uint(max_entries, LS_OPEN_EPISODES);
    __type(key, __u32);
    __type(value, struct block_msg);
};
extern struct ls_map_oncpu_open oncpu_open SEC(".maps");

/* Generic mode: each loop thread's state (struct ls_gloop, record.h). */
struct ls_map_gloops {
    __uint(type, BPF_MAP_TYPE_HASH);
    __uint(max_entries, 1024);
    __type(key, __u32);
    __type(value, struct ls_gloop);
};
extern struct ls_map_gloops gloops SEC(".maps");

static __always_inline void stat_add(__u32 k, __u64 v)
{
    __u64 *p = bpf_map_lookup_elem(&stats, &k);
    if (p)
        *p += v;
}

static __always_inline bool from_target(void)
{
    return !target_tgid || (bpf_get_current_pid_tgid() >> 32) == target_tgid;
}

static __always_inline void fill_hdr(struct ls_msg_hdr *h, __u32 type, __u64 loop, __u64 arg)
{
    __u64 id = bpf_get_current_pid_tgid();
    h->type = type;
    h->len = 0;
    h->ts = bpf_ktime_get_ns();
    h->loop = loop;
    h->arg = arg;
    h->pid = id >> 32;
    h->tid = (__u32)id;
    h->nrec = 0;
    h->pad = 0;
}

static __always_inline void note_loop_thread(__u64 loop, __u64 pub)
{
    __u32 tid = (__u32)bpf_get_current_pid_tgid();
    struct loop_thread lt = { .pub = pub, .loop = loop };
    struct loop_thread *old = bpf_map_lookup_elem(&loop_threads, &tid);
    if (!old || old->pub != pub || old->loop != loop)
        bpf_map_update_elem(&loop_threads, &tid, &lt, BPF_ANY);
}

static __always_inline int emit_loop(__u32 type, __u64 loop, __u64 pub, __u32 pub_size)
{
    if (!from_target())
        return 0;
    __u32 tid = (__u32)bpf_get_current_pid_tgid();
    if (type == LS_MSG_LOOP_START)
        note_loop_thread(loop, pub);
    else
        bpf_map_delete_elem(&loop_threads, &tid);
    struct ls_msg_hdr *h = bpf_ringbuf_reserve(&events, sizeof(*h), 0);
    if (!h) {
        stat_add(LS_STAT_DROPPED_MSGS, 1);
        return 0;
    }
    fill_hdr(h, type, loop, pub);
    h->pad = pub_size;
    bpf_ringbuf_submit(h, 0);
    return 0;
}

/* Send a blocking episode (its stack copy only as far as it goes). */
static __always_inline void block_send(struct block_msg *m)
{
    __u64 size = sizeof(m->h) + sizeof(m->b) + sizeof(m->py) +
                 (m->b.stack_len & (LS_STACK_BYTES * 2 - 1));
    if (size > sizeof(*m))
        size = sizeof(*m);
    if (bpf_ringbuf_output(&events, m, size, 0)) {
        stat_add(LS_STAT_DROPPED_MSGS, 1);
        stat_add(LS_STAT_DROPPED_BYTES, size - sizeof(m->h));
    }
}

/* ---- A step's time off the CPU (struct ls_step_off, record.h) ----
 * An on-CPU episode is a step whose CPU time passed the threshold, and its
 * CPU time is its wall time less its time off the CPU: switched out
 * (on_switch), or stolen.  Steal is time the hypervisor ran something else
 * on this virtual CPU while the guest wanted it; the guest's clock runs on
 * through it, so a step on a busy host gains, in wall time, whatever the
 * host took in the middle of it (tracer/README.md, "A step's CPU time").
 *
 * The kernel counts it per run queue: the run queue's clock (rq->clock)
 * less its task clock is the time its CPU gave no task (steal, and
 * interrupts where the kernel accounts them apart).  Both clocks are
 * brought up to date at every switch, so they are exact in on_switch, and
 * at every tick, so in a CPU sample they may be a tick behind -- or, when
 * the CPU was just stolen and the tick has not run yet, a whole stolen
 * stretch behind.  How far behind is the wall time since the last update
 * less the run queue clock's advance since, measured from an anchor (a
 * ktime and the rq->clock of the same moment: the switch-in, exact, then
 * each sample that finds the clock moved, so that the two clocks' drift
 * never builds up; a sample's anchor is up to a tick early, which only
 * makes the lag seem smaller).  A sample counts a lag of more than a tick
 * as off the CPU: time the kernel has not counted yet may be stolen, and
 * the next sample, half a threshold on, decides once it is counted. */
extern unsigned int CONFIG_HZ __kconfig __weak;

struct rq_clocks {
    __u64 clock, unrun;
};

/* Task t's run queue, which is its CPU's while it runs.  A kernel without
 * group scheduling (no se.cfs_rq) counts nothing, as before. */
static __always_inline struct rq_clocks rq_clocks(struct task_struct *t)
{
    struct rq_clocks c = {};
    if (!bpf_core_field_exists(t->se.cfs_rq))
        return c;
    struct rq *rq = BPF_CORE_READ(t, se.cfs_rq, rq);
    if (!rq)
        return c;
    c.clock = BPF_CORE_READ(rq, clock);
    c.unrun = c.clock - BPF_CORE_READ(rq, clock_task);
    return c;
}

/* Thread so (running as t) begins a stretch on its CPU at now. */
static __always_inline void stretch_begin(struct task_struct *t, struct ls_step_off *so, __u64 now)
{
    struct rq_clocks c = rq_clocks(t);
    so->in_ns = so->anchor_ns = now;
    so->unrun_in = c.unrun;
    so->anchor_clock = c.clock;
}

/* Time off the CPU in thread so's stretch on this CPU so far (t running),
 * within its step begun at since: stolen time the run queue has counted,
 * and with sampling, time it may not have counted yet (above).  At most
 * the part of the stretch within the step. */
static __always_inline __u64 stretch_off(struct task_struct *t, struct ls_step_off *so,
                                         __u64 since, __u64 now, bool sampling)
{
    if (!so->in_ns)
        return 0;                     /* not seen switched in: unknown */
    struct rq_clocks c = rq_clocks(t);
    __u64 from = so->in_ns > since ? so->in_ns : since;
    __u64 most = now > from ? now - from : 0;
    __s64 off = (__s64)(c.unrun - so->unrun_in);
    if (off < 0)
        off = 0;
    if (sampling && c.clock) {
        __s64 lag = (__s64)(now - so->anchor_ns) - (__s64)(c.clock - so->anchor_clock);
        __u64 tick = 1000000000ull / (CONFIG_HZ ? CONFIG_HZ : 100);
        if (lag > (__s64)tick)
            off += lag;
        if (c.clock != so->anchor_clock) {
            so->anchor_ns = now;
            so->anchor_clock = c.clock;
        }
    }
    return (__u64)off < most ? (__u64)off : most;
}

/* ---- A switch-in not seen ----
 * The scheduler's tracepoint does not show every switch.  This test VM's
 * kernel shows none away from its init's threads (a host agent), so a
 * thread that one of them hands its CPU to comes back unseen; a run of
 * on_switch the kernel skips (meta missed_runs) loses one anywhere.  Such
 * a thread is still taken for switched out (so->out_ns), or asleep in its
 * episode's call, while it runs: its sleep's episode would end with no
 * duration, and its time away would count as CPU time of its step.
 *
 * So wherever the current thread is seen running with so->out_ns set (at
 * its switch-out, a CPU sample, a wait call's entry: where its step's
 * time off the CPU or its episode is read), it came back unseen, at its
 * last arrival on this CPU (sched_info.last_arrival, on this run queue's
 * clock).  That clock is converted to a ktime through this CPU's anchor
 * (rq_anchor): a ktime and the run queue's clock of one moment, taken at
 * the latest switch of a target thread on this CPU, where the clock is
 * exact.  Not through the clock now: outside a switch it lags by up to a
 * tick or more, which took the thread back that late, after its sleep's
 * real end (a CI run's python_raw_hook: an episode 0.2 ms longer than the
 * handler's sleep; generic.unseen_switch saw 1 to 3.7 ms).  The two
 * clocks drift apart by parts per million of the time since the anchor.
 * Counted: meta unseen_switches. */
struct ls_clock_pair {
    __u64 ktime, clock;
};
struct ls_map_rq_anchor {
    __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
    __uint(max_entries, 1);
    __type(key, __u32);
    __type(value, struct ls_clock_pair);
};
extern struct ls_map_rq_anchor rq_anchor SEC(".maps");

/* In a switch (t, the thread going out, runs on this CPU): the anchor. */
static __always_inline void rq_anchor_set(struct task_struct *t, __u64 now)
{
    struct rq_clocks c = rq_clocks(t);
    __u32 zero = 0;
    struct ls_clock_pair *a = bpf_map_lookup_elem(&rq_anchor, &zero);
    if (a && c.clock) {
        a->ktime = now;
        a->clock = c.clock;
    }
}

static __always_inline __u64 came_back_at(struct task_struct *t, __u64 now)
{
    if (!bpf_core_field_exists(t->sched_info.last_arrival))
        return now;                   /* no CONFIG_SCHED_INFO: now, the latest it can be */
    __u64 arr = BPF_CORE_READ(t, sched_info.last_arrival);
    __u32 zero = 0;
    struct ls_clock_pair here, *a = bpf_map_lookup_elem(&rq_anchor, &zero);
    if (!a || !a->clock) {            /* no anchor yet: the clock now, maybe late */
        here = (struct ls_clock_pair){ now, rq_clocks(t).clock };
        a = &here;
    }
    if (!arr || !a->clock)
        return now;
    __s64 since = (__s64)(arr - a->clock);
    if (since < 0 && (__u64)-since > a->ktime)
        return now;
    __u64 back = a->ktime + since;
    return back < now ? back : now;
}

/* Thread tid, the current thread, runs at now: if what was seen has it
 * switched out, account its unseen switch-in as on_switch does a seen
 * one, as of when it came back. */
static __always_inline void unseen_back(__u32 tid, __u64 now)
{
    struct ls_step_off *so = bpf_map_lookup_elem(&step_off, &tid);
    if (!so || !so->out_ns)
        return;
    struct task_struct *t = bpf_get_current_task_btf();
    __u64 back = came_back_at(t, now);
    if (back < so->out_ns)
        back = so->out_ns;
    so->off_ns += back - so->out_ns;
    so->out_ns = 0;
    stretch_begin(t, so, now);        /* the clocks' anchor: now */
    so->in_ns = back;
    struct block_msg *o = bpf_map_lookup_elem(&offcpu, &tid);
    if (o && o->h.pad == LS_ASLEEP) {
        o->b.dur_ns = back - o->b.start_ns;
        o->h.pad = 0;
    }
    stat_add(LS_STAT_UNSEEN_SWITCHES, 1);
}

/* The current thread's (tid's) time off the CPU so far in its step
 * (steps, begun at since); sampling: as a CPU sample counts it. */
static __always_inline __u64 step_off_now(__u32 tid, __u32 steps, __u64 since, __u64 now,
                                          bool sampling)
{
    unseen_back(tid, now);
    struct ls_step_off *so = bpf_map_lookup_elem(&step_off, &tid);
    if (!so)
        return 0;
    return (so->steps == steps ? so->off_ns : 0) +
           stretch_off(bpf_get_current_task_btf(), so, since, now, sampling);
}

/* Close tid's open episode: send it if it lasted long enough. */
static __always_inline void episode_close(__u32 tid, __u64 now)
{
    unseen_back(tid, now);            /* asleep still, to what was seen? */
    struct block_msg *o = bpf_map_lookup_elem(&offcpu, &tid);
    if (!o)
        return;
    o->h.pad = 0;
    if (o->b.dur_ns >= block_threshold_ns)
        block_send(o);
    bpf_map_delete_elem(&offcpu, &tid);
}

#endif /* LOOPSCOPE_RECORD_BPF_H */
