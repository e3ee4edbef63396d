/*
 * symbols_perfmap.c -- part of symbols (symbols.h): JIT code named from
 * the perf map the process writes, and the perf map's status for the
 * recorder (ls_syms_has_perfmap, ls_syms_perfmap_status,
 * ls_syms_jit_frames, ls_syms_set_perfmap).  Depends on symbols_int.h.
 *
 * JIT code is named from the perf map the process writes (node
 * --perf-basic-prof): /tmp/perf-NSPID.map in the process's root, opened
 * with openat2(RESOLVE_IN_ROOT), a regular file owned by the process's
 * user.  Parsed lazily at the first JIT address, its appended tail re-read
 * when an address is not found (the file grew).  Hostile input: at most
 * 64 MiB read and 1M entries per process, names cut to 4095 bytes and
 * control bytes replaced, malformed lines skipped, an unterminated last
 * line kept until its newline comes.  Later lines win where entries
 * overlap: the entries are kept as sorted disjoint segments (a recent
 * level, merged into the main one when large), binary searched.
 * "JS:*f /app.js:12:3" (also LazyCompile:, Function:, ...) is split into
 * function "f", file "/app.js", line 12 (the function's first line).
 */
#define _GNU_SOURCE
#include "symbols_int.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

/* --------------------------------------------------------- the perf map */


/* A process's pid in its own pid namespace (NStgid's last field), the pid
 * its perf map is named after; and its uids, for the owner check. */
static pid_t ns_pid(pid_t pid, uid_t uids[4], int *nuids)
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

void ls_pm_open(ls_syms *s)
{
    struct ls_perfmap *pm = &s->pm;
    pm->tried = true;
    pm->last_try_ns = ls_mono_ns();
    uid_t uids[4];
    int nuids;
    pid_t ns = ns_pid(s->pid, uids, &nuids);
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
static struct ls_seg *seg_overlay(const struct ls_seg *A, size_t nA, const struct ls_seg *B,
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
static struct ls_seg *seg_resolve(const struct ls_seg *e, size_t n, size_t *nout)
{
    if (n <= 1) {
        struct ls_seg *r = malloc((n ? n : 1) * sizeof(*r));
        if (r && n)
            r[0] = e[0];
        *nout = r ? n : 0;
        return r;
    }
    size_t na, nb;
    struct ls_seg *a = seg_resolve(e, n / 2, &na);
    struct ls_seg *b = seg_resolve(e + n / 2, n - n / 2, &nb);
    struct ls_seg *r = a && b ? seg_overlay(a, na, b, nb, nout) : NULL;
    free(a);
    free(b);
    return r;
}

static const struct ls_seg *seg_find(const struct ls_seg *v, size_t n, uint64_t addr)
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
static void pm_line(struct ls_perfmap *pm, const char *l, size_t n, bool cut)
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

static void pm_bytes(struct ls_perfmap *pm, const char *b, size_t n)
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
        pm_line(pm, pm->line, pm->line_len, pm->line_long);
        pm->line_len = 0;
        pm->line_long = false;
        b += take + 1;
        n -= take + 1;
    }
}

/* Read what was appended since the last read (bounded); fold the new
 * entries in.  Returns true when the segments changed. */
bool ls_pm_poll(ls_syms *s)
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
        pm_bytes(pm, pm->chunk, (size_t)n);
        if ((size_t)n < want)
            break;
    }
    if (pm->bytes_read >= LS_PM_READ_MAX && (uint64_t)st.st_size > pm->off)
        pm->budget_hit = true;
    if (!pm->nbatch)
        return false;
    size_t nr, nn;
    struct ls_seg *r = seg_resolve(pm->batch, pm->nbatch, &nr);
    pm->nbatch = 0;
    if (!r)
        return false;
    struct ls_seg *rec = seg_overlay(pm->recent, pm->nrecent, r, nr, &nn);
    free(r);
    if (!rec)
        return false;
    free(pm->recent);
    pm->recent = rec;
    pm->nrecent = nn;
    if (pm->nrecent > LS_PM_RECENT_MAX) {
        struct ls_seg *m = seg_overlay(pm->main, pm->nmain, pm->recent, pm->nrecent, &nn);
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

void ls_pm_ensure(ls_syms *s)
{
    struct ls_perfmap *pm = &s->pm;
    if (pm->state == LS_PERFMAP_OK)
        return;
    if (pm->tried && ls_mono_ns() - pm->last_try_ns < LS_PM_REOPEN_NS)
        return;
    ls_pm_open(s);
}

const char *ls_pm_name(ls_syms *s, uint64_t addr)
{
    struct ls_perfmap *pm = &s->pm;
    const struct ls_seg *g = seg_find(pm->recent, pm->nrecent, addr);
    if (!g)
        g = seg_find(pm->main, pm->nmain, addr);
    return g ? pm->pool + g->name : NULL;
}

void ls_pm_free(struct ls_perfmap *pm)
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

/* A JIT name from the perf map.  V8 writes "KIND:[tier]NAME FILE:LINE:COL"
 * for JS functions (KIND JS, LazyCompile, Function, Script, ...; tier one
 * of ~ ^ + *): split into function, file, line where it has that shape
 * (an empty NAME is "(anonymous)"); keep the whole name otherwise
 * ("Builtin:ArrayForEach", "BytecodeHandler:Ldar", "RegExp:..."). */
void ls_jit_name(const char *raw, ls_sym *r)
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

/* ------------------------------------------------------ perf map status */

bool ls_syms_has_perfmap(ls_syms *s)
{
    if (!s)
        return false;
    pthread_mutex_lock(&s->mu);
    ls_pm_ensure(s);
    bool ok = s->pm.state == LS_PERFMAP_OK;
    pthread_mutex_unlock(&s->mu);
    return ok;
}

const char *ls_syms_perfmap_status(ls_syms *s)
{
    static __thread char buf[400];
    if (!s)
        return "no process";
    pthread_mutex_lock(&s->mu);
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
    pthread_mutex_unlock(&s->mu);
    return buf;
}

uint64_t ls_syms_jit_frames(ls_syms *s, uint64_t *unnamed)
{
    if (!s) {
        if (unnamed)
            *unnamed = 0;
        return 0;
    }
    pthread_mutex_lock(&s->mu);
    if (unnamed)
        *unnamed = s->jit_unnamed;
    uint64_t n = s->jit_frames;
    pthread_mutex_unlock(&s->mu);
    return n;
}

int ls_syms_set_perfmap(ls_syms *s, const char *path)
{
    struct ls_perfmap *pm = &s->pm;
    char *dup = strdup(path);
    if (!dup)
        return -1;
    pthread_mutex_lock(&s->mu);
    ls_cache_clear(s);
    ls_pm_free(pm);
    memset(pm, 0, sizeof(*pm));
    pm->fd = -1;
    pm->override = dup;
    ls_pm_open(s);
    int rc = pm->state == LS_PERFMAP_OK ? 0 : -1;
    pthread_mutex_unlock(&s->mu);
    return rc;
}
