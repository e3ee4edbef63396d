/*
 * probe_note_check -- check a linked binary's USDT notes against the probe
 * contract EVL_PROBE_LIST (loop/include/evl-probes.h).
 *
 *   probe_note_check FILE     check FILE; exit 0 if it matches, 1 if not
 *   probe_note_check --table  print the contract: "name nargs argnames..."
 *
 * For every probe of the table, FILE must contain at least one stapsdt note
 * (type 3, owner "stapsdt") with provider "evl" and that name, and every
 * site of it must have:
 *   - exactly the table's number of arguments;
 *   - only register ("-8@%rax") or constant ("8@$5") operands: no memory
 *     operand ("8@16(%rbp)", "8@sym(%rip)"), which libbpf 1.1 and bpftrace
 *     reject or read wrongly;
 *   - a nonzero semaphore address, the same for every site of the probe,
 *     inside an allocated, writable section with file contents, distinct from
 *     every other probe's, and equal to the symbol evl_<name>_semaphore when
 *     the file has a symbol table.
 * FILE must also contain no evl probe that the table does not list.
 * Notes of other providers are counted and ignored.
 */
#include "evl-probes.h"
#include "stapsdt.h"

#include <ctype.h>
#include <gelf.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct contract {
    const char *name;
    int nargs;
    const char *argnames;
};

static const struct contract table[] = {
#define XX(name, nargs, doc) {#name, nargs, doc},
    EVL_PROBE_LIST(XX)
#undef XX
};
#define NTABLE (sizeof table / sizeof table[0])

static int count_words(const char *s)
{
    int n = 0;
    for (const char *p = s; *p;) {
        while (isspace((unsigned char)*p))
            p++;
        if (!*p)
            break;
        n++;
        while (*p && !isspace((unsigned char)*p))
            p++;
    }
    return n;
}

/*
 * One operand: [-]SIZE@LOC with SIZE in 1 2 4 8 and LOC a register
 * (%name on x86, xN/wN on aarch64) or a numeric constant ($[-]digits).
 * Returns NULL if fine, else why not.
 */
static const char *bad_operand(const char *op)
{
    const char *p = op;
    if (*p == '-')
        p++;
    if (!(p[0] == '1' || p[0] == '2' || p[0] == '4' || p[0] == '8') || p[1] != '@')
        return "size is not [-]1/2/4/8@";
    p += 2;
    if (strpbrk(p, "()[]"))
        return "memory operand";
    if (*p == '%') {
        p++;
        if (!isalpha((unsigned char)*p))
            return "bad register name";
        if (strcmp(p, "rip") == 0 || strcmp(p, "eip") == 0)
            return "instruction pointer";
        for (; *p; p++)
            if (!isalnum((unsigned char)*p))
                return "bad register name";
        return NULL;
    }
    if (*p == '$') {
        p++;
        if (*p == '-')
            p++;
        if (!isdigit((unsigned char)*p))
            return "immediate is not a number (symbol address?)";
        if (p[0] == '0' && (p[1] == 'x' || p[1] == 'X')) {
            p += 2;
            if (!isxdigit((unsigned char)*p))
                return "bad hex immediate";
            for (; *p; p++)
                if (!isxdigit((unsigned char)*p))
                    return "bad hex immediate";
            return NULL;
        }
        for (; *p; p++)
            if (!isdigit((unsigned char)*p))
                return "immediate is not a number";
        return NULL;
    }
    if ((*p == 'x' || *p == 'w') && isdigit((unsigned char)p[1])) { /* aarch64 */
        for (p++; *p; p++)
            if (!isdigit((unsigned char)*p))
                return "bad register name";
        return NULL;
    }
    return "neither a register nor a constant";
}

static int errors;
static FILE *pending;      /* problems of the probe being checked */

__attribute__((format(printf, 2, 3)))
static void problem(const char *probe, const char *fmt, ...)
{
    va_list ap;
    FILE *out = pending ? pending : stdout;
    va_start(ap, fmt);
    fprintf(out, "  FAIL evl:%s: ", probe);
    vfprintf(out, fmt, ap);
    fputc('\n', out);
    va_end(ap);
    errors++;
}

/* Check every site of table entry c; print its line. */
static void check_probe(struct ls_sdt_file *f, const struct contract *c, uint64_t *sem_out)
{
    size_t sites = 0;
    uint64_t sem = 0;
    const char *first_args = NULL;
    const char *secname = "?";
    int start_errors = errors;
    char buf[64];
    char *msgs = NULL;
    size_t msgs_len = 0;
    pending = open_memstream(&msgs, &msgs_len);

    if (count_words(c->argnames) != c->nargs)
        problem(c->name, "EVL_PROBE_LIST names %d arguments (\"%s\") but says nargs=%d",
                count_words(c->argnames), c->argnames, c->nargs);

    for (size_t i = 0; i < f->n; i++) {
        struct ls_sdt_note *n = &f->notes[i];
        if (strcmp(n->provider, "evl") != 0 || strcmp(n->name, c->name) != 0)
            continue;
        sites++;
        if (!first_args)
            first_args = n->args;
        snprintf(buf, sizeof buf, "0x%llx", (unsigned long long)n->pc);
        int nargs = count_words(n->args);
        if (nargs != c->nargs)
            problem(c->name, "site pc=%s has %d arguments, EVL_PROBE_LIST says %d (%s); "
                    "note args: \"%s\"", buf, nargs, c->nargs, c->argnames, n->args);
        /* operands */
        char *dup = strdup(n->args), *save = NULL;
        for (char *op = strtok_r(dup, " \t", &save); op; op = strtok_r(NULL, " \t", &save)) {
            const char *why = bad_operand(op);
            if (why)
                problem(c->name, "site pc=%s operand \"%s\": %s (args \"%s\")", buf, op, why,
                        n->args);
        }
        free(dup);
        /* semaphore */
        if (n->sem == 0) {
            problem(c->name, "site pc=%s has no semaphore (address 0)", buf);
        } else if (sem == 0) {
            sem = n->sem;
        } else if (n->sem != sem) {
            problem(c->name, "site pc=%s uses semaphore 0x%llx, the first site 0x%llx", buf,
                    (unsigned long long)n->sem, (unsigned long long)sem);
        }
    }
    if (sites == 0) {
        problem(c->name, "missing from the binary (no stapsdt note evl:%s)", c->name);
    } else if (sem != 0) {
        const char *nm;
        uint64_t fl, off;
        int bits;
        if (ls_sdt_section_of(f, sem, &nm, &fl, &off, &bits) != 0) {
            problem(c->name, "semaphore 0x%llx is in no allocated section", (unsigned long long)sem);
        } else {
            secname = nm ? nm : "?";
            if (!(fl & SHF_WRITE) || !bits)
                problem(c->name, "semaphore is in section %s, not writable data with contents",
                        secname);
        }
        char sym[96];
        snprintf(sym, sizeof sym, "evl_%s_semaphore", c->name);
        uint64_t v;
        int r = ls_sdt_symbol(f, sym, &v);
        if (r < 0)
            problem(c->name, "no symbol %s", sym);
        else if (r == 0 && v != sem)
            problem(c->name, "semaphore 0x%llx is not %s (0x%llx)",
                    (unsigned long long)sem, sym, (unsigned long long)v);
    }
    *sem_out = sem;
    fclose(pending);
    pending = NULL;
    printf("evl:%-15s %-4s args=%d sites=%zu sem=0x%llx (%s)  %s\n", c->name,
           errors == start_errors ? "OK" : "BAD", c->nargs, sites, (unsigned long long)sem,
           secname, first_args ? first_args : "-");
    fputs(msgs, stdout);
    free(msgs);
}

int main(int argc, char **argv)
{
    if (argc == 2 && strcmp(argv[1], "--table") == 0) {
        for (size_t i = 0; i < NTABLE; i++)
            printf("%s %d %s\n", table[i].name, table[i].nargs, table[i].argnames);
        return 0;
    }
    if (argc != 2 || argv[1][0] == '-') {
        fprintf(stderr, "usage: %s FILE | --table\n", argv[0]);
        return 2;
    }
    const char *path = argv[1];
    struct ls_sdt_file f;
    char err[512];
    if (ls_sdt_open(path, &f, err, sizeof err) != 0) {
        printf("probe_note_check: FAIL: %s\n", err);
        return 1;
    }
    if (!f.has_note_section) {
        printf("probe_note_check: FAIL: %s has no .note.stapsdt section "
               "(built without EVL_PROBES, or not linked with libevl)\n", path);
        ls_sdt_close(&f);
        return 1;
    }

    printf("%s: %zu stapsdt notes\n", path, f.n);
    uint64_t sems[NTABLE];
    for (size_t i = 0; i < NTABLE; i++)
        check_probe(&f, &table[i], &sems[i]);

    /* one semaphore per probe */
    for (size_t i = 0; i < NTABLE; i++)
        for (size_t j = i + 1; j < NTABLE; j++)
            if (sems[i] && sems[i] == sems[j])
                problem(table[i].name, "shares its semaphore with evl:%s", table[j].name);

    /* evl probes the table does not list; other providers */
    size_t others = 0;
    for (size_t i = 0; i < f.n; i++) {
        struct ls_sdt_note *n = &f.notes[i];
        if (strcmp(n->provider, "evl") != 0) {
            others++;
            continue;
        }
        int known = 0;
        for (size_t k = 0; k < NTABLE && !known; k++)
            known = strcmp(n->name, table[k].name) == 0;
        if (!known) {
            int dup = 0;
            for (size_t k = 0; k < i && !dup; k++)
                dup = strcmp(f.notes[k].provider, "evl") == 0 && strcmp(f.notes[k].name, n->name) == 0;
            if (!dup)
                problem(n->name, "is in the binary but not in EVL_PROBE_LIST (args \"%s\")",
                        n->args);
        }
    }
    if (others)
        printf("(%zu notes of other providers ignored)\n", others);
    ls_sdt_close(&f);

    if (errors) {
        printf("probe_note_check: FAIL: %s does not match EVL_PROBE_LIST: %d problem(s)\n", path,
               errors);
        return 1;
    }
    printf("probe_note_check: OK: %s matches EVL_PROBE_LIST (%zu probes)\n", path, NTABLE);
    return 0;
}
