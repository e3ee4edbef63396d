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
    const char *function;   /* NULL if unknown; owned by the cache */
    const char *file;       /* source file, NULL if no line info */
    int line;
    const char *module;     /* path of the ELF file holding addr */
} ls_sym;

ls_syms *ls_syms_new(pid_t pid);
/* Resolve addr (an address in the process).  Never fails: unknown fields
 * are NULL/0.  The strings live as long as the ls_syms. */
ls_sym ls_syms_lookup(ls_syms *s, uint64_t addr);
/* Re-read the process's mappings (libraries loaded since). */
void ls_syms_refresh(ls_syms *s);
void ls_syms_free(ls_syms *s);

#endif
