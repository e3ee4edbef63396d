/*
 * symbols_dwarf.c -- part of symbols (symbols.h): ELF and DWARF lookups
 * with libdw and libdwfl (an address of a module -> its function, file,
 * line and the chain of inlined calls; file offsets to module addresses),
 * and unwinding a captured stack.  Depends on symbols_int.h, libdw,
 * libdwfl, libelf.
 *
 * Unwinding through JIT frames (JIT.md): libdwfl (elfutils >= 0.170,
 * x86_64 backend) already falls back to the frame-pointer chain for a pc
 * without CFI, in a module or not, and goes back to CFI once in a module
 * again (measured with node 20 and elfutils 0.188).  What it reads goes
 * through cb_memory_read, which reads the stack copy only: a hostile rbp
 * cannot make us read the live process, and sp strictly increases
 * (elfutils' check), depth is bounded by the caller.
 */
#define _GNU_SOURCE
#include "symbols_int.h"

#include <dwarf.h>
#include <elfutils/libdw.h>
#include <elfutils/libdwfl.h>
#include <gelf.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

static const char *die_name(Dwarf_Die *die)
{
    Dwarf_Attribute a;
    return dwarf_formstring(dwarf_attr_integrate(die, DW_AT_name, &a));
}

/* The name of the PLT stub at addr, "sym@plt" as gdb and perf write it:
 * no symbol covers .plt, so libdwfl names nothing there, and a CPU sample
 * lands in a stub often enough (a shared libpython calls its own exported
 * functions through them).  x86_64's layout: .plt is a header stub, then
 * one 16-byte stub per .rela.plt entry, in its order; with IBT the stubs
 * called are in .plt.sec, one per entry from its start.  Read from the
 * module's ELF, as untrusted as its other contents: every index is
 * checked by libelf (gelf_getrela, gelf_getsym, elf_strptr). */
static bool plt_name(Dwfl_Module *mod, uint64_t addr, char *out, size_t len)
{
    GElf_Addr bias;
    Elf *elf = dwfl_module_getelf(mod, &bias);
    size_t shstrndx;
    if (!elf || elf_getshdrstrndx(elf, &shstrndx) != 0)
        return false;
    uint64_t a = addr - bias;
    Elf_Scn *rela = NULL;
    int64_t index = -1;
    for (Elf_Scn *scn = NULL; (scn = elf_nextscn(elf, scn));) {
        GElf_Shdr sh;
        const char *name = gelf_getshdr(scn, &sh) ? elf_strptr(elf, shstrndx, sh.sh_name) : NULL;
        if (!name)
            continue;
        if (sh.sh_type == SHT_RELA && strcmp(name, ".rela.plt") == 0)
            rela = scn;
        else if (sh.sh_flags & SHF_EXECINSTR && a >= sh.sh_addr && a - sh.sh_addr < sh.sh_size) {
            if (strcmp(name, ".plt") == 0 && a - sh.sh_addr >= 16)
                index = (int64_t)((a - sh.sh_addr) / 16 - 1);
            else if (strcmp(name, ".plt.sec") == 0)
                index = (int64_t)((a - sh.sh_addr) / 16);
        }
    }
    GElf_Shdr rsh, ssh;
    GElf_Rela rel;
    GElf_Sym sym;
    Elf_Scn *symtab;
    if (index < 0 || index > INT_MAX || !rela || !gelf_getshdr(rela, &rsh) ||
        !gelf_getrela(elf_getdata(rela, NULL), (int)index, &rel) ||
        !(symtab = elf_getscn(elf, rsh.sh_link)) || !gelf_getshdr(symtab, &ssh) ||
        GELF_R_SYM(rel.r_info) > INT_MAX ||
        !gelf_getsym(elf_getdata(symtab, NULL), (int)GELF_R_SYM(rel.r_info), &sym))
        return false;
    const char *name = elf_strptr(elf, ssh.sh_link, sym.st_name);
    if (!name || !*name)
        return false;
    snprintf(out, len, "%s@plt", name);
    return true;
}

/* The chain of frames inlined at addr, innermost first, ending with the
 * physical function (named by its ELF symbol, or as a PLT stub).  addr is
 * the module's address (the process's, except for remapped code). */
ls_sym ls_resolve_mod(Dwfl_Module *mod, uint64_t addr)
{
    ls_sym r = { 0 };
    const char *mname = dwfl_module_info(mod, NULL, NULL, NULL, NULL, NULL, NULL, NULL);
    GElf_Off off;
    GElf_Sym sym;
    const char *symname = dwfl_module_addrinfo(mod, addr, &off, &sym, NULL, NULL, NULL);
    char plt[256];
    if (!symname && plt_name(mod, addr, plt, sizeof(plt)))
        symname = plt;
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
        cur->function = ls_dup(die_name(&scopes[i]));
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

/* The module address of file offset off of mod's ELF, through its
 * PT_LOAD segments. */
bool ls_mod_addr(Dwfl_Module *mod, uint64_t off, uint64_t *maddr)
{
    GElf_Addr bias;
    Elf *elf = dwfl_module_getelf(mod, &bias);
    size_t n;
    if (!elf || elf_getphdrnum(elf, &n) != 0)
        return false;
    for (size_t i = 0; i < n; i++) {
        GElf_Phdr ph;
        if (gelf_getphdr(elf, (int)i, &ph) && ph.p_type == PT_LOAD && off >= ph.p_offset &&
            off - ph.p_offset < ph.p_filesz) {
            *maddr = off - ph.p_offset + ph.p_vaddr + bias;
            return true;
        }
    }
    return false;
}

/* Whether addr is inside one of mod's PT_LOAD segments (libdwfl's module
 * span also covers the gaps between them). */
bool ls_mod_contains(Dwfl_Module *mod, uint64_t addr)
{
    GElf_Addr bias;
    Elf *elf = dwfl_module_getelf(mod, &bias);
    size_t n;
    if (!elf || elf_getphdrnum(elf, &n) != 0)
        return false;
    for (size_t i = 0; i < n; i++) {
        GElf_Phdr ph;
        if (gelf_getphdr(elf, (int)i, &ph) && ph.p_type == PT_LOAD && addr - bias >= ph.p_vaddr &&
            addr - bias - ph.p_vaddr < ph.p_memsz)
            return true;
    }
    return false;
}

int ls_mod_by_name_cb(Dwfl_Module *mod, void **user, const char *name, Dwarf_Addr start,
                      void *arg)
{
    (void)user, (void)start;
    struct ls_mod_find *f = arg;
    if (name && strcmp(name, f->name) == 0) {
        f->mod = mod;
        return DWARF_CB_ABORT;
    }
    return DWARF_CB_OK;
}

/* ------------------------------------------------------------- unwinding */

static pid_t cb_next_thread(Dwfl *dwfl, void *arg, void **thread_argp)
{
    ls_syms *s = arg;
    if (*thread_argp)
        return 0;                     /* one thread: the sample's */
    *thread_argp = s;
    return s->tid;
}

static bool cb_get_thread(Dwfl *dwfl, pid_t tid, void *arg, void **thread_argp)
{
    ls_syms *s = arg;
    *thread_argp = s;
    return tid == s->tid;
}

/* Every word the unwinder reads (CFI rules, and the frame-pointer chain
 * libdwfl follows where there is no CFI: saved rbp at [rbp], return address
 * at [rbp+8]) comes from the copy taken at the blocking point, never from
 * the live process: the live stack has moved on (a frame beyond the copy
 * would unwind into garbage), and a hostile rbp must not make us read the
 * target's memory anywhere. */
static bool cb_memory_read(Dwfl *dwfl, Dwarf_Addr addr, Dwarf_Word *result, void *arg)
{
    (void)dwfl;
    ls_syms *s = arg;
    uint64_t sp = s->regs[7];
    if (!s->stack || addr < sp || addr - sp > s->stack_len ||
        s->stack_len - (addr - sp) < sizeof(*result))
        return false;
    memcpy(result, s->stack + (addr - sp), sizeof(*result));
    return true;
}

/* All 17 of x86_64's DWARF registers, rip (16, the return address column)
 * included, as elfutils' own x86_64_initreg hands them over: CFI may read
 * rip, and the linker's for a PLT stub does (its CFA is rsp + 8, or + 16
 * after the stub's push, by rip's offset in the stub).  Without it an
 * on-CPU sample in a stub unwound to that one frame. */
static bool cb_set_initial_registers(Dwfl_Thread *thread, void *arg)
{
    ls_syms *s = arg;
    Dwarf_Word r[17];
    for (int i = 0; i < 17; i++)
        r[i] = s->regs[i];
    if (!dwfl_thread_state_registers(thread, 0, 17, r))
        return false;
    dwfl_thread_state_register_pc(thread, s->regs[16]);
    return true;
}

static const Dwfl_Thread_Callbacks ls_thread_callbacks = {
    .next_thread = cb_next_thread,
    .get_thread = cb_get_thread,
    .memory_read = cb_memory_read,
    .set_initial_registers = cb_set_initial_registers,
};

static int frame_cb(Dwfl_Frame *frame, void *arg)
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

static int unwind(ls_syms *s, pid_t tid, const uint64_t regs[17], const uint8_t *stack,
                  size_t stack_len, uint64_t *pcs, int max)
{
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
    dwfl_getthread_frames(s->dwfl, tid, frame_cb, s);
    if (s->npcs == 0) {               /* no CFI at all: the pc itself */
        pcs[0] = regs[16];
        s->npcs = 1;
    }
    return s->npcs;
}

int ls_syms_unwind(ls_syms *s, pid_t tid, const uint64_t regs[17], const uint8_t *stack,
                   size_t stack_len, uint64_t *pcs, int max)
{
    if (!s || max <= 0)
        return 0;
    pthread_mutex_lock(&s->mu);
    ls_syms *prev = ls_cur;
    ls_cur = s;
    int n = unwind(s, tid, regs, stack, stack_len, pcs, max);
    ls_cur = prev;
    pthread_mutex_unlock(&s->mu);
    return n;
}
