/*
 * record.bpf.c -- BPF side of `loopscope record` (see tracer/README.md).
 *
 * USDT programs on libevl's probes forward lifecycle events to user space
 * through one ring buffer: in batched mode (the default) only loop_start,
 * loop_stop and batch are attached and each batch is copied whole; in
 * unbatched mode (--no-batch) every lifecycle probe is attached and becomes
 * one record.  In the generic loop mode (a process without libevl) the
 * wait-call programs keep each loop thread's state instead (struct
 * ls_gloop) and send its iterations per window.  Blocking detection
 * (sched_switch, CPU-clock samples) serves both modes through one view
 * of the loop thread (loop_view).  Every message that does not fit is
 * counted in `stats`.
 *
 * Over 600 lines: the skeleton (record.skel.h) is generated from one BPF
 * object, and its programs share maps and always-inline helpers defined
 * here; its parts are marked by the section rules below.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/usdt.bpf.h>
#include <bpf/bpf_core_read.h>

#include "record.h"
#include "pystack.bpf.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

/* Set by the loader before load. */
const volatile __u32 target_tgid = 0;
const volatile __u64 block_threshold_ns = 10000000;
const volatile bool detect_blocking = true;
const volatile bool trace_syscalls = false;
/* Generic loop mode (a process without libevl): loop threads, iterations
 * and idle time come from the wait syscalls, not from libevl's probes. */
const volatile bool generic = false;
const volatile __u64 window_ns = 20000000;
const volatile bool wait_all = false;   /* --wait-calls all */

/* Written by the recorder while it runs: nonzero while it drains the ring
 * on a short timer of its own (record.c, ls_recorder_run), so a batch
 * need not wake it.  A wakeup from here is an interrupt in the target's
 * thread (the ring buffer's irq_work) and the recorder's wakeup behind
 * it, about two thirds of on_batch's time on a virtual machine
 * (tests/bench/results/bpf_prog_cost_wakeup.txt). */
volatile __u32 recorder_polling = 0;

struct {
    __uint(type, BPF_MAP_TYPE_RINGBUF);
    __uint(max_entries, 64 << 20);      /* resized by --ringbuf-kb */
} events SEC(".maps");

struct {
    __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
    __uint(max_entries, LS_STAT_COUNT);
    __type(key, __u32);
    __type(value, __u64);
} stats SEC(".maps");

/* A batch message as it sits in the ring (data: h.len bytes of records). */
struct batch_msg {
    struct ls_msg_hdr h;
    __u8 data[EVL_BATCH_BYTES];
};

/* Loop threads of the target: tid -> where its evl_loop_pub lives. */
struct loop_thread {
    __u64 pub;
    __u64 loop;
};

struct {
    __uint(type, BPF_MAP_TYPE_HASH);
    __uint(max_entries, 1024);
    __type(key, __u32);
    __type(value, struct loop_thread);
} loop_threads SEC(".maps");

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
struct {
    __uint(type, BPF_MAP_TYPE_HASH);
    __uint(max_entries, 1024);
    __type(key, __u32);
    __type(value, struct ls_step_off);
} step_off SEC(".maps");

struct {
    __uint(type, BPF_MAP_TYPE_HASH);
    __uint(max_entries, LS_OPEN_EPISODES);
    __type(key, __u32);
    __type(value, struct block_msg);
} offcpu SEC(".maps");

/* One slot per CPU (a per-CPU array's values are limited to 32 KiB):
 * sized to the number of CPUs by the loader, indexed by the current CPU.
 * sched_switch runs with interrupts off and the CPU-clock sample from a
 * timer interrupt, so the two never share a slot at once. */
struct {
    __uint(type, BPF_MAP_TYPE_ARRAY);
    __uint(max_entries, 1);
    __type(key, __u32);
    __type(value, struct block_msg);
} block_scratch SEC(".maps");

/* Generic mode: an on-CPU episode is sent when its step ends (the next
 * wait call), with its duration; until then it waits here. */
struct {
    __uint(type, BPF_MAP_TYPE_HASH);
    __uint(max_entries, LS_OPEN_EPISODES);
    __type(key, __u32);
    __type(value, struct block_msg);
} oncpu_open SEC(".maps");

/* Last step reported as on-CPU per loop thread (one report per step). */
struct {
    __uint(type, BPF_MAP_TYPE_HASH);
    __uint(max_entries, 1024);
    __type(key, __u32);
    __type(value, __u32);
} oncpu_reported SEC(".maps");

static __always_inline void stat_add(__u32 k, __u64 v)
{
    __u64 *p = bpf_map_lookup_elem(&stats, &k);
    if (p)
        *p += v;
}

static __always_inline void episode_close(__u32 tid);

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
        episode_close((__u32)bpf_get_current_pid_tgid());
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

/* ---------------------------------------------- unbatched mode (--no-batch) */

struct one_rec {
    struct ls_msg_hdr h;
    struct evl_rec r;
    char name[EVL_NAME_MAX];
};

static __always_inline int emit_rec(__u16 kind, __u64 loop, __u64 task, __u32 a32,
                                    __u64 a0, __u64 a1, const char *name)
{
    if (!from_target())
        return 0;
    struct one_rec *m = bpf_ringbuf_reserve(&events, sizeof(*m), 0);
    if (!m) {
        stat_add(LS_STAT_DROPPED_MSGS, 1);
        stat_add(LS_STAT_DROPPED_BYTES, sizeof(*m) - sizeof(m->h));
        return 0;
    }
    fill_hdr(&m->h, LS_MSG_REC, loop, 0);
    m->h.nrec = 1;
    m->r.ts = m->h.ts;
    m->r.task = task;
    m->r.a0 = a0;
    m->r.a1 = a1;
    m->r.a32 = a32;
    m->r.kind = kind;
    m->r.size = sizeof(struct evl_rec);
    if (name) {
        long n = bpf_probe_read_user_str(m->name, sizeof(m->name), name);
        if (n > 1) {
            m->r.a32 = (__u32)(n - 1);
            m->r.size = sizeof(struct evl_rec) + ((n - 1 + 7) & ~7);
        }
    }
    m->h.len = m->r.size;
    bpf_ringbuf_submit(m, BPF_RB_NO_WAKEUP);
    return 0;
}

SEC("usdt")
int BPF_USDT(on_task_create, __u64 loop, __u64 task, __u64 parent, void *name, __u64 fn)
{
    return emit_rec(EVL_PROBE_ID_task_create, loop, task, 0, parent, fn, name);
}

SEC("usdt")
int BPF_USDT(on_task_run, __u64 loop, __u64 task)
{
    return emit_rec(EVL_PROBE_ID_task_run, loop, task, 0, 0, 0, 0);
}

SEC("usdt")
int BPF_USDT(on_task_suspend, __u64 loop, __u64 task, __u32 reason, __u64 obj, __u64 timeout)
{
    return emit_rec(EVL_PROBE_ID_task_suspend, loop, task, reason, obj, timeout, 0);
}

SEC("usdt")
int BPF_USDT(on_task_wake, __u64 loop, __u64 task, __u32 kind, __u64 waker)
{
    return emit_rec(EVL_PROBE_ID_task_wake, loop, task, kind, waker, 0, 0);
}

SEC("usdt")
int BPF_USDT(on_task_finish, __u64 loop, __u64 task, __u32 state, __s64 err)
{
    return emit_rec(EVL_PROBE_ID_task_finish, loop, task, state, (__u64)err, 0, 0);
}

SEC("usdt")
int BPF_USDT(on_task_cancel, __u64 loop, __u64 task, __u64 requester)
{
    return emit_rec(EVL_PROBE_ID_task_cancel, loop, task, 0, requester, 0, 0);
}

SEC("usdt")
int BPF_USDT(on_task_leak, __u64 loop, __u64 task, __u32 kind)
{
    return emit_rec(EVL_PROBE_ID_task_leak, loop, task, kind, 0, 0, 0);
}

SEC("usdt")
int BPF_USDT(on_poll_enter, __u64 loop, __s64 timeout)
{
    if (detect_blocking && from_target())
        episode_close((__u32)bpf_get_current_pid_tgid());
    return emit_rec(EVL_PROBE_ID_poll_enter, loop, 0, 0, (__u64)timeout, 0, 0);
}

SEC("usdt")
int BPF_USDT(on_poll_exit, __u64 loop, __u32 n)
{
    return emit_rec(EVL_PROBE_ID_poll_exit, loop, 0, n, 0, 0, 0);
}

SEC("usdt")
int BPF_USDT(on_callback_begin, __u64 loop, __u64 fn)
{
    return emit_rec(EVL_PROBE_ID_callback_begin, loop, 0, 0, fn, 0, 0);
}

SEC("usdt")
int BPF_USDT(on_callback_end, __u64 loop, __u64 fn)
{
    return emit_rec(EVL_PROBE_ID_callback_end, loop, 0, 0, fn, 0, 0);
}

/* ------------------------------------------------------ blocking detection
 *
 * Off-CPU: when a loop thread is switched out in a sleeping state while it
 * is not idle, remember when, the running task, the syscall (orig_ax) and
 * a copy of its user registers and stack; the episode lasts until it is
 * closed (struct block_msg above tells when), and is sent if it lasted at
 * least block_threshold_ns.
 *
 * On-CPU: a CPU-clock perf event on each CPU (blocks.c says why not per
 * thread) samples whatever runs there; a loop thread's step whose wall
 * time since it began, minus its time switched out, passed the threshold
 * is reported once, with its registers and stack at the sample.
 */

/* Copy as much of the user stack above sp as is mapped, up to
 * LS_STACK_BYTES: a task's stack often ends a few hundred bytes above sp.
 * First up to the next 512-byte boundary, then 512-byte chunks (which never
 * straddle a page) until the mapping ends. */
#define LS_CHUNK 512
static __always_inline __u32 copy_stack(__u8 *dst, __u64 sp)
{
    __u32 head = (LS_CHUNK - (sp & (LS_CHUNK - 1))) & (LS_CHUNK - 1);
    __u32 len = 0;
    if (head) {
        if (bpf_probe_read_user(dst, head, (void *)sp))
            return 0;
        len = head;
    }
    for (int i = 0; i < LS_STACK_BYTES / LS_CHUNK - 1; i++) {
        if (len > LS_STACK_BYTES - LS_CHUNK)
            break;
        if (bpf_probe_read_user(dst + len, LS_CHUNK, (void *)(sp + len)))
            break;
        len += LS_CHUNK;
    }
    return len;
}

static __always_inline void copy_regs(__u64 *d, struct pt_regs *r)
{
    d[0] = BPF_CORE_READ(r, ax);
    d[1] = BPF_CORE_READ(r, dx);
    d[2] = BPF_CORE_READ(r, cx);
    d[3] = BPF_CORE_READ(r, bx);
    d[4] = BPF_CORE_READ(r, si);
    d[5] = BPF_CORE_READ(r, di);
    d[6] = BPF_CORE_READ(r, bp);
    d[7] = BPF_CORE_READ(r, sp);
    d[8] = BPF_CORE_READ(r, r8);
    d[9] = BPF_CORE_READ(r, r9);
    d[10] = BPF_CORE_READ(r, r10);
    d[11] = BPF_CORE_READ(r, r11);
    d[12] = BPF_CORE_READ(r, r12);
    d[13] = BPF_CORE_READ(r, r13);
    d[14] = BPF_CORE_READ(r, r14);
    d[15] = BPF_CORE_READ(r, r15);
    d[16] = BPF_CORE_READ(r, ip);
}

/* What a loop thread is doing, in either mode: libevl publishes it
 * (evl_loop_pub, the target's word), the generic mode keeps it here from
 * the wait syscalls (struct ls_gloop). */
struct lview {
    __u64 loop;
    __u64 pub;                /* evl_loop_pub address, 0 in generic mode */
    __u64 task;               /* running libevl task, 0 if none or generic */
    __u64 since;              /* the step began (0: not known) */
    __u32 phase;              /* enum evl_phase */
    __u32 steps;              /* identifies the step */
};

struct {
    __uint(type, BPF_MAP_TYPE_HASH);
    __uint(max_entries, 1024);
    __type(key, __u32);
    __type(value, struct ls_gloop);
} gloops SEC(".maps");

static const struct ls_gloop gloop_zero;  /* too big for the BPF stack */

/* False if tid is no loop thread, or is idle in its wait. */
static __always_inline bool loop_view(__u32 tid, struct lview *v)
{
    if (generic) {
        struct ls_gloop *g = bpf_map_lookup_elem(&gloops, &tid);
        if (!g || g->in_wait)
            return false;
        v->loop = tid;
        v->pub = 0;
        v->task = 0;
        v->since = g->since;
        v->phase = EVL_PHASE_CALLBACK;
        v->steps = g->steps;
        return true;
    }
    struct loop_thread *lt = bpf_map_lookup_elem(&loop_threads, &tid);
    struct evl_loop_pub pub;
    if (!lt || bpf_probe_read_user(&pub, sizeof(pub), (void *)lt->pub) ||
        pub.phase == EVL_PHASE_POLL)
        return false;
    v->loop = lt->loop;
    v->pub = lt->pub;
    v->task = pub.task;
    v->since = pub.since;
    v->phase = pub.phase;
    v->steps = pub.steps;
    return true;
}

/* Fill the per-CPU scratch message for the current (loop) thread. */
static __always_inline struct block_msg *
block_begin(__u32 tid, struct lview *v, __u32 kind, struct pt_regs *regs, __s64 syscall, __u64 now)
{
    __u32 cpu = bpf_get_smp_processor_id();
    struct block_msg *m = bpf_map_lookup_elem(&block_scratch, &cpu);
    if (!m)
        return NULL;
    fill_hdr(&m->h, LS_MSG_BLOCK, v->loop, v->pub);
    m->b.kind = kind;
    m->b.start_ns = kind == LS_BLOCK_OFFCPU ? now : v->since;
    m->b.dur_ns = 0;
    m->b.task = v->task;
    m->b.phase = v->phase;
    m->b.steps = v->steps;
    m->b.syscall = syscall;
    copy_regs(m->b.regs, regs);
    ls_py_capture(tid, &m->py);       /* nothing unless the target is CPython */
    m->b.stack_len = copy_stack(m->stack, m->b.regs[7]);
    m->h.len = sizeof(m->b) + sizeof(m->py) + m->b.stack_len;
    return m;
}

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

SEC("tp_btf/sched_switch")
int BPF_PROG(on_switch, bool preempt, struct task_struct *prev, struct task_struct *next)
{
    if (!detect_blocking)
        return 0;
    /* Every switch of the machine comes here: leave at once if neither
     * thread is the target's. */
    bool in = next->tgid == target_tgid, out = prev->tgid == target_tgid;
    if (!in && !out)
        return 0;
    __u64 now = bpf_ktime_get_ns();

    /* A loop thread comes back: account its time away. */
    if (in) {
        __u32 ntid = next->pid;
        struct block_msg *o = bpf_map_lookup_elem(&offcpu, &ntid);
        if (o && o->h.pad == LS_ASLEEP) {  /* back from a sleep of the call */
            o->b.dur_ns = now - o->b.start_ns;
            o->h.pad = 0;
        }
        struct ls_step_off *so = bpf_map_lookup_elem(&step_off, &ntid);
        if (so && so->out_ns) {
            so->off_ns += now - so->out_ns;
            so->out_ns = 0;
        }
    }

    if (!out)
        return 0;
    __u32 ptid = prev->pid;
    struct lview v;
    if (!loop_view(ptid, &v))
        return 0;

    struct ls_step_off *so = bpf_map_lookup_elem(&step_off, &ptid);
    if (!so) {
        struct ls_step_off init = { .steps = v.steps };
        bpf_map_update_elem(&step_off, &ptid, &init, BPF_ANY);
        so = bpf_map_lookup_elem(&step_off, &ptid);
        if (!so)
            return 0;
    }
    if (so->steps != v.steps) {
        so->steps = v.steps;
        so->off_ns = 0;
    }
    so->out_ns = now;

    if (prev->__state == 0)           /* TASK_RUNNING: preempted, not blocked */
        return 0;
    struct pt_regs *regs = (struct pt_regs *)bpf_task_pt_regs(prev);
    __s64 nr = (__s64)BPF_CORE_READ(regs, orig_ax);
    __u64 ip = BPF_CORE_READ(regs, ip);
    struct block_msg *o = bpf_map_lookup_elem(&offcpu, &ptid);
    if (o) {
        if (o->b.steps == v.steps && o->b.syscall == nr && o->b.regs[16] == ip) {
            o->h.pad = LS_ASLEEP;     /* still the same blocking call */
            return 0;
        }
        episode_close(ptid);
    }
    struct block_msg *m = block_begin(ptid, &v, LS_BLOCK_OFFCPU, regs, nr, now);
    if (m) {
        m->h.pad = LS_ASLEEP;
        if (bpf_map_update_elem(&offcpu, &ptid, m, BPF_ANY))
            stat_add(LS_STAT_LOST_EPISODES, 1);
        m->h.pad = 0;
    }
    return 0;
}

SEC("perf_event")
int on_cpu_sample(struct bpf_perf_event_data *ctx)
{
    __u32 tid = (__u32)bpf_get_current_pid_tgid();
    struct lview v;
    if (!from_target() || !loop_view(tid, &v))
        return 0;
    if ((v.phase != EVL_PHASE_TASK && v.phase != EVL_PHASE_CALLBACK) || !v.since)
        return 0;
    __u64 now = bpf_ktime_get_ns();
    __u64 off = 0;
    struct ls_step_off *so = bpf_map_lookup_elem(&step_off, &tid);
    if (so && so->steps == v.steps)
        off = so->off_ns;
    if (now - v.since < block_threshold_ns + off)
        return 0;                     /* less CPU time than the threshold */
    __u32 *last = bpf_map_lookup_elem(&oncpu_reported, &tid);
    if (last && *last == v.steps)
        return 0;
    /* User registers: the sample's if it interrupted user code, else the
     * ones saved at kernel entry. */
    struct pt_regs *regs = (struct pt_regs *)bpf_task_pt_regs(bpf_get_current_task_btf());
    struct block_msg *m = block_begin(tid, &v, LS_BLOCK_ONCPU, regs, -1, now);
    if (!m)
        return 0;
    bpf_map_update_elem(&oncpu_reported, &tid, &v.steps, BPF_ANY);
    if (generic) {
        if (bpf_map_update_elem(&oncpu_open, &tid, m, BPF_ANY))
            stat_add(LS_STAT_LOST_EPISODES, 1);
    } else
        block_send(m);
    return 0;
}

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

/* ------------------------------------------------------ generic loop mode
 *
 * A thread of the target that enters epoll_wait, epoll_pwait or
 * epoll_pwait2 (with --wait-calls all also poll, ppoll, select, pselect6)
 * is a loop thread; inside that call it is idle.  The entry ends an
 * iteration's busy stretch (and any off-CPU episode: the loop waits
 * again), the return starts the next one.  Iterations are summed per
 * window and sent when a window of window_ns has passed, at an entry. */

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

static __always_inline int wait_enter(void)
{
    if (!generic || !from_target())
        return 0;
    __u32 tid = (__u32)bpf_get_current_pid_tgid();
    __u64 now = bpf_ktime_get_ns();
    struct ls_gloop *g = bpf_map_lookup_elem(&gloops, &tid);
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
#define LS_WAIT_CALL(name)                                                       \
    SEC("tracepoint/syscalls/sys_enter_" #name)                                  \
    int on_enter_##name(void *ctx) { return wait_enter(); }                      \
    SEC("tracepoint/syscalls/sys_exit_" #name)                                   \
    int on_exit_##name(void *ctx) { return wait_exit(); }

LS_WAIT_CALL(epoll_wait)
LS_WAIT_CALL(epoll_pwait)
LS_WAIT_CALL(epoll_pwait2)
LS_WAIT_CALL(poll)
LS_WAIT_CALL(ppoll)
LS_WAIT_CALL(select)
LS_WAIT_CALL(pselect6)

static __always_inline bool is_wait_call(long nr)
{
    if (nr == 232 || nr == 281 || nr == 441)    /* epoll_wait, epoll_pwait, epoll_pwait2 */
        return true;
    return wait_all && (nr == 7 || nr == 23 || nr == 270 || nr == 271);
                                                /* poll, select, pselect6, ppoll */
}

SEC("tp_btf/sys_enter")
int BPF_PROG(on_wait_enter, struct pt_regs *regs, long id)
{
    if (!from_target() || !is_wait_call(id))
        return 0;
    return wait_enter();
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

/* ------------------------------------------------- --syscalls (opt-in)
 *
 * raw_syscalls tracepoints fire for every syscall of every process on the
 * machine (~100-200 ns each even when filtered out here), hence opt-in.
 * Aggregated per loop thread and syscall: count, total and longest time. */

struct sys_start {
    __u64 ts;
    __u64 nr;
};

struct {
    __uint(type, BPF_MAP_TYPE_HASH);
    __uint(max_entries, 1024);
    __type(key, __u32);
    __type(value, struct sys_start);
} sys_start SEC(".maps");

struct {
    __uint(type, BPF_MAP_TYPE_HASH);
    __uint(max_entries, 8192);
    __type(key, struct ls_sys_key);
    __type(value, struct ls_sys_stat);
} sys_stats SEC(".maps");

SEC("raw_tp/sys_enter")
int BPF_PROG(on_sys_enter, struct pt_regs *regs, long id)
{
    __u32 tid = (__u32)bpf_get_current_pid_tgid();
    if (!trace_syscalls || !bpf_map_lookup_elem(&loop_threads, &tid))
        return 0;
    struct sys_start st = { .ts = bpf_ktime_get_ns(), .nr = (__u64)id };
    bpf_map_update_elem(&sys_start, &tid, &st, BPF_ANY);
    return 0;
}

SEC("raw_tp/sys_exit")
int BPF_PROG(on_sys_exit, struct pt_regs *regs, long ret)
{
    __u32 tid = (__u32)bpf_get_current_pid_tgid();
    if (!trace_syscalls)
        return 0;
    struct sys_start *st = bpf_map_lookup_elem(&sys_start, &tid);
    if (!st)
        return 0;
    __u64 dur = bpf_ktime_get_ns() - st->ts;
    struct ls_sys_key k = { .tid = tid, .nr = (__u32)st->nr };
    bpf_map_delete_elem(&sys_start, &tid);
    struct ls_sys_stat *v = bpf_map_lookup_elem(&sys_stats, &k);
    if (!v) {
        struct ls_sys_stat init = { 0 };
        bpf_map_update_elem(&sys_stats, &k, &init, BPF_NOEXIST);
        v = bpf_map_lookup_elem(&sys_stats, &k);
        if (!v)
            return 0;
    }
    __sync_fetch_and_add(&v->count, 1);
    __sync_fetch_and_add(&v->total_ns, dur);
    if (dur > v->max_ns)
        v->max_ns = dur;
    return 0;
}
