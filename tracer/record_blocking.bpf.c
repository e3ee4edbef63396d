/*
 * record_blocking.bpf.c -- blocking detection, for both modes (libevl and
 * the generic loop mode).  Part of record.skel.h (record.bpf.h).
 *
 * Off-CPU: when a loop thread is switched out in a sleeping state while it
 * is not idle, remember when, the running task, the syscall (orig_ax) and
 * a copy of its user registers and stack; the episode lasts until it is
 * closed (struct block_msg, record.bpf.h, tells when), and is sent if it
 * lasted at least block_threshold_ns.
 *
 * On-CPU: a CPU-clock perf event on each CPU (blocks.c says why not per
 * thread) samples whatever runs there; a loop thread's step whose wall
 * time since it began, minus its time off the CPU (switched out, or
 * stolen: record.bpf.h), passed the threshold is reported once, with its
 * registers and stack at the sample.
 */
#include "record_wait.bpf.h"
#include "pystack.bpf.h"

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

/* Last step reported as on-CPU per loop thread (one report per step). */
struct {
    __uint(type, BPF_MAP_TYPE_HASH);
    __uint(max_entries, 1024);
    __type(key, __u32);
    __type(value, __u32);
} oncpu_reported SEC(".maps");

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

/* Is the thread, asleep again with these registers, still in the call of
 * its open episode o (fsync sleeps several times), not in a new call from
 * the same place (two requests served back to back, with no wait between
 * them that slept: --wait-hook switch sees no boundary there)?  The same
 * stack pointer, and the same top LS_SAME_WORDS words of its stack as when
 * the episode began: a call's user stack is frozen while it runs, a new
 * call's locals differ. */
#define LS_SAME_WORDS 32
static __always_inline bool same_call(struct block_msg *o, struct pt_regs *regs)
{
    __u64 sp = BPF_CORE_READ(regs, sp), now[LS_SAME_WORDS];
    if (sp != o->b.regs[7])
        return false;
    if (o->b.stack_len < sizeof(now) || bpf_probe_read_user(now, sizeof(now), (void *)sp))
        return true;                  /* nothing to compare: as before */
    const __u64 *then = (const __u64 *)o->stack;
    for (int i = 0; i < LS_SAME_WORDS; i++)
        if (now[i] != then[i])
            return false;
    return true;
}

/* --wait-hook switch: thread tid (prev, still the current thread) goes
 * to sleep with these user registers; asleep in a wait call, that is the
 * call's entry (wait_enter).  True if it is, the thread is idle now.  A
 * user page fault's orig_ax is its error code, and the poll family's
 * numbers are codes too (their U bit set; the epoll family's is clear):
 * for those, the instruction before ip must be the syscall instruction. */
static __always_inline bool switch_wait_out(__u32 tid, struct pt_regs *regs, __u64 now)
{
    long nr = (long)BPF_CORE_READ(regs, orig_ax);
    if (!is_wait_call(nr))
        return false;
    bool poll = !is_epoll_call(nr);
    if (poll) {
        __u16 op = 0;
        __u64 ip = BPF_CORE_READ(regs, ip);
        if (bpf_probe_read_user(&op, sizeof(op), (void *)(ip - 2)) || op != 0x050f)
            return false;
    }
    return wait_enter(tid, now, poll, wait_nfds(regs, nr));
}

SEC("tp_btf/sched_switch")
int BPF_PROG(on_switch, bool preempt, struct task_struct *prev, struct task_struct *next)
{
    if (!detect_blocking && !wait_switch)
        return 0;
    /* Every switch of the machine comes here: leave at once if neither
     * thread is the target's. */
    bool in = next->tgid == target_tgid, out = prev->tgid == target_tgid;
    if (!in && !out)
        return 0;
    __u64 now = bpf_ktime_get_ns();
    rq_anchor_set(prev, now);         /* the run queue's clock is exact here */

    /* A loop thread comes back: account its time away. */
    if (in && wait_switch)
        wait_exit(next->pid, now);      /* back from a sleep in its wait call */
    if (in && detect_blocking) {
        __u32 ntid = next->pid;
        struct block_msg *o = bpf_map_lookup_elem(&offcpu, &ntid);
        if (o && o->h.pad == LS_ASLEEP) {  /* back from a sleep of the call */
            o->b.dur_ns = now - o->b.start_ns;
            o->h.pad = 0;
        }
        struct ls_step_off *so = bpf_map_lookup_elem(&step_off, &ntid);
        if (so) {
            if (so->out_ns)
                so->off_ns += now - so->out_ns;
            so->out_ns = 0;
            stretch_begin(next, so, now);
        }
    }

    if (!out)
        return 0;
    __u32 ptid = prev->pid;
    unseen_back(ptid, now);           /* it ran: back on the CPU, seen or not */
    if (wait_switch && prev->__state != 0 &&
        switch_wait_out(ptid, (struct pt_regs *)bpf_task_pt_regs(prev), now))
        return 0;
    if (generic && detect_blocking && prev->__state != 0)
        wait_stale(ptid, (struct pt_regs *)bpf_task_pt_regs(prev), now);
    struct lview v;
    if (!detect_blocking || !loop_view(ptid, &v))
        return 0;

    struct ls_step_off *so = bpf_map_lookup_elem(&step_off, &ptid);
    if (!so) {
        struct ls_step_off init = { .steps = v.steps };
        bpf_map_update_elem(&step_off, &ptid, &init, BPF_ANY);
        so = bpf_map_lookup_elem(&step_off, &ptid);
        if (!so)
            return 0;
    }
    __u64 stolen = stretch_off(prev, so, v.since, now, false);
    if (so->steps != v.steps) {
        so->steps = v.steps;
        so->off_ns = 0;
    }
    so->off_ns += stolen;
    so->in_ns = 0;
    so->out_ns = now;

    if (prev->__state == 0)           /* TASK_RUNNING: preempted, not blocked */
        return 0;
    struct pt_regs *regs = (struct pt_regs *)bpf_task_pt_regs(prev);
    __s64 nr = (__s64)BPF_CORE_READ(regs, orig_ax);
    __u64 ip = BPF_CORE_READ(regs, ip);
    struct block_msg *o = bpf_map_lookup_elem(&offcpu, &ptid);
    if (o) {
        if (o->b.steps == v.steps && o->b.syscall == nr && o->b.regs[16] == ip &&
            same_call(o, regs)) {
            o->h.pad = LS_ASLEEP;     /* still the same blocking call */
            return 0;
        }
        episode_close(ptid, now);
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
    if (!from_target())
        return 0;
    __u64 now = bpf_ktime_get_ns();
    /* A loop thread that runs outside its wait call has returned from it */
    if (generic)
        wait_stale(tid, (struct pt_regs *)bpf_task_pt_regs(bpf_get_current_task_btf()), now);
    /* --wait-hook switch: a wait call that does not sleep is seen only
     * when a sample finds the thread in it (in the kernel, the call's
     * number in its saved registers): an iteration ends and the next
     * begins there, as far as this view can tell.  (The sample was in
     * the kernel if its ip is a kernel address: the upper half.) */
    if (wait_switch && (long)PT_REGS_IP(&ctx->regs) < 0) {
        struct pt_regs *tr = (struct pt_regs *)bpf_task_pt_regs(bpf_get_current_task_btf());
        if (is_epoll_call((long)BPF_CORE_READ(tr, orig_ax))) {
            if (wait_enter(tid, now, false, 1))
                wait_exit(tid, now);
            return 0;
        }
    }
    /* --wait-hook switch: a thread that woke another since its step began
     * (a reply written to a client's socket, work handed to a worker) has
     * served events in that time, not run one long step: a loop so busy
     * that its waits never sleep would otherwise look like one */
    if (wait_switch) {
        struct ls_gloop *g = bpf_map_lookup_elem(&gloops, &tid);
        if (g && g->woke && !g->in_wait) {
            step_boundary(tid, g, now);
            return 0;
        }
    }
    struct lview v;
    if (!loop_view(tid, &v))
        return 0;
    if ((v.phase != EVL_PHASE_TASK && v.phase != EVL_PHASE_CALLBACK) || !v.since)
        return 0;
    __u64 off = step_off_now(tid, v.steps, v.since, now, true);
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

/* ---- asyncio tasks made and destroyed (generic mode, CPython) ----
 * Uprobes at the Task type's tp_init and tp_finalize, attached by
 * decode_asyncio.c once a census has seen the type (pystack_tasks.c):
 * one hit when a task is made, one when it is destroyed.  FINAL reads
 * the task's last state and its name: a task that lived between two
 * censuses is known only from these. */
struct ls_pyt_bpf_cfg pyt_cfg = {};

struct {
    __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
    __uint(max_entries, 1);
    __type(key, __u32);
    __type(value, struct ls_pystack);
} pyt_name_scratch SEC(".maps");

static __always_inline __u32 pyt_word(__u64 task, __u32 off)
{
    __u32 v = 0;
    if (off < 4096)
        bpf_probe_read_user(&v, sizeof(v), (const void *)(task + off));
    return v;
}

static __always_inline __u32 pyt_flag(__u64 task, __u32 off, __u32 bit)
{
    __u32 v = pyt_word(task, off);
    return bit == LS_PY_NONE ? v != 0 : (v >> (bit & 31)) & 1;
}

static __always_inline int pyt_emit(__u64 task, __u32 what)
{
    if (!pyt_cfg.on || !task || !from_target())
        return 0;
    struct {
        struct ls_msg_hdr h;
        struct ls_pytask_ev e;
    } *m = bpf_ringbuf_reserve(&events, sizeof(*m), 0);
    if (!m) {
        stat_add(LS_STAT_DROPPED_MSGS, 1);
        return 0;
    }
    fill_hdr(&m->h, LS_MSG_PYTASK, 0, 0);
    m->h.len = sizeof(m->e);
    __builtin_memset(&m->e, 0, sizeof(m->e));
    m->e.task = task;
    m->e.what = what;
    if (what == LS_PYT_EV_FINAL) {
        __u64 coro = 0, exc = 0;
        if (pyt_cfg.coro < 4096)
            bpf_probe_read_user(&coro, sizeof(coro), (const void *)(task + pyt_cfg.coro));
        if (pyt_cfg.exception < 4096)
            bpf_probe_read_user(&exc, sizeof(exc), (const void *)(task + pyt_cfg.exception));
        m->e.coro = coro;
        m->e.state = pyt_word(task, pyt_cfg.state);
        m->e.bits = (pyt_flag(task, pyt_cfg.log_tb, pyt_cfg.log_tb_bit) ? LS_PYT_BIT_LOG_TB : 0) |
                    (pyt_flag(task, pyt_cfg.log_pending, pyt_cfg.log_pending_bit)
                         ? LS_PYT_BIT_LOG_PENDING : 0) |
                    (exc ? LS_PYT_BIT_EXCEPTION : 0);
        __u32 zero = 0;
        struct ls_pystack *out = bpf_map_lookup_elem(&pyt_name_scratch, &zero);
        struct ls_pyw_scratch *sc = ls_py_scratch_get();
        if (out && sc && py_cfg.runtime) {
            out->task = 0;
            out->task_name_len = 0;
            out->flags = 0;
            ls_pyw_task_name((void *)0, &py_cfg, sc, task, out);
            if (out->task == task && out->task_name_len <= LS_PY_TASK_NAME) {
                __builtin_memcpy(m->e.name, out->task_name, LS_PY_TASK_NAME);
                m->e.name_len = out->task_name_len;
                m->e.name_flags = out->flags;
            }
        }
    }
    bpf_ringbuf_submit(m, 0);
    return 0;
}

SEC("uprobe")
int BPF_KPROBE(on_pytask_init, void *self)
{
    return pyt_emit((__u64)self, LS_PYT_EV_INIT);
}

SEC("uprobe")
int BPF_KPROBE(on_pytask_final, void *self)
{
    return pyt_emit((__u64)self, LS_PYT_EV_FINAL);
}
