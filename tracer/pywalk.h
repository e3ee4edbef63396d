/*
 * pywalk.h -- the CPython stack walk, written once for two readers: BPF
 * (pystack.bpf.h: bpf_probe_read_user on the current task) and user space
 * (pystack.c: process_vm_readv on another process).  What is walked, per
 * version: PYTHON.md.  Every loop has a constant bound, every value read is
 * the target's word (a pointer may be anything: reads fail, they do not
 * fault); every offset comes from the loader's struct ls_py_cfg.
 *
 * The includer defines, before including this file:
 *   LS_PYW_INLINE                       __always_inline / inline
 *   LS_PYW_CTX                          the type of the context argument
 *   LS_PYW_READ(ctx, dst, size, addr)   0 when size bytes at addr were copied to dst
 *   LS_PYW_CFG(ctx)                     const volatile struct ls_py_cfg *
 *   LS_PYW_SCRATCH(ctx)                 struct ls_pyw_scratch *, or NULL
 *   LS_PYW_HRUN_GET(ctx), LS_PYW_HRUN_SET(ctx, code)
 *                                       a remembered Handle._run code address
 *   LS_PYW_TS_GET(ctx, tid), LS_PYW_TS_PUT(ctx, tid, tstate)
 *                                       a per-thread cache of thread-state addresses
 *                                       (always re-checked before use)
 *   LS_PYW_LOOP(nr, fn, arg)            calls fn(i, arg) for i < nr until it returns
 *                                       non-zero (BPF: bpf_loop)
 *
 * For the verifier: the loops are callbacks (bpf_loop verifies the body
 * once, not once per iteration), and what a loop carries (the frame, the
 * number of frames, ...) lives in map memory (the scratch value, *out),
 * where the verifier sees unknown but bounded scalars: states converge.
 */
#ifndef LOOPSCOPE_PYWALK_H
#define LOOPSCOPE_PYWALK_H

#include "pystack.h"

#define LS_PYW_THREADS 64       /* thread states (and interpreters) visited */
#define LS_PYW_WALK 96          /* frames visited, shim frames included */
#define LS_PYW_WIN 112          /* bytes of a frame read at once (cfg.frame_read <= this) */
#define LS_PYW_OBJ 48           /* bytes of a str/int object read at once */

_Static_assert((LS_PY_MAX_FRAMES & (LS_PY_MAX_FRAMES - 1)) == 0, "LS_PY_MAX_FRAMES: a power of two");

#if defined(__clang__)
#define LS_PYW_UNROLL _Pragma("unroll")
#else
#define LS_PYW_UNROLL
#endif

struct ls_pyw_scratch {
    __u8 win[LS_PYW_WIN];       /* one frame */
    __u8 obj[LS_PYW_OBJ];       /* one str or int header */
    __u8 buf[24];               /* string bytes compared */
    /* what the loops carry */
    __u64 frame, hframe;        /* the next frame; Handle._run's frame */
    __u64 interp, ts, found;    /* thread search */
    __u32 tid, pad;
};

/* the loops' argument (on the stack in BPF: bpf_loop wants a stack pointer) */
struct ls_pyw_loop {
    LS_PYW_CTX ctx;
    struct ls_pystack *out;
    struct ls_pyw_scratch *sc;
};

typedef const volatile struct ls_py_cfg ls_pyw_cfg;

static LS_PYW_INLINE __u64 ls_pyw_ptr(LS_PYW_CTX ctx, __u64 addr)
{
    __u64 v = 0;
    if (addr < 4096 || LS_PYW_READ(ctx, &v, sizeof v, addr))
        return 0;
    return v;
}

static LS_PYW_INLINE __u64 ls_pyw_u64(const __u8 *p, __u32 off, __u32 len)
{
    __u64 v = 0;
    if (off > len - 8)
        return 0;
    __builtin_memcpy(&v, p + off, 8);
    return v;
}

static LS_PYW_INLINE __u32 ls_pyw_u32(const __u8 *p, __u32 off, __u32 len)
{
    __u32 v = 0;
    if (off > len - 4)
        return 0;
    __builtin_memcpy(&v, p + off, 4);
    return v;
}

static LS_PYW_INLINE __u32 ls_pyw_u8(const __u8 *p, __u32 off, __u32 len)
{
    if (off > len - 1)
        return LS_PY_NONE;
    return p[off];
}

/* Is ts the thread state of kernel thread tid? */
static LS_PYW_INLINE int ls_pyw_is_thread(LS_PYW_CTX ctx, ls_pyw_cfg *c, __u64 ts, __u32 tid)
{
    __u64 v = ls_pyw_ptr(ctx, ts + c->tstate_tid);
    if (c->pthread_tid != LS_PY_NONE) {
        /* 3.10: thread_id is pthread_self(), glibc's struct pthread */
        __u32 t = 0;
        if (v < 4096 || LS_PYW_READ(ctx, &t, sizeof t, v + c->pthread_tid))
            return 0;
        return t == tid;
    }
    return v == tid;
}

/* One step of _PyRuntime -> interpreters.head -> threads.head -> next ...:
 * sc->ts is the thread state to look at, sc->interp its interpreter. */
static long ls_pyw_thread_cb(__u32 i, void *arg)
{
    struct ls_pyw_loop *L = arg;
    LS_PYW_CTX ctx = L->ctx;
    struct ls_pyw_scratch *sc = L->sc;
    ls_pyw_cfg *c = LS_PYW_CFG(ctx);
    __u64 ts = sc->ts, interp = sc->interp;
    (void)i;
    if (!ts) {
        if (!interp)
            return 1;
        interp = ls_pyw_ptr(ctx, interp + c->interp_next);
        sc->interp = interp;
        if (!interp)
            return 1;
        sc->ts = ls_pyw_ptr(ctx, interp + c->interp_threads_head);
        return 0;
    }
    if (ls_pyw_is_thread(ctx, c, ts, sc->tid)) {
        sc->found = ts;
        return 1;
    }
    sc->ts = ls_pyw_ptr(ctx, ts + c->tstate_next);
    return 0;
}

/* The thread state whose thread is tid, 0 if none among the first
 * LS_PYW_THREADS (interpreters included). */
static LS_PYW_INLINE __u64 ls_pyw_find_thread(struct ls_pyw_loop *L, ls_pyw_cfg *c, __u32 tid)
{
    LS_PYW_CTX ctx = L->ctx;
    struct ls_pyw_scratch *sc = L->sc;
    __u64 ts = LS_PYW_TS_GET(ctx, tid);
    if (ts && ls_pyw_is_thread(ctx, c, ts, tid))
        return ts;
    sc->tid = tid;
    sc->found = 0;
    sc->interp = ls_pyw_ptr(ctx, c->runtime + c->runtime_interp_head);
    sc->ts = sc->interp ? ls_pyw_ptr(ctx, sc->interp + c->interp_threads_head) : 0;
    LS_PYW_LOOP(LS_PYW_THREADS, ls_pyw_thread_cb, L);
    ts = sc->found;
    if (ts)
        LS_PYW_TS_PUT(ctx, tid, ts);
    return ts;
}

/* Reads the header of the object at addr into sc->obj; its type, 0 if
 * unreadable. */
static LS_PYW_INLINE __u64 ls_pyw_obj(LS_PYW_CTX ctx, struct ls_pyw_scratch *sc, __u64 addr)
{
    if (addr < 4096 || LS_PYW_READ(ctx, sc->obj, LS_PYW_OBJ, addr))
        return 0;
    return ls_pyw_u64(sc->obj, 8, LS_PYW_OBJ);
}

/* Is s a compact ASCII str equal to lit (exact), or ending in "/" lit? */
static LS_PYW_INLINE int ls_pyw_str_is(LS_PYW_CTX ctx, ls_pyw_cfg *c, struct ls_pyw_scratch *sc,
                                       __u64 s, const char *lit, __u32 n, int exact)
{
    if (ls_pyw_obj(ctx, sc, s) != c->unicode_type || !c->unicode_type)
        return 0;
    __u64 len = ls_pyw_u64(sc->obj, c->unicode_len, LS_PYW_OBJ);
    __u32 st = ls_pyw_u32(sc->obj, c->unicode_state, LS_PYW_OBJ);
    if (!(st & LS_PYW_U_COMPACT) || !(st & LS_PYW_U_ASCII))
        return 0;
    if (n > sizeof sc->buf - 1)
        return 0;
    __u64 at = s + c->unicode_data;
    __u32 d = 0;
    if (exact) {
        if (len != n || LS_PYW_READ(ctx, sc->buf + 1, n, at))
            return 0;
    } else {
        if (len <= n || len > (1u << 20) || LS_PYW_READ(ctx, sc->buf, n + 1, at + len - n - 1))
            return 0;
        d = sc->buf[0] != '/';
    }
    /* n and lit are constants once inlined: unrolled */
    LS_PYW_UNROLL
    for (__u32 i = 0; i < n; i++)
        d |= sc->buf[i + 1] ^ (__u8)lit[i];
    return d == 0;
}

/* Is code asyncio.events.Handle._run?  By the loader's address, or by a
 * code address remembered after a match, or by its co_name and the end of
 * its co_filename (the module may be imported after attach). */
static LS_PYW_INLINE int ls_pyw_is_handle_run(LS_PYW_CTX ctx, ls_pyw_cfg *c,
                                              struct ls_pyw_scratch *sc, __u64 code)
{
    __u64 known = c->handle_run_code;
    if (known)
        return code == known;
    known = LS_PYW_HRUN_GET(ctx);
    if (known)
        return code == known;
    if (!ls_pyw_str_is(ctx, c, sc, ls_pyw_ptr(ctx, code + c->code_name), "_run", 4, 1))
        return 0;
    if (!ls_pyw_str_is(ctx, c, sc, ls_pyw_ptr(ctx, code + c->code_filename),
                       "asyncio/events.py", 17, 0))
        return 0;
    LS_PYW_HRUN_SET(ctx, code);
    return 1;
}

/* The name of the Task at task into out (task, task_name*, flags), if its
 * type is big enough to hold one and it is a str or an int. */
static LS_PYW_INLINE void ls_pyw_task_name(LS_PYW_CTX ctx, ls_pyw_cfg *c,
                                           struct ls_pyw_scratch *sc, __u64 task,
                                           struct ls_pystack *out)
{
    /* the task's type must be big enough to hold task_name */
    __u64 tt = ls_pyw_ptr(ctx, task + 8);
    __s64 bs = tt ? (__s64)ls_pyw_ptr(ctx, tt + c->type_basicsize) : 0;
    if (bs < (__s64)c->task_name + 8 || bs > 65536)
        return;
    __u64 name = ls_pyw_ptr(ctx, task + c->task_name);
    __u64 nt = ls_pyw_obj(ctx, sc, name);
    if (!nt)
        return;
    if (nt == c->unicode_type) {
        __u64 len = ls_pyw_u64(sc->obj, c->unicode_len, LS_PYW_OBJ);
        __u32 st = ls_pyw_u32(sc->obj, c->unicode_state, LS_PYW_OBJ);
        __u32 kind = LS_PYW_U_KIND(st), flags = 0;
        __u64 data;
        if (!(st & LS_PYW_U_COMPACT) || len > (1u << 30))
            return;
        if (st & LS_PYW_U_ASCII) {
            if (kind != 1)
                return;
            data = name + c->unicode_data;
        } else {
            data = name + c->unicode_cdata;
            if (kind == 1)
                flags = LS_PYS_NAME_LATIN1;
            else if (kind == 2)
                flags = LS_PYS_NAME_UCS2;
            else if (kind == 4)
                flags = LS_PYS_NAME_UCS4;
            else
                return;
        }
        __u64 bytes = len * kind;
        if (bytes > LS_PY_TASK_NAME) {
            bytes = LS_PY_TASK_NAME;
            flags |= LS_PYS_NAME_CUT;
        }
        __u32 nb = (__u32)bytes & 63;
        if (nb > LS_PY_TASK_NAME)
            return;
        if (nb && LS_PYW_READ(ctx, out->task_name, nb, data)) {
            out->flags |= LS_PYS_READ_ERROR;
            return;
        }
        out->task_name_len = nb;
        out->flags |= flags;
        out->task = task;
        return;
    }
    if (nt == c->long_type) {
        /* 3.12+: the name of an unnamed task is its number, formatted
         * "Task-N" when asked for */
        __u64 tag = ls_pyw_u64(sc->obj, 16, LS_PYW_OBJ);
        __u64 d0 = ls_pyw_u32(sc->obj, c->long_digit, LS_PYW_OBJ) & 0x3fffffffu;
        __u64 d1 = ls_pyw_u32(sc->obj, c->long_digit + 4, LS_PYW_OBJ) & 0x3fffffffu;
        __u64 nd, v;
        if (c->long_kind == LS_PY_LONG_TAG) {
            if ((tag & 3) == 2)
                return;                 /* negative */
            nd = (tag & 3) == 1 ? 0 : tag >> 3;
        } else {
            if ((__s64)tag < 0)
                return;
            nd = tag;
        }
        if (nd == 0)
            v = 0;
        else if (nd == 1)
            v = d0;
        else if (nd == 2)
            v = d0 | d1 << 30;
        else
            return;
        __builtin_memcpy(out->task_name, &v, 8);
        out->task_name_len = 8;
        out->flags |= LS_PYS_NAME_COUNTER;
        out->task = task;
    }
}

/* Handle._run's self (the Handle) -> _callback -> the Task -> its name. */
static LS_PYW_INLINE void ls_pyw_task(LS_PYW_CTX ctx, ls_pyw_cfg *c, struct ls_pyw_scratch *sc,
                                      __u64 frame, struct ls_pystack *out)
{
    __u64 self = ls_pyw_ptr(ctx, frame + c->frame_localsplus) & ~(__u64)7;   /* 3.14+: a stackref */
    __u64 cb = self ? ls_pyw_ptr(ctx, self + c->handle_callback) : 0;
    if (!cb)
        return;
    __u64 t = ls_pyw_ptr(ctx, cb + 8);
    __u64 task;
    /* task_wakeup is a bound C method (m_self); the first step and the
     * following ones a TaskStepMethWrapper (sw_task); a pure-Python task's
     * step a bound method (im_self, at the same offset as m_self). */
    if (t && (t == c->cfunction_type || t == c->cmethod_type || t == c->method_type))
        task = ls_pyw_ptr(ctx, cb + c->cfunc_self);
    else
        task = ls_pyw_ptr(ctx, cb + c->callback_task);
    if (task)
        ls_pyw_task_name(ctx, c, sc, task, out);
}

/* No Handle._run on the stack (uvloop): the task asyncio's current-task
 * dict {loop: task} holds, the first in its first eight entries (a
 * process running one loop has one).  Each step of a task deletes the
 * loop's entry and adds it again at the end of the entries, so that one
 * moves through the smallest table's five until a resize packs them
 * (with loops in several threads it may be another thread's task). */
static LS_PYW_INLINE void ls_pyw_current_task(LS_PYW_CTX ctx, ls_pyw_cfg *c,
                                              struct ls_pyw_scratch *sc, struct ls_pystack *out)
{
    __u64 keys = ls_pyw_ptr(ctx, c->current_tasks + 32);       /* ma_keys */
    if (!keys || ls_pyw_ptr(ctx, c->current_tasks + 40))      /* a split table: not this one */
        return;
    if (LS_PYW_READ(ctx, sc->buf, 24, keys + 8))
        return;
    __u64 entries, n;
    if (c->dict_keys311) {
        /* dk_log2_size, dk_log2_index_bytes, dk_kind (0: general),
         * dk_version, dk_usable, dk_nentries */
        __u32 ix = sc->buf[1];
        if (sc->buf[2] != 0 || ix > 20)
            return;
        entries = keys + 32 + (1ull << ix);
        n = ls_pyw_u64(sc->buf, 16, 24);
    } else {
        /* dk_size, dk_lookup, dk_usable; dk_nentries after them */
        __u64 size = ls_pyw_u64(sc->buf, 0, 24);
        if (size < 8 || size > 128 || (size & (size - 1)))
            return;
        entries = keys + 40 + size;                            /* 1-byte indices */
        n = ls_pyw_ptr(ctx, keys + 32);
    }
    __u64 task = 0;
    LS_PYW_UNROLL
    for (int i = 0; i < 8; i++) {
        if (!task && (__u64)i < n)
            task = ls_pyw_ptr(ctx, entries + 24 * i + 16);     /* me_value */
    }
    if (task)
        ls_pyw_task_name(ctx, c, sc, task, out);
}

/* One frame: sc->frame; out->nframes so far. */
static long ls_pyw_frame_cb(__u32 i, void *arg)
{
    struct ls_pyw_loop *L = arg;
    LS_PYW_CTX ctx = L->ctx;
    struct ls_pyw_scratch *sc = L->sc;
    struct ls_pystack *out = L->out;
    ls_pyw_cfg *c = LS_PYW_CFG(ctx);
    __u64 frame = sc->frame;
    __u32 wlen = c->frame_read;
    (void)i;
    if (frame < 4096)
        return 1;
    if (wlen < 8 || wlen > LS_PYW_WIN || LS_PYW_READ(ctx, sc->win, wlen, frame)) {
        out->flags |= LS_PYS_READ_ERROR;
        return 1;
    }
    /* 3.14+: f_executable is a _PyStackRef, its low bits tags (a no-op
     * before: objects are 8-byte aligned) */
    __u64 code = ls_pyw_u64(sc->win, c->frame_code, LS_PYW_WIN) & ~(__u64)7;
    sc->frame = ls_pyw_u64(sc->win, c->frame_previous, LS_PYW_WIN);
    __u32 n = out->nframes;
    __s32 instr = -1;
    __u32 flags = 0;
    if (c->kind == LS_PY_KIND_IFRAME) {
        if (c->owner_cstack != LS_PY_NONE &&
            ls_pyw_u8(sc->win, c->frame_owner, LS_PYW_WIN) >= c->owner_cstack) {
            /* a shim frame of the C stack (the owners from owner_cstack
             * up: 3.14 has two): the frame before it (inner) is the first
             * one of its eval call */
            if (n > 0 && n <= LS_PY_MAX_FRAMES)
                out->f[(n - 1) & (LS_PY_MAX_FRAMES - 1)].flags |= LS_PYF_ENTRY;
            return 0;
        }
        __s64 d = (__s64)(ls_pyw_u64(sc->win, c->frame_instr, LS_PYW_WIN) -
                          (code + c->code_adaptive));
        if (d >= 0 && d < (1 << 30))
            instr = (__s32)d;
        if (c->frame_is_entry != LS_PY_NONE &&
            ls_pyw_u8(sc->win, c->frame_is_entry, LS_PYW_WIN) == 1)
            flags = LS_PYF_ENTRY;
    } else {
        __s32 lasti = (__s32)ls_pyw_u32(sc->win, c->frame_instr, LS_PYW_WIN);
        if (lasti >= 0 && lasti < (1 << 29))
            instr = lasti * 2;
        flags = LS_PYF_ENTRY;
    }
    if (!sc->hframe && code && ls_pyw_is_handle_run(ctx, c, sc, code)) {
        sc->hframe = frame;
        flags |= LS_PYF_HANDLE_RUN;
    }
    if (n < LS_PY_MAX_FRAMES) {
        struct ls_py_frame *f = &out->f[n & (LS_PY_MAX_FRAMES - 1)];
        f->code = code;
        f->instr = instr;
        f->flags = flags;
        out->nframes = n + 1;
        return 0;
    }
    /* full: go on only to find Handle._run */
    out->flags |= LS_PYS_TRUNCATED;
    return sc->hframe ? 1 : 0;
}

/* The stack of thread tid, innermost first, into out. */
static LS_PYW_INLINE void ls_pyw_walk(LS_PYW_CTX ctx, __u32 tid, struct ls_pystack *out)
{
    ls_pyw_cfg *c = LS_PYW_CFG(ctx);
    out->nframes = 0;
    out->flags = 0;
    out->task = 0;
    out->task_name_len = 0;
    if (!c->runtime)
        return;
    struct ls_pyw_loop L = { ctx, out, LS_PYW_SCRATCH(ctx) };
    struct ls_pyw_scratch *sc = L.sc;
    if (!sc) {
        out->flags = LS_PYS_READ_ERROR;
        return;
    }
    __u64 ts = ls_pyw_find_thread(&L, c, tid);
    if (!ts) {
        out->flags = LS_PYS_NO_THREAD;
        return;
    }
    __u64 frame = ls_pyw_ptr(ctx, ts + c->tstate_frame);
    if (c->cframe_current != LS_PY_NONE)
        frame = frame ? ls_pyw_ptr(ctx, frame + c->cframe_current) : 0;
    sc->frame = frame;
    sc->hframe = 0;
    LS_PYW_LOOP(LS_PYW_WALK, ls_pyw_frame_cb, &L);
    if (sc->frame >= 4096 && !(out->flags & LS_PYS_READ_ERROR))
        out->flags |= LS_PYS_TRUNCATED;
    if (sc->hframe)
        ls_pyw_task(ctx, c, sc, sc->hframe, out);
    if (!out->task && c->tstate_running_task != LS_PY_NONE) {
        __u64 task = ls_pyw_ptr(ctx, ts + c->tstate_running_task);
        if (task)
            ls_pyw_task_name(ctx, c, sc, task, out);
    } else if (!out->task && c->current_tasks)
        ls_pyw_current_task(ctx, c, sc, out);
}

#endif /* LOOPSCOPE_PYWALK_H */
