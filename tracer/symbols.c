/*
 * symbols.c -- symbolization with libdwfl (see symbols.h).  Results are
 * cached per address in an open-addressing table: task functions and call
 * sites repeat.
 *
 * JIT code (Node.js and other V8 embedders; see JIT.md):
 *
 * - Which addresses are ELF code is decided from the process's executable
 *   mappings (/proc/PID/maps, bounded), not from libdwfl's module spans
 *   alone: V8 remaps a copy of node's builtins next to its code space, so
 *   libdwfl's module for /usr/bin/node spans from 0x400000 to that copy and
 *   "contains" every JIT address in between.  A pc in a file mapping is
 *   translated through its file offset to the module's address (which also
 *   names the remapped builtins); a pc in anonymous executable memory is
 *   JIT code.
 * - JIT code is named from the perf map the process writes (node
 *   --perf-basic-prof): /tmp/perf-NSPID.map in the process's root, opened
 *   with openat2(RESOLVE_IN_ROOT), a regular file owned by the process's
 *   user.  Parsed lazily at the first JIT address, its appended tail re-read
 *   when an address is not found (the file grew).  Hostile input: at most
 *   64 MiB read and 1M entries per process, names cut to 4095 bytes and
 *   control bytes replaced, malformed lines skipped, an unterminated last
 *   line kept until its newline comes.  Later lines win where entries
 *   overlap: the entries are kept as sorted disjoint segments (a recent
 *   level, merged into the main one when large), binary searched.
 *   "JS:*f /app.js:12:3" (also LazyCompile:, Function:, ...) is split into
 *   function "f", file "/app.js", line 12 (the function's first line).
 * - Unwinding through JIT frames: libdwfl (elfutils >= 0.170, x86_64
 *   backend) already falls back to the frame-pointer chain for a pc without
 *   CFI, in a module or not, and goes back to CFI once in a module again
 *   (measured with node 20 and elfutils 0.188).  What it reads goes through
 *   ls_memory_read, which reads the stack copy only: a hostile rbp cannot
 *   make us read the live process, and sp strictly increases (elfutils'
 *   check), depth is bounded by the caller.
 */
#define _GNU_SOURCE
#include "symbols.h"

#include <dwarf.h>
#include <elfutils/libdw.h>
#include <elfutils/libdwfl.h>
#include <errno.h>
#include <fcntl.h>
#include <gelf.h>
#include <linux/openat2.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define LS_SYM_CACHE 4096     /* slots, power of two */

/* Executable mappings kept from /proc/PID/maps. */
#define LS_MAPS_MAX 16384
#define LS_MAPS_PATHS (4u << 20)        /* bytes of path names kept */
#define LS_MAPS_READ (64u << 20)        /* bytes of /proc/PID/maps read */
#define LS_MAPS_REREAD_NS 100000000ll   /* at most every 100 ms on a miss */

/* The perf map (hostile input: every bound here). */
#define LS_PM_READ_MAX (64ull << 20)    /* bytes read per process */
#define LS_PM_ENTRIES_MAX 1000000u      /* entries accepted per process */
#define LS_PM_NAME_MAX 4096             /* bytes of a name, NUL included */
#define LS_PM_LINE_MAX (LS_PM_NAME_MAX + 64)
#define LS_PM_SIZE_MAX (256ull << 20)   /* one code object */
#define LS_PM_ADDR_END 0x0000800000000000ull   /* x86-64 user space */
#define LS_PM_RECENT_MAX 16384          /* recent segments before a merge */
#define LS_PM_CHUNK (256u << 10)
#define LS_PM_REOPEN_NS 1000000000ll    /* retry a missing map once a second */

struct ls_map {
    uint64_t start, end, off;
    uint32_t path;                      /* offset in maps_paths, or LS_NO_PATH */
};
#define LS_NO_PATH UINT32_MAX           /* anonymous (or path not kept) */
#define LS_ANON_PATH (UINT32_MAX - 1)

struct ls_seg {
    uint64_t start, end;
    uint32_t name;                      /* offset in the name pool */
};

struct ls_perfmap {
    int fd;
    int state;                          /* LS_PERFMAP_* */
    bool tried;
    int64_t last_try_ns;
    char path[128];
    char why[160];                      /* one line, for the status */
    uint64_t off;                       /* file offset read up to */
    uint64_t bytes_read;
    uint32_t entries, skipped;
    bool budget_hit;
    uint32_t gen;                       /* bumped when segments change */
    /* the line being read (carried over between reads) */
    char line[LS_PM_LINE_MAX];
    size_t line_len;
    bool line_long;
    /* names, NUL-terminated */
    char *pool;
    size_t pool_len, pool_cap;
    /* newest entries first: recent (small) then main, each sorted, disjoint */
    struct ls_seg *recent, *main;
    size_t nrecent, nmain;
    /* entries parsed from the current read, in file order */
    struct ls_seg *batch;
    size_t nbatch, batch_cap;
    char *chunk;
    char *override;                     /* ls_syms_set_perfmap */
};

struct ls_syms {
    Dwfl *dwfl;
    pid_t pid;
    bool attached;            /* dwfl_attach_state done */
    /* the sample being unwound */
    pid_t tid;
    const uint64_t *regs;
    const uint8_t *stack;
    size_t stack_len;
    uint64_t *pcs;
    int npcs, max;
    /* executable mappings, sorted by start */
    struct ls_map *maps;
    size_t nmaps;
    char *maps_paths;
    size_t maps_paths_len;
    int64_t maps_read_ns;
    struct ls_perfmap pm;
    uint64_t jit_frames, jit_unnamed;
    struct {
        uint64_t addr;
        ls_sym sym;
        int used;
        int jit;              /* resolved from the perf map (or unnamed anon code) */
        uint32_t gen;         /* pm.gen then */
    } cache[LS_SYM_CACHE];
    size_t ncached;           /* used slots */
};

static const Dwfl_Callbacks ls_proc_callbacks = {
    .find_elf = dwfl_linux_proc_find_elf,
    .find_debuginfo = dwfl_standard_find_debuginfo,
};

static int64_t ls_mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000ll + ts.tv_nsec;
}

static int ls_syms_report(ls_syms *s)
{
    dwfl_report_begin(s->dwfl);
    int rc = dwfl_linux_proc_report(s->dwfl, s->pid);
    dwfl_report_end(s->dwfl, NULL, NULL);
    return rc;
}

/* ------------------------------------------------- executable mappings */

static bool ls_hex(const char **p, const char *end, uint64_t *v)
{
    uint64_t x = 0;
    int n = 0;
    const char *q = *p;
    for (; q < end; q++, n++) {
        int d;
        if (*q >= '0' && *q <= '9')
            d = *q - '0';
        else if (*q >= 'a' && *q <= 'f')
            d = *q - 'a' + 10;
        else if (*q >= 'A' && *q <= 'F')
            d = *q - 'A' + 10;
        else
            break;
        if (n == 16)
            return false;
        x = x << 4 | (uint64_t)d;
    }
    if (n == 0)
        return false;
    *p = q;
    *v = x;
    return true;
}

/* One line of /proc/PID/maps: "start-end perms offset dev inode   path". */
static void ls_maps_line(ls_syms *s, const char *l, size_t n)
{
    const char *e = l + n, *p = l;
    uint64_t start, end, off;
    if (!ls_hex(&p, e, &start) || p == e || *p++ != '-' || !ls_hex(&p, e, &end) ||
        e - p < 6 || p[0] != ' ' || p[3] != 'x')
        return;
    p += 5;                           /* " rwxp" */
    if (p == e || *p++ != ' ' || !ls_hex(&p, e, &off) || start >= end)
        return;
    /* dev, inode, then spaces, then the path (may be absent) */
    for (int f = 0; f < 2; f++) {
        while (p < e && *p == ' ')
            p++;
        while (p < e && *p != ' ')
            p++;
    }
    while (p < e && *p == ' ')
        p++;
    if (s->nmaps == LS_MAPS_MAX)
        return;
    struct ls_map *m = &s->maps[s->nmaps];
    m->start = start;
    m->end = end;
    m->off = off;
    m->path = LS_ANON_PATH;
    if (p < e && *p == '/') {
        size_t len = (size_t)(e - p);
        m->path = LS_NO_PATH;
        /* consecutive mappings of one file share its name */
        if (s->nmaps && s->maps[s->nmaps - 1].path < LS_ANON_PATH &&
            strlen(s->maps_paths + s->maps[s->nmaps - 1].path) == len &&
            memcmp(s->maps_paths + s->maps[s->nmaps - 1].path, p, len) == 0)
            m->path = s->maps[s->nmaps - 1].path;
        else if (s->maps_paths_len + len + 1 <= LS_MAPS_PATHS) {
            memcpy(s->maps_paths + s->maps_paths_len, p, len);
            s->maps_paths[s->maps_paths_len + len] = 0;
            m->path = (uint32_t)s->maps_paths_len;
            s->maps_paths_len += len + 1;
        }
    } else if (p < e && *p == '[') {
        /* [vdso], [vsyscall]: libdwfl knows the vDSO; named special mappings
         * are not JIT code (anon:NAME ones are: prctl-named anonymous memory) */
        if (!(e - p > 6 && memcmp(p, "[anon:", 6) == 0))
            m->path = LS_NO_PATH;
    }
    s->nmaps++;
}

static void ls_maps_read(ls_syms *s)
{
    s->maps_read_ns = ls_mono_ns();
    if (!s->maps && !(s->maps = malloc(LS_MAPS_MAX * sizeof(*s->maps))))
        return;
    if (!s->maps_paths && !(s->maps_paths = malloc(LS_MAPS_PATHS)))
        return;
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/maps", (int)s->pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return;
    s->nmaps = 0;
    s->maps_paths_len = 0;
    static __thread char buf[65536];
    size_t have = 0, total = 0;
    bool skipping = false;            /* the rest of a line too long to keep */
    for (;;) {
        ssize_t n = read(fd, buf + have, sizeof(buf) - have);
        if (n <= 0)
            break;
        total += (size_t)n;
        have += (size_t)n;
        size_t pos = 0;
        for (;;) {
            char *nl = memchr(buf + pos, '\n', have - pos);
            if (!nl)
                break;
            if (!skipping)
                ls_maps_line(s, buf + pos, (size_t)(nl - (buf + pos)));
            skipping = false;
            pos = (size_t)(nl - buf) + 1;
        }
        memmove(buf, buf + pos, have - pos);
        have -= pos;
        if (have == sizeof(buf)) {    /* a line longer than the buffer */
            have = 0;
            skipping = true;
        }
        if (total >= LS_MAPS_READ)
            break;
    }
    close(fd);
    /* The kernel lists mappings sorted; keep the table sorted whatever. */
    for (size_t i = 1; i < s->nmaps; i++)
        if (s->maps[i].start < s->maps[i - 1].end) {
            s->nmaps = i;             /* not sorted: keep the sorted prefix */
            break;
        }
}

static const struct ls_map *ls_map_find(const ls_syms *s, uint64_t addr)
{
    size_t lo = 0, hi = s->nmaps;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (s->maps[mid].end <= addr)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < s->nmaps && s->maps[lo].start <= addr ? &s->maps[lo] : NULL;
}

/* --------------------------------------------------------- the perf map */

enum { LS_PERFMAP_UNTRIED, LS_PERFMAP_OK, LS_PERFMAP_MISSING, LS_PERFMAP_REFUSED };

/* A process's pid in its own pid namespace (NStgid's last field), the pid
 * its perf map is named after; and its uids, for the owner check. */
static pid_t ls_ns_pid(pid_t pid, uid_t uids[4], int *nuids)
{
    char path[64], buf[4096];
    snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    *nuids = 0;
    if (fd < 0)
        return pid;
    ssize_t n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (n <= 0)
        return pid;
    buf[n] = 0;
    pid_t ns = pid;
    for (char *l = buf; l && *l; l = strchr(l, '\n'), l = l ? l + 1 : NULL) {
        if (strncmp(l, "NStgid:", 7) == 0) {
            char *end = strchr(l, '\n');
            for (char *q = l + 7; *q && q != end;) {
                char *next;
                long v = strtol(q, &next, 10);
                if (next == q)
                    break;
                if (v > 0 && v < (1l << 22))
                    ns = (pid_t)v;
                q = next;
            }
        } else if (strncmp(l, "Uid:", 4) == 0) {
            char *q = l + 4;
            for (int i = 0; i < 4; i++) {
                char *next;
                unsigned long v = strtoul(q, &next, 10);
                if (next == q)
                    break;
                uids[(*nuids)++] = (uid_t)v;
                q = next;
            }
        }
    }
    return ns;
}

static void ls_pm_open(ls_syms *s)
{
    struct ls_perfmap *pm = &s->pm;
    pm->tried = true;
    pm->last_try_ns = ls_mono_ns();
    uid_t uids[4];
    int nuids;
    pid_t ns = ls_ns_pid(s->pid, uids, &nuids);
    int fd = -1, err;
    if (pm->override) {
        snprintf(pm->path, sizeof(pm->path), "%s", pm->override);
        fd = open(pm->override, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY);
        err = errno;
        nuids = 1;
        uids[0] = geteuid();
    } else {
        /* In the target's root and mount namespace; symlinks resolved inside
         * that root (a link to /etc/shadow is the target's /etc/shadow). */
        char root[64], rel[64];
        snprintf(root, sizeof(root), "/proc/%d/root", (int)s->pid);
        snprintf(rel, sizeof(rel), "tmp/perf-%d.map", (int)ns);
        snprintf(pm->path, sizeof(pm->path), "/proc/%d/root/%s", (int)s->pid, rel);
        int dfd = open(root, O_PATH | O_DIRECTORY | O_CLOEXEC);
        err = errno;
        if (dfd >= 0) {
            struct open_how how = {
                .flags = O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY,
                .resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS,
            };
            fd = (int)syscall(SYS_openat2, dfd, rel, &how, sizeof(how));
            err = errno;
            close(dfd);
        }
    }
    if (fd < 0) {
        pm->state = err == ENOENT ? LS_PERFMAP_MISSING : LS_PERFMAP_REFUSED;
        snprintf(pm->why, sizeof(pm->why), "%s", strerror(err));
        return;
    }
    struct stat st;
    bool owner = false;
    if (fstat(fd, &st) == 0)
        for (int i = 0; i < nuids; i++)
            owner |= st.st_uid == uids[i];
    if (!S_ISREG(st.st_mode) || !owner) {
        close(fd);
        pm->state = LS_PERFMAP_REFUSED;
        snprintf(pm->why, sizeof(pm->why), "%s", !S_ISREG(st.st_mode) ? "not a regular file"
                                                 : "not owned by the process's user");
        return;
    }
    pm->fd = fd;
    pm->state = LS_PERFMAP_OK;
    pm->why[0] = 0;
}

/* B over A (both sorted, disjoint; B newer): B plus what of A B does not
 * cover, sorted, disjoint.  *nout <= nA + 2 nB.  NULL when out of memory. */
static struct ls_seg *ls_seg_overlay(const struct ls_seg *A, size_t nA, const struct ls_seg *B,
                                     size_t nB, size_t *nout)
{
    struct ls_seg *out = malloc((nA + 2 * nB + 1) * sizeof(*out));
    if (!out)
        return NULL;
    size_t n = 0, k = 0, jb = 0;
    /* Pieces of A come out sorted; B's segments are emitted before them
     * as they come (both are disjoint from each other). */
#define LS_PIECE(s_, e_, name_)                                          \
    do {                                                                 \
        while (jb < nB && B[jb].start < (s_))                           \
            out[n++] = B[jb++];                                          \
        out[n++] = (struct ls_seg){ (s_), (e_), (name_) };               \
    } while (0)
    for (size_t i = 0; i < nA; i++) {
        uint64_t cur = A[i].start;
        while (k < nB && B[k].end <= cur)
            k++;
        for (size_t j = k; j < nB && B[j].start < A[i].end; j++) {
            if (B[j].start > cur)
                LS_PIECE(cur, B[j].start, A[i].name);
            if (B[j].end > cur)
                cur = B[j].end;
            if (cur >= A[i].end)
                break;
        }
        if (cur < A[i].end)
            LS_PIECE(cur, A[i].end, A[i].name);
    }
#undef LS_PIECE
    while (jb < nB)
        out[n++] = B[jb++];
    *nout = n;
    return out;
}

/* Entries in file order (later wins) -> sorted disjoint segments. */
static struct ls_seg *ls_seg_resolve(const struct ls_seg *e, size_t n, size_t *nout)
{
    if (n <= 1) {
        struct ls_seg *r = malloc((n ? n : 1) * sizeof(*r));
        if (r && n)
            r[0] = e[0];
        *nout = r ? n : 0;
        return r;
    }
    size_t na, nb;
    struct ls_seg *a = ls_seg_resolve(e, n / 2, &na);
    struct ls_seg *b = ls_seg_resolve(e + n / 2, n - n / 2, &nb);
    struct ls_seg *r = a && b ? ls_seg_overlay(a, na, b, nb, nout) : NULL;
    free(a);
    free(b);
    return r;
}

static const struct ls_seg *ls_seg_find(const struct ls_seg *v, size_t n, uint64_t addr)
{
    size_t lo = 0, hi = n;              /* first segment ending after addr */
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (v[mid].end <= addr)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < n && v[lo].start <= addr ? &v[lo] : NULL;
}

/* One complete line: "START SIZE NAME", hex without or with 0x, one space
 * each.  Malformed in any way: skipped. */
static void ls_pm_line(struct ls_perfmap *pm, const char *l, size_t n, bool cut)
{
    const char *p = l, *e = l + n;
    uint64_t start, size;
    if (e - p > 2 && p[0] == '0' && (p[1] == 'x' || p[1] == 'X'))
        p += 2;
    if (!ls_hex(&p, e, &start) || p == e || *p++ != ' ')
        goto bad;
    if (e - p > 2 && p[0] == '0' && (p[1] == 'x' || p[1] == 'X'))
        p += 2;
    if (!ls_hex(&p, e, &size) || p == e || *p++ != ' ' || p == e)
        goto bad;
    if (size == 0 || size > LS_PM_SIZE_MAX || start < 4096 || start >= LS_PM_ADDR_END ||
        size > LS_PM_ADDR_END - start)
        goto bad;
    if (memchr(p, 0, (size_t)(e - p)))
        goto bad;
    size_t len = (size_t)(e - p);
    if (len > LS_PM_NAME_MAX - 1) {
        len = LS_PM_NAME_MAX - 1;
        cut = true;
    }
    (void)cut;
    if (pm->entries >= LS_PM_ENTRIES_MAX) {
        pm->budget_hit = true;
        return;
    }
    if (pm->pool_len + len + 1 > pm->pool_cap) {
        size_t cap = pm->pool_cap ? pm->pool_cap * 2 : 1 << 16;
        while (cap < pm->pool_len + len + 1)
            cap *= 2;
        if (cap > UINT32_MAX)
            return;
        char *np = realloc(pm->pool, cap);
        if (!np)
            return;
        pm->pool = np;
        pm->pool_cap = cap;
    }
    if (pm->nbatch == pm->batch_cap) {
        size_t cap = pm->batch_cap ? pm->batch_cap * 2 : 1024;
        struct ls_seg *nb = realloc(pm->batch, cap * sizeof(*nb));
        if (!nb)
            return;
        pm->batch = nb;
        pm->batch_cap = cap;
    }
    char *dst = pm->pool + pm->pool_len;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)p[i];
        dst[i] = c < 0x20 || c == 0x7f ? '?' : (char)c;
    }
    dst[len] = 0;
    pm->batch[pm->nbatch++] = (struct ls_seg){ start, start + size, (uint32_t)pm->pool_len };
    pm->pool_len += len + 1;
    pm->entries++;
    return;
bad:
    pm->skipped++;
}

static void ls_pm_bytes(struct ls_perfmap *pm, const char *b, size_t n)
{
    while (n) {
        const char *nl = memchr(b, '\n', n);
        size_t take = nl ? (size_t)(nl - b) : n;
        size_t room = sizeof(pm->line) - pm->line_len;
        size_t keep = take < room ? take : room;
        memcpy(pm->line + pm->line_len, b, keep);
        pm->line_len += keep;
        if (keep < take)
            pm->line_long = true;     /* name cut; the rest skipped */
        if (!nl)
            return;                   /* unterminated: wait for the rest */
        ls_pm_line(pm, pm->line, pm->line_len, pm->line_long);
        pm->line_len = 0;
        pm->line_long = false;
        b += take + 1;
        n -= take + 1;
    }
}

/* Read what was appended since the last read (bounded); fold the new
 * entries in.  Returns true when the segments changed. */
static bool ls_pm_poll(ls_syms *s)
{
    struct ls_perfmap *pm = &s->pm;
    if (pm->state != LS_PERFMAP_OK)
        return false;
    struct stat st;
    if (fstat(pm->fd, &st) != 0 || st.st_size < 0 || (uint64_t)st.st_size <= pm->off)
        return false;
    if (pm->bytes_read >= LS_PM_READ_MAX || pm->entries >= LS_PM_ENTRIES_MAX) {
        pm->budget_hit = true;        /* more there, not read */
        return false;
    }
    if (!pm->chunk && !(pm->chunk = malloc(LS_PM_CHUNK)))
        return false;
    pm->nbatch = 0;
    while (pm->bytes_read < LS_PM_READ_MAX && pm->entries < LS_PM_ENTRIES_MAX) {
        size_t want = LS_PM_CHUNK;
        if (want > LS_PM_READ_MAX - pm->bytes_read)
            want = (size_t)(LS_PM_READ_MAX - pm->bytes_read);
        ssize_t n = pread(pm->fd, pm->chunk, want, (off_t)pm->off);
        if (n <= 0)
            break;
        pm->off += (uint64_t)n;
        pm->bytes_read += (uint64_t)n;
        ls_pm_bytes(pm, pm->chunk, (size_t)n);
        if ((size_t)n < want)
            break;
    }
    if (pm->bytes_read >= LS_PM_READ_MAX && (uint64_t)st.st_size > pm->off)
        pm->budget_hit = true;
    if (!pm->nbatch)
        return false;
    size_t nr, nn;
    struct ls_seg *r = ls_seg_resolve(pm->batch, pm->nbatch, &nr);
    pm->nbatch = 0;
    if (!r)
        return false;
    struct ls_seg *rec = ls_seg_overlay(pm->recent, pm->nrecent, r, nr, &nn);
    free(r);
    if (!rec)
        return false;
    free(pm->recent);
    pm->recent = rec;
    pm->nrecent = nn;
    if (pm->nrecent > LS_PM_RECENT_MAX) {
        struct ls_seg *m = ls_seg_overlay(pm->main, pm->nmain, pm->recent, pm->nrecent, &nn);
        if (m) {
            free(pm->main);
            pm->main = m;
            pm->nmain = nn;
            free(pm->recent);
            pm->recent = NULL;
            pm->nrecent = 0;
        }
    }
    /* Tables only grow with new entries; stop keeping the batch buffer
     * around at its peak size. */
    if (pm->batch_cap > 65536) {
        free(pm->batch);
        pm->batch = NULL;
        pm->batch_cap = 0;
    }
    pm->gen++;
    return true;
}

static void ls_pm_ensure(ls_syms *s)
{
    struct ls_perfmap *pm = &s->pm;
    if (pm->state == LS_PERFMAP_OK)
        return;
    if (pm->tried && ls_mono_ns() - pm->last_try_ns < LS_PM_REOPEN_NS)
        return;
    ls_pm_open(s);
}

static const char *ls_pm_name(ls_syms *s, uint64_t addr)
{
    struct ls_perfmap *pm = &s->pm;
    const struct ls_seg *g = ls_seg_find(pm->recent, pm->nrecent, addr);
    if (!g)
        g = ls_seg_find(pm->main, pm->nmain, addr);
    return g ? pm->pool + g->name : NULL;
}

static void ls_pm_free(struct ls_perfmap *pm)
{
    if (pm->fd >= 0)
        close(pm->fd);
    free(pm->pool);
    free(pm->recent);
    free(pm->main);
    free(pm->batch);
    free(pm->chunk);
    free(pm->override);
}

ls_syms *ls_syms_new(pid_t pid)
{
    ls_syms *s = calloc(1, sizeof(*s));
    if (!s)
        return NULL;
    s->pid = pid;
    s->pm.fd = -1;
    s->dwfl = dwfl_begin(&ls_proc_callbacks);
    if (!s->dwfl || ls_syms_report(s) != 0) {
        ls_syms_free(s);
        return NULL;
    }
    ls_maps_read(s);
    return s;
}

void ls_syms_refresh(ls_syms *s)
{
    ls_syms_report(s);
    ls_maps_read(s);
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
 * physical function (named by its ELF symbol).  addr is the module's
 * address (the process's, except for remapped code). */
static ls_sym ls_resolve_mod(Dwfl_Module *mod, uint64_t addr)
{
    ls_sym r = { 0 };
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

/* The module address of file offset off of mod's ELF, through its
 * PT_LOAD segments. */
static bool ls_mod_addr(Dwfl_Module *mod, uint64_t off, uint64_t *maddr)
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
static bool ls_mod_contains(Dwfl_Module *mod, uint64_t addr)
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

struct ls_mod_find { const char *name; Dwfl_Module *mod; };

static int ls_mod_by_name_cb(Dwfl_Module *mod, void **user, const char *name, Dwarf_Addr start,
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

/* A JIT name from the perf map.  V8 writes "KIND:[tier]NAME FILE:LINE:COL"
 * for JS functions (KIND JS, LazyCompile, Function, Script, ...; tier one
 * of ~ ^ + *): split into function, file, line where it has that shape
 * (an empty NAME is "(anonymous)"); keep the whole name otherwise
 * ("Builtin:ArrayForEach", "BytecodeHandler:Ldar", "RegExp:..."). */
static void ls_jit_name(const char *raw, ls_sym *r)
{
    r->module = ls_dup("[jit]");
    const char *p = raw;
    while ((*p >= 'A' && *p <= 'Z') || (*p >= 'a' && *p <= 'z'))
        p++;
    size_t len = strlen(raw);
    const char *e = raw + len;
    if (p == raw || *p != ':')
        goto keep;
    p++;
    if (*p == '~' || *p == '^' || *p == '+' || *p == '*')
        p++;
    /* ":LINE:COL" at the end */
    const char *q = e;
    while (q > p && q[-1] >= '0' && q[-1] <= '9')
        q--;
    if (q == e || q == p || q[-1] != ':')
        goto keep;
    const char *colon2 = --q;
    while (q > p && q[-1] >= '0' && q[-1] <= '9')
        q--;
    if (q == colon2 || q == p || q[-1] != ':' || colon2 - q > 9)
        goto keep;
    const char *fend = q - 1;         /* the ':' before LINE */
    int line = atoi(q);
    /* NAME FILE: split before a path-looking FILE, else at the last space */
    const char *sp = NULL;
    for (const char *c = p; c < fend; c++)
        if (*c == ' ' && (c[1] == '/' || strncmp(c + 1, "node:", 5) == 0 ||
                          strncmp(c + 1, "file:", 5) == 0)) {
            sp = c;
            break;
        }
    if (!sp)
        for (const char *c = fend; c > p; c--)
            if (c[-1] == ' ') {
                sp = c - 1;
                break;
            }
    if (!sp || sp + 1 >= fend || line <= 0)
        goto keep;
    r->function = sp > p ? strndup(p, (size_t)(sp - p)) : ls_dup("(anonymous)");
    r->file = strndup(sp + 1, (size_t)(fend - (sp + 1)));
    r->line = line;
    return;
keep:
    r->function = ls_dup(raw);
}

/* Which code addr is in, then its frame(s); *jit set when it is (or may
 * be) JIT code, whose name can change as the perf map grows. */
static ls_sym ls_resolve(ls_syms *s, uint64_t addr, int *jit)
{
    ls_sym r = { 0 };
    *jit = 0;
    const struct ls_map *m = ls_map_find(s, addr);
    if (!m && ls_mono_ns() - s->maps_read_ns > LS_MAPS_REREAD_NS) {
        ls_maps_read(s);              /* new code mapped since */
        m = ls_map_find(s, addr);
    }
    if (m && m->path < LS_ANON_PATH) {
        /* A file: the module address of its file offset (the same address
         * but where the file is mapped again elsewhere, as V8's builtins). */
        const char *path = s->maps_paths + m->path;
        uint64_t off = addr - m->start + m->off, maddr;
        Dwfl_Module *mod = dwfl_addrmodule(s->dwfl, addr);
        const char *mname = mod ? dwfl_module_info(mod, NULL, NULL, NULL, NULL, NULL, NULL, NULL) : NULL;
        if (!mname || strcmp(mname, path) != 0 || !ls_mod_addr(mod, off, &maddr)) {
            struct ls_mod_find f = { path, NULL };
            dwfl_getmodules(s->dwfl, ls_mod_by_name_cb, &f, 0);
            mod = f.mod;
            if (!mod || !ls_mod_addr(mod, off, &maddr)) {
                r.module = ls_dup(path);
                return r;
            }
        }
        r = ls_resolve_mod(mod, maddr);
        /* V8's interpreter: a JS frame named only with
         * --interpreted-frames-native-stack (then it is JIT code) */
        if (r.function && strcmp(r.function, "Builtins_InterpreterEntryTrampoline") == 0) {
            s->jit_frames++;
            s->jit_unnamed++;
        }
        return r;
    }
    if (!m || m->path == LS_NO_PATH) {
        Dwfl_Module *mod = dwfl_addrmodule(s->dwfl, addr);
        if (mod && ls_mod_contains(mod, addr))
            return ls_resolve_mod(mod, addr);
        if (m)
            return r;                 /* [vsyscall] or a path not kept */
    }
    /* Anonymous executable memory (or no mapping known): JIT code. */
    *jit = 1;
    if (m)
        s->jit_frames++;
    ls_pm_ensure(s);
    const char *name = ls_pm_name(s, addr);
    if (!name && ls_pm_poll(s))
        name = ls_pm_name(s, addr);
    if (name) {
        ls_jit_name(name, &r);
    } else if (m) {
        s->jit_unnamed++;
        r.module = ls_dup("[anon]");
    }
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
        if (s->cache[k].addr == addr) {
            /* JIT code: named again if the perf map changed since (code
             * freed and new code at the same address). */
            if (s->cache[k].jit) {
                ls_pm_ensure(s);
                ls_pm_poll(s);
                if (s->cache[k].gen != s->pm.gen) {
                    ls_sym_release(&s->cache[k].sym);
                    s->cache[k].sym = ls_resolve(s, addr, &s->cache[k].jit);
                    s->cache[k].gen = s->pm.gen;
                }
            }
            return &s->cache[k].sym;
        }
    }
    /* Bounded memory and short probe sequences whatever addresses the
     * target makes us resolve: start over when three quarters full. */
    if (s->ncached >= LS_SYM_CACHE / 4 * 3) {
        ls_cache_clear(s);
        k = h;
    }
    s->cache[k].used = 1;
    s->cache[k].addr = addr;
    s->cache[k].sym = ls_resolve(s, addr, &s->cache[k].jit);
    s->cache[k].gen = s->pm.gen;
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
    ls_pm_free(&s->pm);
    free(s->maps);
    free(s->maps_paths);
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

/* Every word the unwinder reads (CFI rules, and the frame-pointer chain
 * libdwfl follows where there is no CFI: saved rbp at [rbp], return address
 * at [rbp+8]) comes from the copy taken at the blocking point, never from
 * the live process: the live stack has moved on (a frame beyond the copy
 * would unwind into garbage), and a hostile rbp must not make us read the
 * target's memory anywhere. */
static bool ls_memory_read(Dwfl *dwfl, Dwarf_Addr addr, Dwarf_Word *result, void *arg)
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

/* ------------------------------------------------------ perf map status */

bool ls_syms_has_perfmap(ls_syms *s)
{
    if (!s)
        return false;
    ls_pm_ensure(s);
    return s->pm.state == LS_PERFMAP_OK;
}

const char *ls_syms_perfmap_status(ls_syms *s)
{
    static __thread char buf[400];
    if (!s)
        return "no process";
    ls_pm_ensure(s);
    struct ls_perfmap *pm = &s->pm;
    switch (pm->state) {
    case LS_PERFMAP_OK:
        ls_pm_poll(s);
        snprintf(buf, sizeof(buf), "perf map %s: %u entries (%u lines skipped)%s", pm->path,
                 pm->entries, pm->skipped, pm->budget_hit ? ", read limit reached" : "");
        break;
    case LS_PERFMAP_MISSING:
        snprintf(buf, sizeof(buf), "no perf map (%s)", pm->path);
        break;
    default:
        snprintf(buf, sizeof(buf), "perf map %s refused: %s", pm->path, pm->why);
        break;
    }
    return buf;
}

uint64_t ls_syms_jit_frames(ls_syms *s, uint64_t *unnamed)
{
    if (unnamed)
        *unnamed = s ? s->jit_unnamed : 0;
    return s ? s->jit_frames : 0;
}

int ls_syms_set_perfmap(ls_syms *s, const char *path)
{
    struct ls_perfmap *pm = &s->pm;
    char *dup = strdup(path);
    if (!dup)
        return -1;
    ls_cache_clear(s);
    ls_pm_free(pm);
    memset(pm, 0, sizeof(*pm));
    pm->fd = -1;
    pm->override = dup;
    ls_pm_open(s);
    return pm->state == LS_PERFMAP_OK ? 0 : -1;
}
