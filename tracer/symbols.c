/*
 * symbols.c -- symbolization with libdwfl (see symbols.h).  Results are
 * cached per address in an open-addressing table: task functions and call
 * sites repeat.
 */
#define _GNU_SOURCE
#include "symbols.h"

#include <dwarf.h>
#include <elfutils/libdw.h>
#include <elfutils/libdwfl.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define LS_SYM_CACHE 4096     /* slots, power of two */

struct ls_syms {
    Dwfl *dwfl;
    pid_t pid;
    int memfd;                /* /proc/PID/mem, for memory outside the copy */
    bool attached;            /* dwfl_attach_state done */
    /* the sample being unwound */
    pid_t tid;
    const uint64_t *regs;
    const uint8_t *stack;
    size_t stack_len;
    uint64_t *pcs;
    int npcs, max;
    struct { uint64_t addr; ls_sym sym; int used; } cache[LS_SYM_CACHE];
    size_t ncached;           /* used slots */
};

static const Dwfl_Callbacks ls_proc_callbacks = {
    .find_elf = dwfl_linux_proc_find_elf,
    .find_debuginfo = dwfl_standard_find_debuginfo,
};

static int ls_syms_report(ls_syms *s)
{
    dwfl_report_begin(s->dwfl);
    int rc = dwfl_linux_proc_report(s->dwfl, s->pid);
    dwfl_report_end(s->dwfl, NULL, NULL);
    return rc;
}

ls_syms *ls_syms_new(pid_t pid)
{
    ls_syms *s = calloc(1, sizeof(*s));
    if (!s)
        return NULL;
    s->pid = pid;
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/mem", (int)pid);
    s->memfd = open(path, O_RDONLY | O_CLOEXEC);
    s->dwfl = dwfl_begin(&ls_proc_callbacks);
    if (!s->dwfl || ls_syms_report(s) != 0) {
        ls_syms_free(s);
        return NULL;
    }
    return s;
}

void ls_syms_refresh(ls_syms *s)
{
    ls_syms_report(s);
}

static char *ls_dup(const char *p)
{
    return p ? strdup(p) : NULL;
}

static const char *ls_die_name(Dwarf_Die *die)
{
    Dwarf_Attribute a;
    return dwarf_formstring(dwarf_attr_integrate(die, DW_AT_name, &a));
}

/* The chain of frames inlined at addr, innermost first, ending with the
 * physical function (named by its ELF symbol). */
static ls_sym ls_resolve(ls_syms *s, uint64_t addr)
{
    ls_sym r = { 0 };
    Dwfl_Module *mod = dwfl_addrmodule(s->dwfl, addr);
    if (!mod)
        return r;
    const char *mname = dwfl_module_info(mod, NULL, NULL, NULL, NULL, NULL, NULL, NULL);
    GElf_Off off;
    GElf_Sym sym;
    const char *symname = dwfl_module_addrinfo(mod, addr, &off, &sym, NULL, NULL, NULL);
    r.module = ls_dup(mname);
    Dwfl_Line *line = dwfl_module_getsrc(mod, addr);
    if (line) {
        int lineno = 0;
        r.file = ls_dup(dwfl_lineinfo(line, NULL, &lineno, NULL, NULL, NULL));
        r.line = lineno;
    }
    ls_sym *cur = &r;
    Dwarf_Addr bias;
    Dwarf_Die *cu = dwfl_module_addrdie(mod, addr, &bias);
    Dwarf_Die *scopes = NULL;
    Dwarf_Files *files = NULL;
    size_t nfiles = 0;
    int n = cu ? dwarf_getscopes(cu, addr - bias, &scopes) : 0;
    if (n > 0) {
        /* As eu-addr2line -i does: re-derive the chain from the innermost
         * scope's DIE, so that nested inline instances are all visited. */
        Dwarf_Die inner;
        if (dwarf_offdie(dwarf_cu_getdwarf(cu->cu), dwarf_dieoffset(&scopes[0]), &inner)) {
            free(scopes);
            scopes = NULL;
            n = dwarf_getscopes_die(&inner, &scopes);
        }
    }
    if (cu)
        dwarf_getsrcfiles(cu, &files, &nfiles);
    for (int i = 0; i < n; i++) {
        int tag = dwarf_tag(&scopes[i]);
        if (tag == DW_TAG_subprogram)
            break;
        if (tag != DW_TAG_inlined_subroutine)
            continue;
        Dwarf_Attribute a;
        Dwarf_Word cfile = 0, cline = 0;
        dwarf_formudata(dwarf_attr(&scopes[i], DW_AT_call_file, &a), &cfile);
        dwarf_formudata(dwarf_attr(&scopes[i], DW_AT_call_line, &a), &cline);
        ls_sym *caller = calloc(1, sizeof(*caller));
        if (!caller)
            break;
        cur->function = ls_dup(ls_die_name(&scopes[i]));
        caller->module = ls_dup(mname);
        caller->file = files && cfile < nfiles ? ls_dup(dwarf_filesrc(files, cfile, NULL, NULL)) : NULL;
        caller->line = (int)cline;
        cur->inlined_into = caller;
        cur = caller;
    }
    free(scopes);
    cur->function = ls_dup(symname);
    return r;
}

static void ls_sym_release(ls_sym *r)
{
    free((char *)r->function);
    free((char *)r->file);
    free((char *)r->module);
    const ls_sym *c = r->inlined_into;
    while (c) {
        const ls_sym *next = c->inlined_into;
        free((char *)c->function);
        free((char *)c->file);
        free((char *)c->module);
        free((ls_sym *)c);
        c = next;
    }
}

/* Forget every cached symbol.  Nothing outside may hold a pointer into
 * the cache across lookups (symbols.h), so this is always safe. */
static void ls_cache_clear(ls_syms *s)
{
    for (size_t k = 0; k < LS_SYM_CACHE; k++) {
        if (s->cache[k].used)
            ls_sym_release(&s->cache[k].sym);
        s->cache[k].used = 0;
    }
    s->ncached = 0;
}

const ls_sym *ls_syms_lookup(ls_syms *s, uint64_t addr)
{
    size_t h = (size_t)((addr * 0x9E3779B97F4A7C15ull) >> 52) & (LS_SYM_CACHE - 1);
    size_t k = h;
    for (;; k = (k + 1) & (LS_SYM_CACHE - 1)) {
        if (!s->cache[k].used)
            break;
        if (s->cache[k].addr == addr)
            return &s->cache[k].sym;
    }
    /* Bounded memory and short probe sequences whatever addresses the
     * target makes us resolve: start over when three quarters full. */
    if (s->ncached >= LS_SYM_CACHE / 4 * 3) {
        ls_cache_clear(s);
        k = h;
    }
    s->cache[k].used = 1;
    s->cache[k].addr = addr;
    s->cache[k].sym = ls_resolve(s, addr);
    s->ncached++;
    return &s->cache[k].sym;
}

void ls_syms_free(ls_syms *s)
{
    if (!s)
        return;
    ls_cache_clear(s);
    if (s->dwfl)
        dwfl_end(s->dwfl);
    if (s->memfd >= 0)
        close(s->memfd);
    free(s);
}

/* ------------------------------------------------------------- unwinding */

static pid_t ls_next_thread(Dwfl *dwfl, void *arg, void **thread_argp)
{
    ls_syms *s = arg;
    if (*thread_argp)
        return 0;                     /* one thread: the sample's */
    *thread_argp = s;
    return s->tid;
}

static bool ls_get_thread(Dwfl *dwfl, pid_t tid, void *arg, void **thread_argp)
{
    ls_syms *s = arg;
    *thread_argp = s;
    return tid == s->tid;
}

/* Stack words come from the copy taken at the blocking point; anything
 * else (rarely needed: CFI lives in the ELF files) from the live process. */
static bool ls_memory_read(Dwfl *dwfl, Dwarf_Addr addr, Dwarf_Word *result, void *arg)
{
    ls_syms *s = arg;
    uint64_t sp = s->regs[7];
    if (addr >= sp && addr + sizeof(*result) <= sp + s->stack_len) {
        memcpy(result, s->stack + (addr - sp), sizeof(*result));
        return true;
    }
    /* The live stack has moved on since the copy: a frame beyond it would
     * unwind into garbage, so stop there instead. */
    if (addr >= sp && addr < sp + (8u << 20))
        return false;
    return s->memfd >= 0 && pread(s->memfd, result, sizeof(*result), (off_t)addr) == sizeof(*result);
}

static bool ls_set_initial_registers(Dwfl_Thread *thread, void *arg)
{
    ls_syms *s = arg;
    Dwarf_Word r[16];
    for (int i = 0; i < 16; i++)
        r[i] = s->regs[i];
    if (!dwfl_thread_state_registers(thread, 0, 16, r))
        return false;
    dwfl_thread_state_register_pc(thread, s->regs[16]);
    return true;
}

static const Dwfl_Thread_Callbacks ls_thread_callbacks = {
    .next_thread = ls_next_thread,
    .get_thread = ls_get_thread,
    .memory_read = ls_memory_read,
    .set_initial_registers = ls_set_initial_registers,
};

static int ls_frame_cb(Dwfl_Frame *frame, void *arg)
{
    ls_syms *s = arg;
    Dwarf_Addr pc;
    bool activation;
    if (!dwfl_frame_pc(frame, &pc, &activation))
        return DWARF_CB_ABORT;
    if (!activation && pc)
        pc--;                         /* inside the call instruction */
    if (pc == 0)
        return DWARF_CB_ABORT;
    s->pcs[s->npcs++] = pc;
    return s->npcs < s->max ? DWARF_CB_OK : DWARF_CB_ABORT;
}

int ls_syms_unwind(ls_syms *s, pid_t tid, const uint64_t regs[17], const uint8_t *stack,
                   size_t stack_len, uint64_t *pcs, int max)
{
    if (!s || max <= 0)
        return 0;
    if (!s->attached) {
        if (!dwfl_attach_state(s->dwfl, NULL, s->pid, &ls_thread_callbacks, s))
            return 0;
        s->attached = true;
    }
    s->tid = tid;
    s->regs = regs;
    s->stack = stack;
    s->stack_len = stack_len;
    s->pcs = pcs;
    s->npcs = 0;
    s->max = max;
    dwfl_getthread_frames(s->dwfl, tid, ls_frame_cb, s);
    if (s->npcs == 0) {               /* no CFI at all: the pc itself */
        pcs[0] = regs[16];
        s->npcs = 1;
    }
    return s->npcs;
}
