/*
 * symbols.h -- address -> function, file:line for a live process, with
 * elfutils' libdwfl (DWARF line tables, ELF symbol tables), cached.
 */
#ifndef LOOPSCOPE_SYMBOLS_H
#define LOOPSCOPE_SYMBOLS_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

typedef struct ls_syms ls_syms;

typedef struct ls_sym {
    const char *function;   /* NULL if unknown; owned by the cache (see lookup) */
    const char *file;       /* source file, NULL if no line info */
    int line;
    const char *module;     /* path of the ELF file holding addr; "[jit]" for
                             * code named from the perf map, "[anon]" for
                             * anonymous executable memory it does not name */
    /* When addr is in code inlined into another function: the frame of that
     * caller, at the line of the inlined call (DWARF inlined_subroutine
     * call_file/call_line); NULL for the physical frame's function. */
    const struct ls_sym *inlined_into;
} ls_sym;

ls_syms *ls_syms_new(pid_t pid);
/* Resolve addr (an address in the process) to its innermost frame; follow
 * inlined_into for the callers it was inlined into.  Never fails: unknown
 * fields are NULL/0.  The result is owned by the cache and valid only
 * until the next lookup (which may empty the cache): use or copy it first.
 * Addresses in anonymous executable memory (JIT code) are named from the
 * process's perf map (/tmp/perf-PID.map, node --perf-basic-prof): for a
 * JS function, function = its name, file:line = where it is defined
 * (its first line, not the line running); see tracer/JIT.md. */
const ls_sym *ls_syms_lookup(ls_syms *s, uint64_t addr);
/* Unwind a user stack captured in BPF: regs in DWARF x86-64 order (rax
 * rdx rcx rbx rsi rdi rbp rsp r8..r15 rip), stack = a copy of memory from
 * regs[7] (rsp) upwards.  DWARF CFI (.eh_frame/.debug_frame), so frames of
 * code without frame pointers (Debian's libc) unwind too; where there is
 * no CFI (JIT code, V8's builtins) libdwfl follows the frame-pointer chain,
 * inside the copy only.  Fills pcs[]
 * innermost first (return addresses minus one, ready for lookup) and
 * returns the depth (0 if nothing could be unwound). */
int ls_syms_unwind(ls_syms *s, pid_t tid, const uint64_t regs[17], const uint8_t *stack,
                   size_t stack_len, uint64_t *pcs, int max);

/* JIT code naming, for the recorder's hint.  Whether the process's perf map
 * could be opened (tried at the first call and at the first JIT address,
 * again at most once a second while missing): */
bool ls_syms_has_perfmap(ls_syms *s);
/* One line saying what was found: "perf map PATH: N entries (M lines
 * skipped)", "no perf map (PATH)" or "perf map PATH refused: WHY"; valid
 * until the next call in this thread. */
const char *ls_syms_perfmap_status(ls_syms *s);
/* JS frames seen (lookups, i.e. cache misses, of addresses in anonymous
 * executable memory and in V8's Builtins_InterpreterEntryTrampoline), and
 * how many of them got no JS name (not in the perf map, or interpreted
 * without --interpreted-frames-native-stack).  Unnamed ones seen: time for
 * the hint ("start node with --perf-basic-prof
 * --interpreted-frames-native-stack to name JS frames"). */
uint64_t ls_syms_jit_frames(ls_syms *s, uint64_t *unnamed);
/* Read the perf map from path instead (tests; a map kept elsewhere).  It
 * must be a regular file owned by the caller.  0 if opened. */
int ls_syms_set_perfmap(ls_syms *s, const char *path);

/* Keep the view up to date while the process lives, from a thread of
 * normal priority (the recorder's may be starved for seconds on a busy
 * machine): what it maps (/proc/PID/maps) and the ELF file of each
 * executable mapping, opened through /proc/PID/map_files and held, taken
 * again when its executable memory changes (exec, dlopen; looked at every
 * 2 ms for its first second and after each change, then every 50 ms), so
 * a process that exits before its addresses are looked up still gets
 * every name.  ls_syms_new takes it once; a lookup outside every known
 * mapping reads the maps again while the process lives.  0 if started. */
int ls_syms_watch(ls_syms *s);
/* Take the view now (if the process still lives). */
void ls_syms_refresh(ls_syms *s);
/* How many times the view was made (1 at ls_syms_new, then once per
 * change of the files mapped). */
uint64_t ls_syms_refreshes(ls_syms *s);

void ls_syms_free(ls_syms *s);

#endif
