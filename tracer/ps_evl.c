/*
 * ps_evl.c -- `loopscope ps`'s libevl source (ps.h): every pending task of
 * every loop of a libevl process, read from outside without stopping it,
 * through what libevl publishes for debuggers (evl-probes.h, struct
 * evl_debug): the global `evl_debug`, found by its ELF symbol in the
 * program or libevl.so, holds the live loops and the offsets of the
 * fields read.  Each task: id, name, state, and while suspended its
 * reason, object and since when (libevl's task_suspend arguments); for a
 * lock, the holder (what the suspend's timeout argument carries), so the
 * wait-for cycles come out as for asyncio.  A suspended task's stack is
 * its own (a stackful coroutine): unwound with libdwfl (symbols.h) from
 * the registers evl__ctx_switch saved on it, as a blocking episode's
 * stack is, into its async stack.
 *
 * The target is hostile: every count is bounded (64 loops, 100000 tasks
 * in all), a task list that changes under the walk is cut where a task
 * does not belong to its loop, names are at most the field's size, and
 * the loops list is read again when its generation moved.
 */
#define _GNU_SOURCE
#include "ps.h"
#include "pystack_int.h"          /* ls_py_read */
#include "symbols.h"
#include "evl-probes.h"

#include <errno.h>
#include <fcntl.h>
#include <gelf.h>
#include <libelf.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define EVL_PS_LOOPS 64
#define EVL_PS_TASKS 100000
#define EVL_PS_TASK_READ 512            /* bytes of a task read at once */

/* The address of symbol `name` in ELF file `path` (st_value), or 0; *lo
 * the lowest PT_LOAD p_vaddr (page-aligned), *dyn whether it is ET_DYN. */
static uint64_t elf_symbol(const char *path, const char *name, uint64_t *lo, bool *dyn)
{
    uint64_t v = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    elf_version(EV_CURRENT);
    Elf *e = elf_begin(fd, ELF_C_READ, NULL);
    GElf_Ehdr eh;
    size_t nph = 0;
    if (!e || !gelf_getehdr(e, &eh) || elf_getphdrnum(e, &nph))
        goto out;
    *dyn = eh.e_type == ET_DYN;
    *lo = UINT64_MAX;
    for (size_t i = 0; i < nph; i++) {
        GElf_Phdr ph;
        if (gelf_getphdr(e, (int)i, &ph) && ph.p_type == PT_LOAD && ph.p_vaddr < *lo)
            *lo = ph.p_vaddr & ~(uint64_t)4095;
    }
    for (int pass = 0; pass < 2 && !v; pass++) {
        Elf_Scn *scn = NULL;
        while (!v && (scn = elf_nextscn(e, scn))) {
            GElf_Shdr sh;
            if (!gelf_getshdr(scn, &sh) ||
                sh.sh_type != (pass ? SHT_DYNSYM : SHT_SYMTAB) || !sh.sh_entsize)
                continue;
            Elf_Data *d = elf_getdata(scn, NULL);
            size_t n = d ? sh.sh_size / sh.sh_entsize : 0;
            for (size_t k = 0; k < n && !v; k++) {
                GElf_Sym sym;
                if (!gelf_getsym(d, (int)k, &sym) || GELF_ST_TYPE(sym.st_info) != STT_OBJECT ||
                    sym.st_size != sizeof(struct evl_debug))
                    continue;
                const char *s = elf_strptr(e, sh.sh_link, sym.st_name);
                if (s && !strcmp(s, name))
                    v = sym.st_value;
            }
        }
    }
out:
    if (e)
        elf_end(e);
    close(fd);
    return v;
}

/* Where evl_debug is in process pid, 0 if no mapped file has it: each
 * file's first mapping (offset 0) once, its symbol relocated by where the
 * file is mapped when it is ET_DYN. */
struct find_arg {
    pid_t pid;
    uint64_t addr;
    char last[PATH_MAX];
};

static int find_map(const struct ls_py_map *m, void *arg)
{
    struct find_arg *f = arg;
    if (m->path[0] != '/' || m->off != 0 || !strcmp(m->path, f->last))
        return 0;
    snprintf(f->last, sizeof f->last, "%s", m->path);
    char path[PATH_MAX + 32];
    if (ls_py_map_file(f->pid, m, path, sizeof path))
        return 0;
    uint64_t low = 0;
    bool dyn = false;
    uint64_t v = elf_symbol(path, "evl_debug", &low, &dyn);
    if (!v)
        return 0;
    f->addr = dyn ? m->start - low + v : v;
    return 1;
}

static uint64_t find_evl_debug(pid_t pid)
{
    struct find_arg f = { .pid = pid };
    ls_py_maps(pid, find_map, &f);
    return f.addr;
}

static uint64_t rd64(const uint8_t *b, uint32_t off, size_t len)
{
    uint64_t v = 0;
    if (off <= len - 8)
        memcpy(&v, b + off, 8);
    return v;
}

static uint32_t rd32(const uint8_t *b, uint32_t off, size_t len)
{
    uint32_t v = 0;
    if (off <= len - 4)
        memcpy(&v, b + off, 4);
    return v;
}

#define EVL_PS_STACK 65536             /* bytes of a task's stack copied */
#define EVL_PS_DEPTH 64

/* A suspended task's frames, from its saved stack pointer sp: the
 * registers evl__ctx_switch pushed (r15 r14 r13 r12 rbx rbp, then the
 * return address) give the state right after the switch returns; its
 * stack is copied from there (as far as it is mapped, page by page).
 * Frames outermost first into k; runtime: a system library's, or
 * libevl's own (evl_*). */
static void unwind(pid_t pid, ls_syms *syms, uint64_t sp, struct ps_task *k)
{
    uint64_t saved[7];
    if (!syms || !sp || ls_py_read(pid, saved, sizeof saved, sp))
        return;
    uint64_t regs[17] = { 0 };
    regs[15] = saved[0];                  /* r15 */
    regs[14] = saved[1];
    regs[13] = saved[2];
    regs[12] = saved[3];                  /* r12 */
    regs[3] = saved[4];                   /* rbx */
    regs[6] = saved[5];                   /* rbp */
    regs[16] = saved[6];                  /* rip: the return address */
    regs[7] = sp + sizeof saved;          /* rsp after the return */
    uint8_t *stack = malloc(EVL_PS_STACK);
    if (!stack)
        return;
    size_t len = 0;
    uint64_t from = regs[7];
    size_t head = 4096 - (from & 4095);
    while (len < EVL_PS_STACK) {
        size_t n = len ? 4096 : head;
        if (len + n > EVL_PS_STACK)
            n = EVL_PS_STACK - len;
        if (ls_py_read(pid, stack + len, n, from + len))
            break;
        len += n;
    }
    uint64_t pcs[EVL_PS_DEPTH];
    int n = len ? ls_syms_unwind(syms, pid, regs, stack, len, pcs, EVL_PS_DEPTH) : 0;
    free(stack);
    if (n <= 0)
        return;
    k->frames = calloc((size_t)n, sizeof *k->frames);
    if (!k->frames)
        return;
    for (int i = n; i-- > 0;) {           /* outermost first */
        const ls_sym *f = ls_syms_lookup(syms, pcs[i]);
        const char *fn = f && f->function ? f->function : "?";
        const char *mod = f && f->module ? f->module : "";
        bool rt = !strncmp(fn, "evl_", 4) || !strncmp(fn, "evl__", 5) || mod[0] == '[' ||
                  !strncmp(mod, "/usr/lib/", 9) || !strncmp(mod, "/lib/", 5);
        k->frames[k->nframes++] = (struct ps_frame){ ps_strdup(fn),
                                                     ps_strdup(f && f->file ? f->file : "?"),
                                                     f ? f->line : 0, rt };
    }
}

static int grow(struct ps_snap *s, size_t *cap)
{
    if (s->n < *cap)
        return 0;
    size_t nc = *cap ? 2 * *cap : 64;
    struct ps_task *t = realloc(s->t, nc * sizeof *t);
    if (!t)
        return -1;
    s->t = t;
    *cap = nc;
    return 0;
}

/* One walk of every loop's pending tasks into s; -1 when the loops list
 * changed meanwhile (or cannot be read). */
static int walk(pid_t pid, uint64_t at, const struct evl_debug *d, struct ps_snap *s, size_t *cap,
                ls_syms *syms)
{
    uint64_t loop = d->loops;
    size_t total = 0;
    for (int nl = 0; loop && nl < EVL_PS_LOOPS; nl++) {
        uint64_t tasks = 0, next = 0, current = 0;
        if (ls_py_read(pid, &tasks, 8, loop + d->loop_tasks) ||
            ls_py_read(pid, &next, 8, loop + d->loop_next) ||
            ls_py_read(pid, &current, 8, loop + d->loop_current))
            return -1;
        uint64_t t = tasks;
        for (; t && total < EVL_PS_TASKS; total++) {
            uint8_t b[EVL_PS_TASK_READ];
            if (ls_py_read(pid, b, sizeof b, t) && ls_py_read(pid, b, 256, t))
                break;
            if (rd64(b, d->task_loop, sizeof b) != loop)
                break;                /* not this loop's (the list changed) */
            if (grow(s, cap))
                return -2;
            struct ps_task *k = &s->t[s->n];
            memset(k, 0, sizeof *k);
            k->id = rd64(b, d->task_id, sizeof b);
            char name[64] = "";
            uint32_t nsz = d->task_name_size < sizeof name ? d->task_name_size : sizeof name - 1;
            if (d->task_name <= sizeof b - nsz)
                memcpy(name, b + d->task_name, nsz);
            name[nsz] = 0;
            char *nm = ps_strdup(name[0] ? name : "?");
            k->name = nm;
            uint8_t st = d->task_state < sizeof b ? b[d->task_state] : 0;
            k->state = t == current ? 2 : st == EVL_FINAL_SUSPENDED ? 3 : 1;
            k->cancels = (int)rd32(b, d->task_ncancels, sizeof b);
            if (k->state == 3) {
                k->reason = (int)rd32(b, d->task_reason, sizeof b);
                k->object = rd64(b, d->task_object, sizeof b);
                /* a lock's holder rides in the timeout argument */
                k->awaits[0] = 0;
                if (k->reason == EVL_SUSPEND_LOCK)
                    snprintf(k->awaits, sizeof k->awaits, "held by #%llu",
                             (unsigned long long)rd64(b, d->task_timeout, sizeof b));
            }
            if (k->state != 2)            /* the running one's sp is stale */
                unwind(pid, syms, rd64(b, d->task_sp, sizeof b), k);
            s->n++;
            t = rd64(b, d->task_next, sizeof b);
        }
        if (total >= EVL_PS_TASKS)
            s->flags |= PS_TRUNCATED;
        loop = next;
    }
    uint64_t gen = 0;
    if (ls_py_read(pid, &gen, 8, at + offsetof(struct evl_debug, generation)) ||
        gen != d->generation)
        return -1;
    return 0;
}

int ps_libevl(pid_t pid, struct ps_snap *s, char *why, size_t whylen)
{
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    uint64_t at = find_evl_debug(pid);
    if (!at) {
        snprintf(why, whylen, "not a libevl process");
        return PS_NOT_MINE;
    }
    struct evl_debug d;
    size_t cap = 0;
    int rc = -1;
    const char *fail = NULL;
    ls_syms *syms = ls_syms_new(pid);
    for (int attempt = 0; attempt < 5 && rc == -1 && !fail; attempt++) {
        if (ls_py_read(pid, &d, sizeof d, at))
            fail = errno == EPERM || errno == EACCES ? "permission" : "cannot read its evl_debug";
        else if (memcmp(d.magic, EVL_DEBUG_MAGIC, 8) || d.size != sizeof d ||
                 d.version != EVL_DEBUG_VERSION)
            fail = "its evl_debug is not a layout this loopscope reads";
        else if (!(d.generation & 1)) {   /* odd: a loop being made or freed */
            ps_snap_free(s);
            cap = 0;
            s->flags = 0;
            rc = walk(pid, at, &d, s, &cap, syms);
        }
    }
    ls_syms_free(syms);
    if (fail || rc < 0) {
        ps_snap_free(s);
        if (fail && !strcmp(fail, "permission"))
            return ps_fail("cannot read process %d: permission denied%s", (int)pid,
                           geteuid() ? " (not root: run as root, or as its user)" : "");
        return ps_fail("process %d: %s", (int)pid,
                       fail ? fail : rc == -2 ? "out of memory"
                                              : "its loops kept changing while read");
    }
    /* who holds each lock: what a lock waiter's suspend names */
    for (size_t i = 0; i < s->n; i++) {
        struct ps_task *w = &s->t[i];
        unsigned long long holder;
        if (w->state != 3 || w->reason != EVL_SUSPEND_LOCK ||
            sscanf(w->awaits, "held by #%llu", &holder) != 1)
            continue;
        for (size_t j = 0; j < s->n; j++)
            if (s->t[j].id == holder && s->t[j].nheld < 4)
                s->t[j].held[s->t[j].nheld++] = w->object;
        w->awaits[0] = 0;
    }
    s->pid = pid;
    snprintf(s->runtime, sizeof s->runtime, "libevl");
    s->version_key = "libevl";
    snprintf(s->version, sizeof s->version, "%u", d.version);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    s->dur_ns = (t1.tv_sec - t0.tv_sec) * 1000000000ll + (t1.tv_nsec - t0.tv_nsec);
    return PS_MINE;
}
