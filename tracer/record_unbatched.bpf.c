/*
 * record_unbatched.bpf.c -- libevl with --no-batch: every lifecycle probe
 * is attached and each hit becomes one record in the ring buffer (one
 * uprobe per event: tracer/README.md, "How events get out").  Part of
 * record.skel.h (record.bpf.h).
 */
#include "record.bpf.h"

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
        episode_close((__u32)bpf_get_current_pid_tgid(), bpf_ktime_get_ns());
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
