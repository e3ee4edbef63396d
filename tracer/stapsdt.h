/*
 * stapsdt.h -- read the SystemTap SDT notes (.note.stapsdt, the USDT
 * probes) of an ELF file with libelf.  The one reader: the recorder finds
 * the file holding the evl probes with it (tracer/target.c), the probe
 * checks of tests/probes (probe_note_check, probe_sem_read) check them.
 * Depends on libelf only.
 */
#ifndef LOOPSCOPE_STAPSDT_H
#define LOOPSCOPE_STAPSDT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct ls_sdt_note {
    uint64_t pc, base, sem;    /* link-time addresses, as in the note */
    char *provider, *name, *args;
};

struct ls_sdt_file {
    struct ls_sdt_note *notes;
    size_t n;
    int elf_type;              /* ET_EXEC, ET_DYN, ... */
    int has_note_section;
    void *priv;                /* libelf handle + fd */
};

/* Open path and collect its stapsdt notes.  Returns 0, or -1 with a message
 * in err (errlen bytes). */
int ls_sdt_open(const char *path, struct ls_sdt_file *f, char *err, size_t errlen);
void ls_sdt_close(struct ls_sdt_file *f);

/* The name of the allocated section that contains vaddr, its flags, and the
 * file offset of vaddr (if the section has file contents).  Returns 0, or
 * -1 if no section contains it. */
int ls_sdt_section_of(struct ls_sdt_file *f, uint64_t vaddr, const char **name,
                      uint64_t *flags, uint64_t *file_off, int *has_bits);

/* The value of symbol `sym` in .symtab (else .dynsym).  Returns 0; -1 if
 * there is a .symtab without it; 1 if stripped and not in .dynsym. */
int ls_sdt_symbol(struct ls_sdt_file *f, const char *sym, uint64_t *value);

/* Does the ELF file at path carry a note of provider `provider`?  false
 * if it cannot be read or its notes are malformed. */
bool ls_sdt_has_provider(const char *path, const char *provider);

#endif
