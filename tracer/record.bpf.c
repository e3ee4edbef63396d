/*
 * record.bpf.c -- BPF side of `loopscope record` (see tracer/README.md).
 *
 * USDT programs on libevl's probes forward lifecycle events to user space
 * through one ring buffer: in batched mode (the default) only loop_start,
 * loop_stop and batch are attached and each batch is copied whole; in
 * unbatched mode (--no-batch) every lifecycle probe is attached and becomes
 * one record.  Every message that does not fit is counted in `stats`.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/usdt.bpf.h>

#include "record.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

/* Set by the loader before load. */
const volatile __u32 target_tgid = 0;

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

struct scratch {
    struct ls_msg_hdr h;
    __u8 data[EVL_BATCH_BYTES];
};

struct {
    __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
    __uint(max_entries, 1);
    __type(key, __u32);
    __type(value, struct scratch);
} scratch SEC(".maps");

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

static __always_inline int emit_loop(__u32 type, __u64 loop, __u64 pub)
{
    if (!from_target())
        return 0;
    struct ls_msg_hdr *h = bpf_ringbuf_reserve(&events, sizeof(*h), 0);
    if (!h) {
        stat_add(LS_STAT_DROPPED_MSGS, 1);
        return 0;
    }
    fill_hdr(h, type, loop, pub);
    bpf_ringbuf_submit(h, 0);
    return 0;
}

SEC("usdt")
int BPF_USDT(on_loop_start, __u64 loop, __u32 tid, __u64 pub)
{
    return emit_loop(LS_MSG_LOOP_START, loop, pub);
}

SEC("usdt")
int BPF_USDT(on_loop_stop, __u64 loop, __u32 tid)
{
    return emit_loop(LS_MSG_LOOP_STOP, loop, 0);
}

SEC("usdt")
int BPF_USDT(on_batch, __u64 loop, __u64 addr, __u32 len, __u64 pub, __u32 nrec)
{
    __u32 zero = 0;
    if (!from_target())
        return 0;
    struct scratch *s = bpf_map_lookup_elem(&scratch, &zero);
    if (!s)
        return 0;
    if (len > EVL_BATCH_BYTES) {
        stat_add(LS_STAT_READ_ERRORS, 1);
        return 0;
    }
    fill_hdr(&s->h, LS_MSG_BATCH, loop, pub);
    s->h.len = len;
    s->h.nrec = nrec;
    if (bpf_probe_read_user(s->data, len & (EVL_BATCH_BYTES * 2 - 1) & 0x7fff, (void *)addr)) {
        stat_add(LS_STAT_READ_ERRORS, 1);
        stat_add(LS_STAT_DROPPED_RECS, nrec);
        return 0;
    }
    __u64 size = sizeof(s->h) + len;
    if (size > sizeof(*s))
        return 0;
    /* No wakeup: the recorder drains on a short timer, which spares an
     * irq_work interrupt per batch. */
    if (bpf_ringbuf_output(&events, s, size, BPF_RB_NO_WAKEUP)) {
        stat_add(LS_STAT_DROPPED_MSGS, 1);
        stat_add(LS_STAT_DROPPED_RECS, nrec);
        return 0;
    }
    stat_add(LS_STAT_BATCHES, 1);
    stat_add(LS_STAT_RECS, nrec);
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
        stat_add(LS_STAT_DROPPED_RECS, 1);
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
    stat_add(LS_STAT_RECS, 1);
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
