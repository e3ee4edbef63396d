/*
 * symbols.h -- address -> function, file:line for a live process, with
 * elfutils' libdwfl (DWARF line tables, ELF symbol tables), cached.
 */
#ifndef LOOPSCOPE_SYMBOLS_H
#define LOOPSCOPE_SYMBOLS_H

#include <stdint.h>
#include <sys/types.h>

typedef struct ls_syms ls_syms;

typedef struct ls_sym {
    const char *function;   /* NULL if unknown; owned by the cache (see lookup) */
    const char *file;       /* source file, NULL if no line info */
    int line;
    const char *module;     /* path of the ELF file holding addr */
    /* When addr is in code inlined into another function: the frame of that
     * caller, at the line of the inlined call (DWARF inlined_subroutine
     * call_file/call_line); NULL for the physical frame's function. */
    const struct ls_sym *inlined_into;
} ls_sym;

ls_syms *ls_syms_new(pid_t pid);
/* Resolve addr (an address in the process) to its innermost frame; follow
 * inlined_into for the callers it was inlined into.  Never fails: unknown
 * fields are NULL/0.  The result is owned by the cache and valid only
 * until the next lookup (which may empty the cache): use or copy it first. */
const ls_sym *ls_syms_lookup(ls_syms *s, uint64_t addr);
/* Unwind a user stack captured in BPF: regs in DWARF x86-64 order (rax
 * rdx rcx rbx rsi rdi rbp rsp r8..r15 rip), stack = a copy of memory from
 * regs[7] (rsp) upwards.  DWARF CFI (.eh_frame/.debug_frame), so frames of
 * code without frame pointers (Debian's libc) unwind too.  Fills pcs[]
 * innermost first (return addresses minus one, ready for lookup) and
 * returns the depth (0 if nothing could be unwound). */
int ls_syms_unwind(ls_syms *s, pid_t tid, const uint64_t regs[17], const uint8_t *stack,
                   size_t stack_len, uint64_t *pcs, int max);

/* Re-read the process's mappings (libraries loaded since). */
void ls_syms_refresh(ls_syms *s);
void ls_syms_free(ls_syms *s);

#endif
