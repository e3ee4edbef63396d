/*
 * record.bpf.c -- BPF side of `loopscope record` (see tracer/README.md):
 * the one definition of what the program families share (declared in
 * record.bpf.h, which says how the families make one object), and
 * libevl's default mode: loop_start, loop_stop and batch (and its gate).
 */
#include "record.bpf.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

/* The loader's settings and the recorder's word (record.bpf.h). */
const volatile __u32 target_tgid = 0;
const volatile __u64 block_threshold_ns = 10000000;
const volatile bool detect_blocking = true;
const volatile bool trace_syscalls = false;
const volatile bool generic = false;
const volatile __u64 window_ns = 20000000;
const volatile bool wait_all = false;
const volatile bool wait_auto = false;
const volatile bool wait_switch = false;
const volatile bool watch_procs = false;
volatile __u32 recorder_polling = 0;

/* The maps more than one family uses (record.bpf.h). */
struct ls_map_events events SEC(".maps");
struct ls_map_stats stats SEC(".maps");
struct ls_map_loop_threads loop_threads SEC(".maps");
struct ls_map_step_off step_off SEC(".maps");
struct ls_map_rq_anchor rq_anchor SEC(".maps");
struct ls_map_offcpu offcpu SEC(".maps");
struct ls_map_oncpu_open oncpu_open SEC(".maps");
struct ls_map_gloops gloops SEC(".maps");

/* A process group with --children (tracer/group.c): the target made a
 * process (not a thread), or it runs another program now; its group
 * attaches to the first and attaches again to the second. */
static __always_inline void proc_send(__u32 kind, __u32 pid)
{
    struct ls_msg_hdr *h = bpf_ringbuf_reserve(&events, sizeof(*h), 0);
    if (!h) {
        stat_add(LS_STAT_DROPPED_MSGS, 1);
        return;
    }
    fill_hdr(h, LS_MSG_PROC, kind, pid);
    bpf_ringbuf_submit(h, 0);
}

SEC("tp_btf/sched_process_fork")
int BPF_PROG(on_fork, struct task_struct *parent, struct task_struct *child)
{
    if (watch_procs && parent->tgid == target_tgid && child->pid == child->tgid)
        proc_send(LS_PROC_FORK, (__u32)child->tgid);
    return 0;
}

SEC("tp_btf/sched_process_exec")
int BPF_PROG(on_exec, struct task_struct *p, pid_t old_pid, struct linux_binprm *bprm)
{
    if (watch_procs && p->tgid == target_tgid)
        proc_send(LS_PROC_EXEC, (__u32)p->tgid);
    return 0;
}

/* A batch message as it sits in the ring (data: h.len bytes of records). */
struct batch_msg {
    struct ls_msg_hdr h;
    __u8 data[EVL_BATCH_BYTES];
};

SEC("usdt")
int BPF_USDT(on_loop_start, __u64 loop, __u32 tid, __u64 pub)
{
    /* pub_size, a fourth argument since evl_loop_pub grew past 32 bytes */
    long size = 32;
    if (bpf_usdt_arg_cnt(ctx) >= 4)
        bpf_usdt_arg(ctx, 3, &size);
    return emit_loop(LS_MSG_LOOP_START, loop, pub, (__u32)size);
}

SEC("usdt")
int BPF_USDT(on_loop_stop, __u64 loop, __u32 tid)
{
    return emit_loop(LS_MSG_LOOP_STOP, loop, 0, 0);
}

/* The batch goes straight from the loop's buffer into the ring, one
 * copy.  A reservation's size must be a constant, so it takes the
 * smallest of the sizes EVL_BATCH_BYTES >> k (k = 0..BATCH_CLASSES-1)
 * that holds the batch; the rest of it is left as it was (the recorder
 * reads h.len bytes).  False if the ring is full. */
#define BATCH_CLASSES 8       /* 64 KiB down to 512 B */

static __always_inline bool batch_class_out(__u32 cls, __u64 loop, __u64 pub, __u64 addr,
                                            __u32 len, __u32 nrec, __u32 keepable)
{
    const __u32 room = EVL_BATCH_BYTES >> cls;
    struct batch_msg *m = bpf_ringbuf_reserve(&events, sizeof(m->h) + room, 0);
    if (!m)
        return false;
    fill_hdr(&m->h, LS_MSG_BATCH, loop, pub);
    m->h.len = len;
    m->h.nrec = nrec;
    m->h.pad = keepable;
    barrier_var(len);
    if (len > room || bpf_probe_read_user(m->data, len, (void *)addr)) {
        bpf_ringbuf_discard(m, 0);
        stat_add(LS_STAT_READ_ERRORS, 1);
        return true;
    }
    /* A batch wakes the recorder, unless it is polling: one wakeup per
     * batch at most, which is one per EVL_BATCH_BYTES of records on a busy
     * loop (other messages wake it only when it has drained the ring). */
    bpf_ringbuf_submit(m, recorder_polling ? BPF_RB_NO_WAKEUP : BPF_RB_FORCE_WAKEUP);
    stat_add(LS_STAT_BATCHES, 1);
    stat_add(LS_STAT_CLAIMED_RECS, nrec);
    return true;
}

/* A batch that stays in the loop until the recorder has read it: only
 * where it is goes through the ring.  The wakeup rule is the copy's. */
static __always_inline void batch_ref_out(__u64 loop, __u64 pub, __u64 addr, __u32 len,
                                          __u32 nrec, __u32 seq)
{
    struct {
        struct ls_msg_hdr h;
        struct ls_batch_ref b;
    } *m = bpf_ringbuf_reserve(&events, sizeof(*m), 0);
    if (!m) {
        stat_add(LS_STAT_DROPPED_MSGS, 1);
        stat_add(LS_STAT_DROPPED_BYTES, len);
        stat_add(LS_STAT_CLAIMED_DROPPED, nrec);
        return;
    }
    fill_hdr(&m->h, LS_MSG_BATCH_REF, loop, pub);
    m->h.len = sizeof(m->b);
    m->h.nrec = nrec;
    m->b.addr = addr;
    m->b.len = len;
    m->b.seq = seq;
    bpf_ringbuf_submit(m, recorder_polling ? BPF_RB_NO_WAKEUP : BPF_RB_FORCE_WAKEUP);
    stat_add(LS_STAT_BATCHES, 1);
    stat_add(LS_STAT_CLAIMED_RECS, nrec);
}

SEC("usdt")
int BPF_USDT(on_batch, __u64 loop, __u64 addr, __u32 len, __u64 pub, __u32 nrec)
{
    if (!from_target())
        return 0;
    if (len > EVL_BATCH_BYTES) {
        stat_add(LS_STAT_READ_ERRORS, 1);
        return 0;
    }
    note_loop_thread(loop, pub);
    if (detect_blocking)              /* the loop is about to poll */
        episode_close((__u32)bpf_get_current_pid_tgid(), bpf_ktime_get_ns());
    /* A kept batch (seq != 0) stays in the loop for the recorder to read;
     * any other is copied here: the loop reuses its buffer when the probe
     * returns.  A probe with a seq at all says the loop can keep them
     * (evl-probes.h, "batching"): the copy tells the recorder so. */
    long seq = 0;
    __u32 keepable = bpf_usdt_arg_cnt(ctx) >= 6 && bpf_usdt_arg(ctx, 5, &seq) == 0;
    if (keepable && (__u32)seq) {
        batch_ref_out(loop, pub, addr, len, nrec, (__u32)seq);
        return 0;
    }
    __u32 cls = 0;
    for (__u32 k = 1; k < BATCH_CLASSES; k++)   /* the smallest that holds len */
        if (len <= (EVL_BATCH_BYTES >> k))
            cls = k;
    bool out;
    switch (cls) {
    case 0: out = batch_class_out(0, loop, pub, addr, len, nrec, keepable); break;
    case 1: out = batch_class_out(1, loop, pub, addr, len, nrec, keepable); break;
    case 2: out = batch_class_out(2, loop, pub, addr, len, nrec, keepable); break;
    case 3: out = batch_class_out(3, loop, pub, addr, len, nrec, keepable); break;
    case 4: out = batch_class_out(4, loop, pub, addr, len, nrec, keepable); break;
    case 5: out = batch_class_out(5, loop, pub, addr, len, nrec, keepable); break;
    case 6: out = batch_class_out(6, loop, pub, addr, len, nrec, keepable); break;
    default: out = batch_class_out(7, loop, pub, addr, len, nrec, keepable); break;
    }
    _Static_assert(BATCH_CLASSES == 8, "one case per class");
    if (!out) {
        stat_add(LS_STAT_DROPPED_MSGS, 1);
        stat_add(LS_STAT_DROPPED_BYTES, len);
        stat_add(LS_STAT_CLAIMED_DROPPED, nrec);
    }
    return 0;
}

/* The gate: attached to evl_gate:batch after every other program
 * (attach.c), a probe site that never runs and whose semaphore is
 * batch's, so that the batch semaphore's last rise comes once on_batch is
 * in place.  The loop takes a rise while it batches for a snapshot
 * request (evl-probes.h), and the kernel raises a semaphore a moment
 * before libbpf attaches the program: the snapshot asked by an earlier
 * rise may reach no program, the one asked by the gate's reaches
 * on_batch.  It does nothing (and never runs). */
SEC("usdt")
int on_batch_gate(struct pt_regs *ctx)
{
    return 0;
}
