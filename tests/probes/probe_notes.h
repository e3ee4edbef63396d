/*
 * probe_notes.h -- read the SystemTap SDT notes (.note.stapsdt) of an ELF
 * file with libelf.  Shared by probe_note_check and probe_sem_read.
 */
#ifndef PROBE_NOTES_H
#define PROBE_NOTES_H

#include <stddef.h>
#include <stdint.h>

struct sdt_note {
    uint64_t pc, base, sem;    /* link-time addresses, as in the note */
    char *provider, *name, *args;
};

struct sdt_file {
    struct sdt_note *notes;
    size_t n;
    int elf_type;              /* ET_EXEC, ET_DYN, ... */
    int has_note_section;
    void *priv;                /* libelf handle + fd */
};

/* Open path and collect its stapsdt notes.  Returns 0, or -1 with a message
 * in err (errlen bytes). */
int sdt_open(const char *path, struct sdt_file *f, char *err, size_t errlen);
void sdt_close(struct sdt_file *f);

/* The name of the allocated section that contains vaddr, its flags, and the
 * file offset of vaddr (if the section has file contents).  Returns 0, or
 * -1 if no section contains it. */
int sdt_section_of(struct sdt_file *f, uint64_t vaddr, const char **name,
                   uint64_t *flags, uint64_t *file_off, int *has_bits);

/* The value of symbol `sym` in .symtab (else .dynsym).  Returns 0; -1 if
 * there is a .symtab without it; 1 if stripped and not in .dynsym. */
int sdt_symbol(struct sdt_file *f, const char *sym, uint64_t *value);

#endif
