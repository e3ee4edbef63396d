/*
 * pystack.bpf.h -- capture the CPython stack of the current thread from BPF
 * (the walk itself is pywalk.h, shared with user space).  Include it once
 * into a BPF object, after vmlinux.h and bpf_helpers.h.
 *
 *   struct ls_py_cfg py_cfg;                  set by the loader (ls_py_detect),
 *                                             before or after load (.bss: the
 *                                             recorder may learn the target is
 *                                             CPython only once it runs)
 *                                             before the object is loaded
 *   ls_py_capture(tid, out)                   the stack of thread tid, which
 *                                             must be the current task (its
 *                                             memory is read with
 *                                             bpf_probe_read_user): sched_switch's
 *                                             prev, a perf_event sample's task
 *
 * With py_cfg.runtime == 0 (not a Python target) ls_py_capture returns at
 * once with out->nframes = 0.  Needs
 * bpf_loop (5.17+).  Stack use is small (about 40 bytes): the frame window,
 * string buffers and loop state live in a per-CPU map (ls_py_scratch, 232
 * bytes); thread states are cached per tid in an LRU hash (ls_py_tstates,
 * 4096 entries, re-checked on each use); ls_py_hrun_code remembers
 * Handle._run's code object.  The output goes to *out, which must be map
 * memory (584 bytes).  At most LS_PYW_THREADS + LS_PYW_WALK loop steps of a
 * few bpf_probe_read_user each; about 1600 instructions verified.  See
 * PYTHON.md.
 */
#ifndef LOOPSCOPE_PYSTACK_BPF_H
#define LOOPSCOPE_PYSTACK_BPF_H

#include "pystack.h"

struct ls_py_cfg py_cfg = {};

/* asyncio.events.Handle._run's code object, once seen (one per target) */
__u64 ls_py_hrun_code = 0;

struct {
    __uint(type, BPF_MAP_TYPE_LRU_HASH);
    __uint(max_entries, 4096);
    __type(key, __u32);
    __type(value, __u64);
} ls_py_tstates SEC(".maps");

static __always_inline __u64 ls_py_ts_get(__u32 tid)
{
    __u64 *v = bpf_map_lookup_elem(&ls_py_tstates, &tid);
    return v ? *v : 0;
}

static __always_inline void *ls_py_scratch_get(void);

#define LS_PYW_INLINE __always_inline
#define LS_PYW_CTX void *
#define LS_PYW_READ(ctx, dst, size, addr) \
    bpf_probe_read_user((dst), (size), (const void *)(unsigned long)(addr))
#define LS_PYW_CFG(ctx) (&py_cfg)
#define LS_PYW_SCRATCH(ctx) ((struct ls_pyw_scratch *)ls_py_scratch_get())
#define LS_PYW_HRUN_GET(ctx) (ls_py_hrun_code)
#define LS_PYW_HRUN_SET(ctx, code) (ls_py_hrun_code = (code))
#define LS_PYW_TS_GET(ctx, tid) ls_py_ts_get(tid)
#define LS_PYW_TS_PUT(ctx, tid, ts) \
    do { __u64 ls_ts_ = (ts); __u32 ls_tid_ = (tid); \
         bpf_map_update_elem(&ls_py_tstates, &ls_tid_, &ls_ts_, BPF_ANY); } while (0)
#define LS_PYW_LOOP(nr, fn, arg) bpf_loop((nr), (fn), (arg), 0)

#include "pywalk.h"

struct {
    __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
    __uint(max_entries, 1);
    __type(key, __u32);
    __type(value, struct ls_pyw_scratch);
} ls_py_scratch SEC(".maps");

static __always_inline void *ls_py_scratch_get(void)
{
    __u32 zero = 0;
    return bpf_map_lookup_elem(&ls_py_scratch, &zero);
}

static __always_inline void ls_py_capture(__u32 tid, struct ls_pystack *out)
{
    if (!py_cfg.runtime) {
        out->nframes = 0;
        out->flags = 0;
        out->task = 0;
        out->task_name_len = 0;
        return;
    }
    ls_pyw_walk((void *)0, tid, out);
}

#endif /* LOOPSCOPE_PYSTACK_BPF_H */
