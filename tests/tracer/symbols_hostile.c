/*
 * symbols_hostile.c -- tracer/symbols.c on hostile input, in-process (no
 * root, no BPF):
 *
 *     symbols_hostile perfmap   the perf map parser: garbage lines, huge
 *                               sizes, overlaps (later wins), no trailing
 *                               newline, escape bytes, NUL, long lines,
 *                               JS name splitting, files refused
 *     symbols_hostile limits    1M entries, 64 MiB read at most, then "read
 *                               limit reached"
 *     symbols_hostile unwind    frame-pointer unwinding through code with
 *                               no module on a forged stack copy: loops,
 *                               rbp outside the copy, decreasing chains
 *     symbols_hostile plt       a sample in a PLT stub of this program
 *                               unwinds to its caller (the stub's CFA is a
 *                               DWARF expression of rsp and rip); stubs
 *                               are named sym@plt
 *
 * Addresses used (0x1000_0000_0000...) are in no mapping of this process,
 * so they are looked up in the perf map.  Exit 0 pass, 1 fail.
 */
#define _GNU_SOURCE
#include "symbols.h"

#include <fcntl.h>
#include <gelf.h>
#include <link.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int failures;
static char dir[] = "/tmp/lstest-symbolsXXXXXX";

#define CHECK(c, ...)                                                     \
    do {                                                                  \
        if (!(c)) {                                                       \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);          \
            fprintf(stderr, __VA_ARGS__);                                 \
            fputc('\n', stderr);                                          \
            failures++;                                                   \
        }                                                                 \
    } while (0)

static const char *nn(const char *s)
{
    return s ? s : "(null)";
}

static void streq(const char *got, const char *want, const char *what, uint64_t addr)
{
    if (!got != !want || (got && strcmp(got, want) != 0)) {
        fprintf(stderr, "FAIL 0x%llx %s: expected %s, got %s\n", (unsigned long long)addr, what,
                nn(want), nn(got));
        failures++;
    }
}

/* Expect addr to be named fn (NULL: not named), file:line, module. */
static void expect(ls_syms *s, uint64_t addr, const char *fn, const char *file, int line)
{
    const ls_sym *f = ls_syms_lookup(s, addr);
    streq(f->function, fn, "function", addr);
    streq(f->file, file, "file", addr);
    CHECK(f->line == line, "0x%llx line: expected %d, got %d", (unsigned long long)addr, line,
          f->line);
    streq(f->module, fn ? "[jit]" : NULL, "module", addr);
    CHECK(!f->inlined_into, "0x%llx: inlined_into set", (unsigned long long)addr);
}

static void put(const char *path, const char *mode, const void *data, size_t len)
{
    FILE *f = fopen(path, mode);
    if (!f || fwrite(data, 1, len, f) != len || fclose(f) != 0) {
        perror(path);
        exit(1);
    }
}

static void puts_(const char *path, const char *mode, const char *fmt, ...)
{
    char buf[1 << 16];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    put(path, mode, buf, (size_t)n);
}

#define B 0x100000000000ull

static int t_perfmap(void)
{
    char path[256];
    snprintf(path, sizeof(path), "%s/perf-1.map", dir);
    ls_syms *s = ls_syms_new(getpid());
    CHECK(s, "ls_syms_new");
    if (!s)
        return 1;

    /* missing */
    CHECK(ls_syms_set_perfmap(s, path) != 0, "a missing map opened");
    CHECK(!ls_syms_has_perfmap(s), "missing map: has_perfmap");
    CHECK(strstr(ls_syms_perfmap_status(s), "no perf map"), "status: %s",
          ls_syms_perfmap_status(s));
    expect(s, B, NULL, NULL, 0);

    puts_(path, "w",
          "100000000000 100 JS:*handler /path/app.js:12:20\n"
          "100000000100 80 LazyCompile:~old /srv/a b/x.js:7:1\n"
          "100000000200 80 Function:^f node:internal/fs/utils:345:12\n"
          "100000000300 80 JS:~ /x.js:3:1\n"
          "100000000400 80 JS:+get foo /y.js:9:2\n"
          "100000000500 80 Builtin:ArrayForEach\n"
          "100000000600 80 JS:*noline /z.js\n"
          "100000000700 80 JS:*big /z.js:99999999999:1\n"
          "100000000800 80 JS:*esm file:///app/m.mjs:4:5\n"
          "0x100000000900 0x80 hexprefix\n"
          /* garbage, all skipped */
          "zzzz\n"
          "\n"
          " 100000000a00 10 leadingspace\n"
          "100000000a00 10\n"
          "100000000a00 10 \n"
          "100000000a00  10 twospaces\n"
          "100000000a00\t10 tab\n"
          "100000000a00 0 zerosize\n"
          "100000000a00 g0 badhex\n"
          "10000000000000000 10 seventeendigits\n"
          "100000000a00 ffffffffffffffff hugesize\n"
          "100000000a00 10000001 over256mib\n"
          "ffff800000000000 10 kernel\n"
          "7ffffffffff0 20 crossesend\n"
          "0 10 null\n"
          "-100000000a00 10 negative\n");
    CHECK(ls_syms_set_perfmap(s, path) == 0, "set_perfmap");
    CHECK(ls_syms_has_perfmap(s), "has_perfmap");
    expect(s, B + 0x00, "handler", "/path/app.js", 12);
    expect(s, B + 0xff, "handler", "/path/app.js", 12);
    expect(s, B + 0x100, "old", "/srv/a b/x.js", 7);
    expect(s, B + 0x17f, "old", "/srv/a b/x.js", 7);
    expect(s, B + 0x180, NULL, NULL, 0);                 /* gap */
    expect(s, B + 0x200, "f", "node:internal/fs/utils", 345);
    expect(s, B + 0x300, "(anonymous)", "/x.js", 3);
    expect(s, B + 0x400, "get foo", "/y.js", 9);
    expect(s, B + 0x500, "Builtin:ArrayForEach", NULL, 0);
    expect(s, B + 0x600, "JS:*noline /z.js", NULL, 0);
    expect(s, B + 0x700, "JS:*big /z.js:99999999999:1", NULL, 0);
    expect(s, B + 0x800, "esm", "file:///app/m.mjs", 4);
    expect(s, B + 0x900, "hexprefix", NULL, 0);
    expect(s, B + 0xa00, NULL, NULL, 0);
    expect(s, 0x7ffffffffff8ull, NULL, NULL, 0);
    const char *st = ls_syms_perfmap_status(s);
    CHECK(strstr(st, ": 10 entries (16 lines skipped)"), "status: %s", st);

    /* appended: overlaps, later lines win; re-read when not found */
    puts_(path, "a",
          "100000010000 1000 outer-old\n"
          "100000010800 100 inner-new\n"
          "100000011000 1000 second\n"
          "100000010f00 200 straddle\n");
    expect(s, B + 0x10000, "outer-old", NULL, 0);
    expect(s, B + 0x107ff, "outer-old", NULL, 0);
    expect(s, B + 0x10800, "inner-new", NULL, 0);
    expect(s, B + 0x108ff, "inner-new", NULL, 0);
    expect(s, B + 0x10900, "outer-old", NULL, 0);
    expect(s, B + 0x10eff, "outer-old", NULL, 0);
    expect(s, B + 0x10f00, "straddle", NULL, 0);
    expect(s, B + 0x110ff, "straddle", NULL, 0);
    expect(s, B + 0x11100, "second", NULL, 0);
    /* code moved: a new entry over all of them, in a later read; the
     * cached names are replaced */
    puts_(path, "a", "10000000ff00 2100 everything\n");
    expect(s, B + 0x10000, "everything", NULL, 0);
    expect(s, B + 0x10850, "everything", NULL, 0);
    expect(s, B + 0x11100, "everything", NULL, 0);
    expect(s, B + 0x11fff, "everything", NULL, 0);
    expect(s, B + 0x12000, NULL, NULL, 0);
    expect(s, B + 0xff00, "everything", NULL, 0);
    expect(s, B + 0x00, "handler", "/path/app.js", 12);  /* untouched */

    /* no trailing newline: the line is not used until it is complete */
    puts_(path, "a", "100000020000 10 JS:*partial /p.js:1");
    expect(s, B + 0x20000, NULL, NULL, 0);
    puts_(path, "a", "2:3\n");  /* the rest of that line */
    expect(s, B + 0x20000, "partial", "/p.js", 12);

    /* escape bytes replaced; a NUL makes the line malformed */
    puts_(path, "a", "100000030000 10 JS:*\x1b[31mred\x07 /e\x7f.js:5:1\n");
    put(path, "a", "100000030100 10 nul\0byte\n", 25);
    puts_(path, "a", "100000030200 10 caf\xc3\xa9 \xff\xfe raw\r\n");
    expect(s, B + 0x30000, "?[31mred?", "/e?.js", 5);
    expect(s, B + 0x30100, NULL, NULL, 0);
    expect(s, B + 0x30200, "caf\xc3\xa9 \xff\xfe raw?", NULL, 0);

    /* a name of 10000 bytes: cut to 4095; the line after it is read */
    static char big[12000];
    int n = snprintf(big, sizeof(big), "100000040000 10 ");
    memset(big + n, 'N', 10000);
    n += 10000;
    n += snprintf(big + n, sizeof(big) - (size_t)n, "\n100000040100 10 after\n");
    put(path, "a", big, (size_t)n);
    const ls_sym *f = ls_syms_lookup(s, B + 0x40000);
    CHECK(f->function && strlen(f->function) == 4095 && f->function[4094] == 'N',
          "long name: %zu bytes", f->function ? strlen(f->function) : 0);
    expect(s, B + 0x40100, "after", NULL, 0);

    /* refused: a symlink, a fifo (must not block), a directory */
    char lnk[300], fifo[300];
    snprintf(lnk, sizeof(lnk), "%s/link.map", dir);
    snprintf(fifo, sizeof(fifo), "%s/fifo.map", dir);
    CHECK(symlink(path, lnk) == 0, "symlink");
    CHECK(mkfifo(fifo, 0600) == 0, "mkfifo");
    CHECK(ls_syms_set_perfmap(s, lnk) != 0, "a symlink was followed");
    CHECK(strstr(ls_syms_perfmap_status(s), "refused"), "symlink: %s", ls_syms_perfmap_status(s));
    CHECK(ls_syms_set_perfmap(s, fifo) != 0, "a fifo was opened");
    CHECK(strstr(ls_syms_perfmap_status(s), "not a regular file"), "fifo: %s",
          ls_syms_perfmap_status(s));
    CHECK(ls_syms_set_perfmap(s, dir) != 0, "a directory was opened");
    expect(s, B, NULL, NULL, 0);
    ls_syms_free(s);
    return failures != 0;
}

static int t_limits(void)
{
    char path[256];
    snprintf(path, sizeof(path), "%s/perf-2.map", dir);
    FILE *fp = fopen(path, "w");
    if (!fp)
        return 1;
    /* 1M + 10 entries, 16 bytes apart, the last ones after the limit */
    for (unsigned i = 0; i < 1000010; i++)
        fprintf(fp, "%llx 10 e%u\n", (unsigned long long)(B + 16ull * i), i);
    fclose(fp);
    ls_syms *s = ls_syms_new(getpid());
    CHECK(s && ls_syms_set_perfmap(s, path) == 0, "open");
    if (!s)
        return 1;
    expect(s, B, "e0", NULL, 0);
    expect(s, B + 16ull * 999999, "e999999", NULL, 0);
    expect(s, B + 16ull * 1000000, NULL, NULL, 0);
    const char *st = ls_syms_perfmap_status(s);
    CHECK(strstr(st, "1000000 entries") && strstr(st, "read limit reached"), "status: %s", st);
    ls_syms_free(s);

    /* 64 MiB read at most: 17000 lines of 4 KiB, the last ones not read */
    fp = fopen(path, "w");
    if (!fp)
        return 1;
    static char name[4001];
    memset(name, 'n', 4000);
    for (unsigned i = 0; i < 17000; i++)
        fprintf(fp, "%llx 10 %u%s\n", (unsigned long long)(B + 16ull * i), i, name);
    fclose(fp);
    s = ls_syms_new(getpid());
    CHECK(s && ls_syms_set_perfmap(s, path) == 0, "open");
    if (!s)
        return 1;
    const ls_sym *f = ls_syms_lookup(s, B);
    CHECK(f->function && strncmp(f->function, "0nnn", 4) == 0, "first of the big names");
    f = ls_syms_lookup(s, B + 16ull * 16999);
    CHECK(!f->function, "a line beyond 64 MiB was read");
    st = ls_syms_perfmap_status(s);
    CHECK(strstr(st, "read limit reached"), "status: %s", st);
    ls_syms_free(s);
    return failures != 0;
}

/* A forged sample: pc in no module, rbp chain in the copy. */
static int unwind(ls_syms *s, uint64_t rip, uint64_t rbp, const uint64_t *words, size_t nwords,
                  uint64_t *pcs, int max)
{
    uint64_t regs[17] = { 0 };
    regs[6] = rbp;
    regs[7] = 0x7f0000000000ull;    /* sp: the copy starts here */
    regs[16] = rip;
    return ls_syms_unwind(s, getpid(), regs, (const uint8_t *)words, nwords * 8, pcs, max);
}

static int t_unwind(void)
{
    ls_syms *s = ls_syms_new(getpid());
    if (!s)
        return 1;
    const uint64_t sp = 0x7f0000000000ull;
    uint64_t pcs[64];
    uint64_t w[64] = { 0 };
    /* a good chain: frames at sp+0x20, sp+0x60, sp+0xa0 */
    w[4] = sp + 0x60, w[5] = B + 0x111;
    w[12] = sp + 0xa0, w[13] = B + 0x222;
    w[20] = 0, w[21] = B + 0x333;
    int n = unwind(s, B + 0x10, sp + 0x20, w, 64, pcs, 64);
    CHECK(n == 4 && pcs[0] == B + 0x10 && pcs[1] == B + 0x110 && pcs[2] == B + 0x221 &&
              pcs[3] == B + 0x332,
          "chain: %d frames", n);
    /* the depth bound */
    n = unwind(s, B + 0x10, sp + 0x20, w, 64, pcs, 2);
    CHECK(n == 2, "max 2: %d frames", n);
    /* a loop: [rbp] = rbp */
    memset(w, 0, sizeof(w));
    w[4] = sp + 0x20, w[5] = B + 0x111;
    n = unwind(s, B + 0x10, sp + 0x20, w, 64, pcs, 64);
    CHECK(n >= 1 && n <= 3, "loop: %d frames", n);
    /* going down the stack */
    memset(w, 0, sizeof(w));
    w[8] = sp + 0x10, w[9] = B + 0x111;
    w[2] = sp + 0x40, w[3] = B + 0x222;
    n = unwind(s, B + 0x10, sp + 0x40, w, 64, pcs, 64);
    CHECK(n >= 1 && n <= 3, "decreasing: %d frames", n);
    /* rbp outside the copy (below, above, straddling its end, wrapping) */
    memset(w, 0, sizeof(w));
    uint64_t bad[] = { sp - 8, sp + 64 * 8, sp + 64 * 8 - 8, 0xfffffffffffffff8ull, 0x1000 };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        n = unwind(s, B + 0x10, bad[i], w, 64, pcs, 64);
        CHECK(n == 1 && pcs[0] == B + 0x10, "rbp 0x%llx: %d frames",
              (unsigned long long)bad[i], n);
    }
    /* no copy at all */
    n = unwind(s, B + 0x10, sp + 0x20, NULL, 0, pcs, 64);
    CHECK(n == 1, "no copy: %d frames", n);
    ls_syms_free(s);
    return failures != 0;
}

static int first_object(struct dl_phdr_info *info, size_t size, void *arg)
{
    (void)size;
    *(uint64_t *)arg = info->dlpi_addr; /* the program comes first */
    return 1;
}

/* The address of this program's .plt, 0 if it has none; its size. */
static uint64_t plt_address(uint64_t *size)
{
    uint64_t base = 0, plt = 0;
    dl_iterate_phdr(first_object, &base);
    elf_version(EV_CURRENT);
    int fd = open("/proc/self/exe", O_RDONLY);
    Elf *e = fd >= 0 ? elf_begin(fd, ELF_C_READ, NULL) : NULL;
    size_t shstrndx;
    if (e && elf_getshdrstrndx(e, &shstrndx) == 0)
        for (Elf_Scn *scn = NULL; (scn = elf_nextscn(e, scn));) {
            GElf_Shdr sh;
            const char *name = gelf_getshdr(scn, &sh) ? elf_strptr(e, shstrndx, sh.sh_name) : NULL;
            if (name && strcmp(name, ".plt") == 0 && sh.sh_size >= 32) {
                plt = base + sh.sh_addr;
                *size = sh.sh_size;
            }
        }
    if (e)
        elf_end(e);
    if (fd >= 0)
        close(fd);
    return plt;
}

/* A sample whose pc is in a PLT stub (a call through it, on its way to
 * libc): the linker's CFI for .plt computes the CFA from rsp and rip, 8
 * bytes above rsp before the stub's push, 16 after it.  The caller's frame
 * must follow, as with a pc anywhere else. */
static int t_plt(void)
{
    uint64_t size = 0, plt = plt_address(&size);
    if (!plt) {
        fprintf(stderr, "FAIL: no .plt in this program (built with -fno-plt?)\n");
        return 1;
    }
    ls_syms *s = ls_syms_new(getpid());
    if (!s)
        return 1;
    const uint64_t sp = 0x7f0000000000ull;
    uint64_t ret = (uint64_t)(uintptr_t)&t_plt + 16;  /* in a function with CFI */
    struct { int off, slot; } at[] = { { 0, 0 }, { 11, 1 } };  /* before, after the push */
    for (size_t i = 0; i < sizeof(at) / sizeof(at[0]); i++) {
        uint64_t w[32] = { 0 }, pcs[64];
        uint64_t regs[17] = { 0 };
        w[at[i].slot] = ret;
        regs[7] = sp;
        regs[16] = plt + 16 + at[i].off;          /* the first stub after PLT0 */
        int n = ls_syms_unwind(s, getpid(), regs, (const uint8_t *)w, sizeof(w), pcs, 64);
        CHECK(n >= 2 && pcs[0] == regs[16] && pcs[1] == ret - 1,
              "pc at .plt+%d: %d frames, the second 0x%llx, want 0x%llx", 16 + at[i].off, n,
              n >= 2 ? (unsigned long long)pcs[1] : 0ull, (unsigned long long)(ret - 1));
    }
    /* each stub is named after its .rela.plt entry's symbol, e.g. the
     * one plt_address called */
    bool seen = false;
    for (uint64_t a = plt + 16; a < plt + size; a += 16) {
        const char *fn = ls_syms_lookup(s, a + 6)->function;
        size_t len = fn ? strlen(fn) : 0;
        CHECK(len > 4 && strcmp(fn + len - 4, "@plt") == 0, "stub at .plt+%llu named %s",
              (unsigned long long)(a - plt), nn(fn));
        seen |= fn && strcmp(fn, "dl_iterate_phdr@plt") == 0;
    }
    CHECK(seen, "no stub named dl_iterate_phdr@plt");
    /* the header stub (PLT0) has no entry of its own */
    CHECK(!ls_syms_lookup(s, plt)->function, "PLT0 named %s", ls_syms_lookup(s, plt)->function);
    ls_syms_free(s);
    return failures != 0;
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: symbols_hostile perfmap|limits|unwind|plt\n");
        return 2;
    }
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    int rc = strcmp(argv[1], "perfmap") == 0   ? t_perfmap()
             : strcmp(argv[1], "limits") == 0  ? t_limits()
             : strcmp(argv[1], "unwind") == 0  ? t_unwind()
             : strcmp(argv[1], "plt") == 0     ? t_plt()
                                               : 2;
    char cmd[300];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
    if (rc == 0)
        printf("ok %s\n", argv[1]);
    return rc;
}
