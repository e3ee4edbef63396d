/*
 * record_syscalls.bpf.c -- --syscalls (opt-in).  Part of record.skel.h
 * (record.bpf.h).
 *
 * raw_syscalls tracepoints fire for every syscall of every process on the
 * machine (~100-200 ns each even when filtered out here), hence opt-in.
 * Aggregated per loop thread and syscall: count, total and longest time.
 */
#include "record.bpf.h"

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
