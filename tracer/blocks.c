/*
 * blocks.c -- blocking episodes: the on-CPU samplers of loop threads, an
 * episode's user stack unwound, merged with its Python frames and stored
 * once, the episode stored; at the end, the episodes still open in BPF
 * maps and the --syscalls times.  Part of the recorder (recorder.h).
 */
#define _GNU_SOURCE
#include "recorder.h"

#include <linux/perf_event.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

/* What this file keeps, private: the samplers, and the stacks already
 * stored (by hash: an episode on a known stack reuses its id). */
struct ls_blocks {
    struct bpf_link **samplers;   /* on-CPU detection: one per online CPU */
    int nsampled;
    bool tried;
    struct { uint64_t hash; int64_t id; } stack_ids[LS_STACK_IDS];
    int64_t next_stack_id;
};

/* Made at its first use; NULL without memory (no samplers, no stacks). */
static struct ls_blocks *state(recorder *r)
{
    if (!r->blk)
        r->blk = calloc(1, sizeof(*r->blk));
    return r->blk;
}

/* On-CPU detection: every half threshold, a CPU-clock sample on each
 * online CPU; on_cpu_sample looks at the thread it interrupted and reports
 * a loop thread's step that overran the threshold.  Per CPU, not per loop
 * thread: a per-thread (task-clock) event is switched out and in with its
 * thread, and its timer reprogrammed, at every context switch -- on a VM
 * a trap each time; a loop thread that sleeps per request paid several
 * microseconds a request for it.  A CPU's timer runs whatever runs there,
 * at 2/threshold per second, and every loop thread, however many, is
 * covered.  Started with the first loop; tried once. */
void ls_start_samplers(recorder *r)
{
    struct ls_blocks *k = state(r);
    if (r->no_blocking || !k || k->tried)
        return;
    k->tried = true;
    int ncpu = libbpf_num_possible_cpus();
    if (ncpu <= 0 || !(k->samplers = calloc((size_t)ncpu, sizeof(*k->samplers))))
        return;                       /* on-CPU detection off */
    struct perf_event_attr a = {
        .type = PERF_TYPE_SOFTWARE,
        .size = sizeof(a),
        .config = PERF_COUNT_SW_CPU_CLOCK,
        .sample_period = (uint64_t)(r->block_threshold_ms * 1e6 / 2),
    };
    for (int cpu = 0; cpu < ncpu; cpu++) {
        int fd = (int)syscall(SYS_perf_event_open, &a, -1, cpu, -1, PERF_FLAG_FD_CLOEXEC);
        if (fd < 0)
            continue;                 /* an offline CPU */
        struct bpf_link *l = bpf_program__attach_perf_event(r->skel->progs.on_cpu_sample, fd);
        if (!l) {
            close(fd);
            continue;
        }
        k->samplers[k->nsampled++] = l;
    }
}
/* Store the Python frames f[from, to) of a captured stack from depth on. */
static int py_frames(recorder *r, int64_t id, int depth, const struct ls_pystack *py,
                              uint32_t from, uint32_t to)
{
    for (uint32_t i = from; i < to && depth < LS_MAX_DEPTH; i++) {
        ls_sym f = { .module = "python" };
        ls_py_frame(r->py, &py->f[i], &f.function, &f.file, &f.line);
        ls_sink_frame(r, id, depth++, 0, &f);
    }
    return depth;
}

/* Store (once) an asyncio task's await chain as a stack of Python
 * frames: f[0] its outermost coroutine, f[n-1] the innermost (depth 0 in
 * the stack).  Its id, 0 when empty. */
int64_t ls_chain_stack(recorder *r, const struct ls_py_frame *f, uint32_t n)
{
    struct ls_blocks *k = state(r);
    if (!n || !k || !r->py)
        return 0;
    uint64_t h = 0x9ae16a3b2f90404full;  /* FNV-1a, apart from the episodes' */
    for (uint32_t i = 0; i < n; i++)
        h = (h ^ f[i].code ^ ((uint64_t)(uint32_t)f[i].instr << 32)) * 1099511628211ull;
    size_t slot = h % LS_STACK_IDS;
    if (k->stack_ids[slot].id && k->stack_ids[slot].hash == h)
        return k->stack_ids[slot].id;
    int64_t id = ++k->next_stack_id;
    int depth = 0;
    for (uint32_t i = n; i-- > 0 && depth < LS_MAX_DEPTH;) {
        ls_sym s = { .module = "python" };
        ls_py_frame(r->py, &f[i], &s.function, &s.file, &s.line);
        ls_sink_frame(r, id, depth++, 0, &s);
    }
    ls_sink_stack(r, id, depth);
    k->stack_ids[slot].hash = h;
    k->stack_ids[slot].id = id;
    return id;
}

/* Unwind, symbolize and store (once) the stack of a blocking episode.  A
 * CPython stack is merged in: the Python frames a native
 * _PyEval_EvalFrameDefault runs (up to and including the next ENTRY frame,
 * pystack.h) go right before it; Python frames the native stack gave no
 * place to (the unwind stopped early) go at its end. */
static int64_t stack_id(recorder *r, uint32_t tid, const struct ls_block *b,
                           const struct ls_pystack *py, const uint8_t *stack)
{
    uint64_t pcs[LS_MAX_DEPTH];
    int n = ls_syms_unwind(ls_get_syms(r), (pid_t)tid, (const uint64_t *)b->regs, stack, b->stack_len, pcs, LS_MAX_DEPTH);
    uint32_t npy = r->py ? py->nframes : 0;
    if (npy > LS_PY_MAX_FRAMES)
        npy = LS_PY_MAX_FRAMES;
    if (n <= 0 && !npy)
        return 0;
    if (n < 0)
        n = 0;
    uint64_t h = 1469598103934665603ull;   /* FNV-1a over the pcs and Python frames */
    for (int i = 0; i < n; i++)
        h = (h ^ pcs[i]) * 1099511628211ull;
    for (uint32_t i = 0; i < npy; i++)
        h = (h ^ py->f[i].code ^ ((uint64_t)(uint32_t)py->f[i].instr << 32)) * 1099511628211ull;
    size_t slot = h % LS_STACK_IDS;
    struct ls_blocks *k = state(r);
    if (!k)
        return 0;
    if (k->stack_ids[slot].id && k->stack_ids[slot].hash == h)
        return k->stack_ids[slot].id;
    /* One row per frame, inlined functions expanded (same address); each
     * stored right after its lookup (symbols.h: valid until the next). */
    int64_t id = ++k->next_stack_id;
    int depth = 0;
    uint32_t next_py = 0;
    for (int i = 0; i < n && depth < LS_MAX_DEPTH; i++) {
        for (const ls_sym *f = ls_syms_lookup(r->syms, pcs[i]); f && depth < LS_MAX_DEPTH;
             f = f->inlined_into) {
            if (next_py < npy && f->function && !strcmp(f->function, "_PyEval_EvalFrameDefault")) {
                uint32_t end = next_py;
                while (end < npy && !(py->f[end++].flags & LS_PYF_ENTRY))
                    ;
                depth = py_frames(r, id, depth, py, next_py, end);
                next_py = end;
                /* ls_py_frame does not touch the symbol cache: f is valid */
            }
            if (depth < LS_MAX_DEPTH) {
                ls_sink_frame(r, id, depth++, pcs[i], f);
            }
        }
    }
    depth = py_frames(r, id, depth, py, next_py, npy);
    ls_sink_stack(r, id, depth);
    k->stack_ids[slot].hash = h;
    k->stack_ids[slot].id = id;
    return id;
}

/* A blocking episode.  The BPF side wrote it, but from what the target
 * published: the task id and, for on-CPU episodes, the step's start
 * (pub.since) are the target's word, so the start is kept inside
 * [recording start, sample] and the task gets a row if it has none. */
void ls_on_block(recorder *r, const struct ls_msg_hdr *h)
{
    const struct ls_block *b = (const void *)(h + 1);
    const struct ls_pystack *py = (const void *)(b + 1);
    size_t fixed = sizeof(*b) + sizeof(*py);
    if (h->len < fixed || b->stack_len > h->len - fixed ||
        (b->kind != LS_BLOCK_OFFCPU && b->kind != LS_BLOCK_ONCPU))
        return;
    struct ls_loop_info *li = ls_loop_seen(r, h->loop, h->pid, h->tid, (int64_t)h->ts);
    if (!li) {
        r->rejected_msgs++;
        return;
    }
    int64_t start = (int64_t)b->start_ns, dur = (int64_t)b->dur_ns;
    if (b->kind == LS_BLOCK_ONCPU) {
        int64_t sample = (int64_t)h->ts;  /* the message was made at the sample */
        if (start > sample || start < r->attach_ns || b->start_ns > INT64_MAX)
            start = sample > r->attach_ns ? r->attach_ns : sample;
    }
    if (dur < 0)
        dur = 0;
    const char *tname;
    uint64_t task = r->dec->block_task(r, h, py, &tname);
    int64_t stack = stack_id(r, h->tid, b, py, (const uint8_t *)(py + 1));
    ls_sink_block(r, &(ls_block_rec){
        .loop = h->loop, .task = task, .kind = (int)b->kind, .syscall = b->syscall,
        .start = start, .dur = dur, .stack = stack,
        .task_name = tname });
    r->blocks++;
}

/* --syscalls: copy the per-thread syscall times into the database. */
void ls_store_syscalls(recorder *r)
{
    if (!r->syscalls || !r->skel)
        return;
    struct bpf_map *map = r->skel->maps.sys_stats;
    struct ls_sys_key key, next;
    int rc = bpf_map__get_next_key(map, NULL, &next, sizeof(next));
    while (rc == 0) {
        key = next;
        rc = bpf_map__get_next_key(map, &key, &next, sizeof(next));
        struct ls_sys_stat v;
        if (bpf_map__lookup_elem(map, &key, sizeof(key), &v, sizeof(v), 0) != 0)
            continue;
        struct { uint64_t pub, loop; } lt = { 0, 0 };
        bpf_map__lookup_elem(r->skel->maps.loop_threads, &key.tid, sizeof(key.tid), &lt,
                             sizeof(lt), 0);
        ls_sink_syscall_stat(r, lt.loop, key.tid, key.nr, v.count, v.total_ns, v.max_ns);
    }
}

/* Call fn on a copy of each value of a BPF hash map keyed by thread id
 * (at the end, once detached: nothing changes the map meanwhile). */
void ls_map_each(recorder *r, struct bpf_map *map,
                        void (*fn)(recorder *r, uint32_t key, void *value))
{
    size_t vsize = bpf_map__value_size(map);
    uint8_t *v = malloc(vsize);
    uint32_t key, next;
    int rc = bpf_map__get_next_key(map, NULL, &next, sizeof(next));
    while (v && rc == 0) {
        key = next;
        rc = bpf_map__get_next_key(map, &key, &next, sizeof(next));
        if (bpf_map__lookup_elem(map, &key, sizeof(key), v, vsize, 0) == 0)
            fn(r, key, v);
    }
    free(v);
}

/* At the end: episodes still open in BPF (the loop has not polled since):
 * off-CPU ones, and in the generic mode on-CPU ones. */
static void flush_open(recorder *r, uint32_t key, void *value);

void ls_flush_open_episodes(recorder *r)
{
    if (!r->no_blocking && r->skel)
        ls_flush_open_map(r, r->skel->maps.offcpu);
}

void ls_flush_open_map(recorder *r, struct bpf_map *map)
{
    ls_map_each(r, map, flush_open);
}

static void flush_open(recorder *r, uint32_t key, void *v)
{
    struct ls_msg_hdr *h = (struct ls_msg_hdr *)v;
    struct ls_block *b = (struct ls_block *)(h + 1);
    /* Still asleep, or (on-CPU) still in its step when we detached,
     * unless the loop had entered its wait since (generic mode). */
    int64_t end = r->detach_ns;
    if (r->dec->open_end)
        end = r->dec->open_end(r, key, b, end);
    if (!b->dur_ns)
        b->dur_ns = end > (int64_t)b->start_ns ? (uint64_t)(end - (int64_t)b->start_ns) : 0;
    /* An on-CPU episode counts CPU time: less the step's time switched
     * out (as the BPF side does when the step ends). */
    struct ls_step_off so;
    if (b->kind == LS_BLOCK_ONCPU &&
        bpf_map__lookup_elem(r->skel->maps.step_off, &key, sizeof(key), &so, sizeof(so),
                             0) == 0 && so.steps == b->steps)
        b->dur_ns = so.off_ns < b->dur_ns ? b->dur_ns - so.off_ns : 0;
    if (b->dur_ns >= (uint64_t)(r->block_threshold_ms * 1e6))
        ls_on_block(r, h);
}

/* Detaching: the samplers go first (engine.c says why). */
void ls_stop_samplers(recorder *r)
{
    struct ls_blocks *k = r->blk;
    if (!k)
        return;
    for (int i = 0; i < k->nsampled; i++)
        bpf_link__destroy(k->samplers[i]);
    k->nsampled = 0;
    free(k->samplers);
    k->samplers = NULL;
}

void ls_blocks_free(recorder *r)
{
    ls_stop_samplers(r);
    free(r->blk);
    r->blk = NULL;
}
