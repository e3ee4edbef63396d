/* stapsdt.c -- see stapsdt.h.  Depends on libelf. */
#include "stapsdt.h"

#include <fcntl.h>
#include <gelf.h>
#include <libelf.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define NT_STAPSDT 3

struct priv {
    int fd;
    Elf *elf;
};

static int fail(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    return -1;
}

static uint64_t read_addr(const unsigned char *p, int is64, int big_endian)
{
    int n = is64 ? 8 : 4;
    uint64_t v = 0;
    for (int i = 0; i < n; i++) {
        int b = big_endian ? i : n - 1 - i;
        v = (v << 8) | p[b];
    }
    return v;
}

/* Copy the NUL-terminated string at *p (bounded by end); advance *p. */
static char *take_str(const char **p, const char *end)
{
    const char *z = memchr(*p, 0, (size_t)(end - *p));
    if (!z)
        return NULL;
    char *s = strdup(*p);
    *p = z + 1;
    return s;
}

int ls_sdt_open(const char *path, struct ls_sdt_file *f, char *err, size_t errlen)
{
    memset(f, 0, sizeof *f);
    if (elf_version(EV_CURRENT) == EV_NONE)
        return fail(err, errlen, "libelf: %s", elf_errmsg(-1));
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return fail(err, errlen, "%s: cannot open: %m", path);
    Elf *elf = elf_begin(fd, ELF_C_READ, NULL);
    if (!elf || elf_kind(elf) != ELF_K_ELF) {
        if (elf)
            elf_end(elf);
        close(fd);
        return fail(err, errlen, "%s: not an ELF file%s", path,
                    elf && elf_kind(elf) == ELF_K_AR ? " (an archive: check a linked binary)" : "");
    }
    struct priv *pv = calloc(1, sizeof *pv);
    if (!pv) {
        elf_end(elf);
        close(fd);
        return fail(err, errlen, "%s: out of memory", path);
    }
    pv->fd = fd;
    pv->elf = elf;
    f->priv = pv;

    GElf_Ehdr eh;
    if (!gelf_getehdr(elf, &eh))
        return fail(err, errlen, "%s: %s", path, elf_errmsg(-1));
    f->elf_type = eh.e_type;
    int is64 = eh.e_ident[EI_CLASS] == ELFCLASS64;
    int big = eh.e_ident[EI_DATA] == ELFDATA2MSB;
    size_t shstrndx;
    if (elf_getshdrstrndx(elf, &shstrndx) != 0)
        return fail(err, errlen, "%s: %s", path, elf_errmsg(-1));

    size_t cap = 0;
    for (Elf_Scn *scn = NULL; (scn = elf_nextscn(elf, scn));) {
        GElf_Shdr sh;
        if (!gelf_getshdr(scn, &sh) || sh.sh_type != SHT_NOTE)
            continue;
        const char *sname = elf_strptr(elf, shstrndx, sh.sh_name);
        if (!sname || strcmp(sname, ".note.stapsdt") != 0)
            continue;
        f->has_note_section = 1;
        Elf_Data *d = elf_getdata(scn, NULL);
        if (!d)
            return fail(err, errlen, "%s: .note.stapsdt: %s", path, elf_errmsg(-1));
        size_t off = 0, name_off, desc_off;
        GElf_Nhdr nh;
        while ((off = gelf_getnote(d, off, &nh, &name_off, &desc_off)) > 0) {
            const char *owner = (const char *)d->d_buf + name_off;
            if (nh.n_type != NT_STAPSDT || nh.n_namesz != sizeof "stapsdt" ||
                memcmp(owner, "stapsdt", sizeof "stapsdt") != 0)
                continue;
            const unsigned char *desc = (const unsigned char *)d->d_buf + desc_off;
            const char *end = (const char *)desc + nh.n_descsz;
            size_t asz = is64 ? 8 : 4;
            if (nh.n_descsz < 3 * asz + 3)
                return fail(err, errlen, "%s: truncated stapsdt note at offset %zu", path, off);
            struct ls_sdt_note n;
            n.pc = read_addr(desc, is64, big);
            n.base = read_addr(desc + asz, is64, big);
            n.sem = read_addr(desc + 2 * asz, is64, big);
            const char *p = (const char *)desc + 3 * asz;
            n.provider = take_str(&p, end);
            n.name = n.provider ? take_str(&p, end) : NULL;
            n.args = n.name ? take_str(&p, end) : NULL;
            if (!n.args) {
                free(n.provider);
                free(n.name);
                return fail(err, errlen, "%s: malformed stapsdt note (strings) near pc 0x%llx",
                            path, (unsigned long long)n.pc);
            }
            if (f->n == cap) {
                struct ls_sdt_note *a = realloc(f->notes, (cap ? 2 * cap : 32) * sizeof *a);
                if (!a) {
                    free(n.provider);
                    free(n.name);
                    free(n.args);
                    return fail(err, errlen, "%s: out of memory", path);
                }
                f->notes = a;
                cap = cap ? 2 * cap : 32;
            }
            f->notes[f->n++] = n;
        }
    }
    return 0;
}

void ls_sdt_close(struct ls_sdt_file *f)
{
    for (size_t i = 0; i < f->n; i++) {
        free(f->notes[i].provider);
        free(f->notes[i].name);
        free(f->notes[i].args);
    }
    free(f->notes);
    struct priv *pv = f->priv;
    if (pv) {
        elf_end(pv->elf);
        close(pv->fd);
        free(pv);
    }
    memset(f, 0, sizeof *f);
}

int ls_sdt_section_of(struct ls_sdt_file *f, uint64_t vaddr, const char **name,
                      uint64_t *flags, uint64_t *file_off, int *has_bits)
{
    struct priv *pv = f->priv;
    size_t shstrndx;
    if (elf_getshdrstrndx(pv->elf, &shstrndx) != 0)
        return -1;
    for (Elf_Scn *scn = NULL; (scn = elf_nextscn(pv->elf, scn));) {
        GElf_Shdr sh;
        if (!gelf_getshdr(scn, &sh) || !(sh.sh_flags & SHF_ALLOC))
            continue;
        if (vaddr < sh.sh_addr || vaddr >= sh.sh_addr + sh.sh_size)
            continue;
        *name = elf_strptr(pv->elf, shstrndx, sh.sh_name);
        *flags = sh.sh_flags;
        *has_bits = sh.sh_type != SHT_NOBITS;
        *file_off = sh.sh_offset + (vaddr - sh.sh_addr);
        return 0;
    }
    return -1;
}

int ls_sdt_symbol(struct ls_sdt_file *f, const char *sym, uint64_t *value)
{
    struct priv *pv = f->priv;
    int found_table = 0;
    for (int pass = 0; pass < 2; pass++) {
        Elf64_Word want = pass == 0 ? SHT_SYMTAB : SHT_DYNSYM;
        for (Elf_Scn *scn = NULL; (scn = elf_nextscn(pv->elf, scn));) {
            GElf_Shdr sh;
            if (!gelf_getshdr(scn, &sh) || sh.sh_type != want || sh.sh_entsize == 0)
                continue;
            found_table = 1;
            Elf_Data *d = elf_getdata(scn, NULL);
            size_t count = sh.sh_size / sh.sh_entsize;
            for (size_t i = 0; d && i < count; i++) {
                GElf_Sym s;
                if (!gelf_getsym(d, (int)i, &s))
                    continue;
                const char *nm = elf_strptr(pv->elf, sh.sh_link, s.st_name);
                if (nm && strcmp(nm, sym) == 0 && s.st_shndx != SHN_UNDEF) {
                    *value = s.st_value;
                    return 0;
                }
            }
        }
        if (found_table && pass == 0)
            return -1;            /* full symbol table, and it is not there */
    }
    return 1;                     /* stripped: cannot tell */
}

bool ls_sdt_has_provider(const char *path, const char *provider)
{
    struct ls_sdt_file f;
    char err[256];
    bool found = false;
    if (ls_sdt_open(path, &f, err, sizeof(err)) == 0)
        for (size_t i = 0; i < f.n && !found; i++)
            found = strcmp(f.notes[i].provider, provider) == 0;
    ls_sdt_close(&f);
    return found;
}
