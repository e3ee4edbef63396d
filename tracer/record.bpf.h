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

/* Close tid's open episode: send it if it lasted long enough. */
static __always_inline void episode_close(__u32 tid)
{
    struct block_msg *o = bpf_map_lookup_elem(&offcpu, &tid);
    if (!o)
        return;
    o->h.pad = 0;
    if (o->b.dur_ns >= block_threshold_ns)
        block_send(o);
    bpf_map_delete_elem(&offcpu, &tid);
}

#endif /* LOOPSCOPE_RECORD_BPF_H */
