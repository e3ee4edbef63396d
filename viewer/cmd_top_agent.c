/*
 * cmd_top_agent.c -- `loopscope top --agent [HOST:]PORT`: what a
 * `loopscope agent` (or `record --metrics`) sees, live.  Every interval it
 * fetches /metrics over HTTP/1.0 (plain sockets, bounded in time and
 * size), reads the exposition with promtext.c (untrusted input: bounded
 * series, names and labels), and shows per process and loop thread the
 * iterations per second, busy and idle share, lag p50/p99 (bucket upper
 * bounds of the iteration histogram's increase) and blocking over the
 * last interval and in total, then the call sites by blocked time, and
 * the agent's own CPU share and resident memory.  The interval figures are
 * the differences between two answers; a series missing from the previous
 * answer counts from zero (the agent's counters start at zero when it
 * attaches), a counter that went down (the agent restarted) from zero too.
 * On a terminal the screen is redrawn in place (ncursesw); otherwise, or
 * with --text, one plain text block per interval.  Every string that came
 * from the agent goes through ls_term_n.
 */
#define _GNU_SOURCE
#include "commands.h"
#include "output.h"
#include "promtext.h"

#include <curses.h>
#include <errno.h>
#include <getopt.h>
#include <locale.h>
#include <math.h>
#include <netdb.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <wchar.h>

#define AG_PORT "9464"
#define AG_MAX_BODY (16u << 20)          /* bytes of an answer's body */
#define AG_MAX_HEAD (64u << 10)          /* bytes of its headers */
#define AG_CONNECT_MS 3000
#define AG_READ_MS 3000                  /* silence while reading */
#define AG_ANSWER_MS 10000               /* the whole answer */
#define AG_MAX_SAMPLES 2000000           /* sample lines read from one answer */
#define AG_MAX_PROCS 1024
#define AG_MAX_LOOPS 4096
#define AG_MAX_SITES 4096
#define AG_BUCKETS 64                    /* histogram buckets of one loop */
#define AG_TEXT_SITES 10                 /* call sites of a text block */

static const char usage_agent[] =
    "usage: loopscope top --agent [[HOST:]PORT] [-i SECONDS] [-d SECONDS] [--text]\n"
    "\n"
    "What a `loopscope agent` (or `loopscope record --metrics`) sees, live: its\n"
    "/metrics fetched every interval.  Per process and loop thread: iterations\n"
    "per second, busy and idle share, lag p50/p99 (upper bounds of the\n"
    "iteration histogram's buckets, over the interval), blocking episodes and\n"
    "blocked time in the interval and in total; then the call sites by blocked\n"
    "time; the agent's own CPU share and resident memory in the header.\n"
    "\n"
    "  --agent [[HOST:]PORT]  the agent's address: default 127.0.0.1:9464; PORT,\n"
    "                         HOST, HOST:PORT, [IPv6]:PORT (also --agent=VALUE)\n"
    "  -i, --interval SEC     fetch every SEC seconds (default 1, 0.1..3600)\n"
    "  -d, --duration SEC     stop after SEC seconds\n"
    "      --text             plain text blocks even on a terminal\n"
    "\n"
    "Keys: q quits (and Ctrl-C).  If the agent cannot be reached at start: one\n"
    "error line, exit 1; if it goes away later, the screen says so and top\n"
    "keeps trying.\n"
    "\n"
    "example: loopscope top --agent 9464\n";

/* ------------------------------------------------------------ the time */

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000ll + ts.tv_nsec;
}

static volatile sig_atomic_t stop_signal;

static void on_signal(int sig)
{
    stop_signal = sig;
}

/* ------------------------------------------------------------ the address */

/* [[HOST:]PORT], HOST, [V6]:PORT, [V6], V6 (two colons or more) into
 * host and port; NULL or "" the default.  0, or an error printed. */
static int parse_addr(const char *spec, char host[256], char port[8])
{
    snprintf(host, 256, "127.0.0.1");
    snprintf(port, 8, AG_PORT);
    if (!spec || !*spec)
        return 0;
    const char *p = NULL;                   /* the port part, if any */
    size_t all = strlen(spec);
    if (spec[strspn(spec, "0123456789")] == 0) {
        p = spec;
    } else if (spec[0] == '[') {
        const char *rb = strchr(spec, ']');
        if (!rb || (rb[1] && rb[1] != ':') || rb - spec - 1 >= 256 || rb == spec + 1)
            return ls_error("invalid --agent '%s' ([HOST:]PORT)", ls_term_n(spec, 300)), 2;
        memcpy(host, spec + 1, (size_t)(rb - spec - 1));
        host[rb - spec - 1] = 0;
        if (rb[1] == ':')
            p = rb + 2;
    } else {
        const char *colon = strchr(spec, ':');
        const char *last = strrchr(spec, ':');
        size_t hl = colon == last && colon ? (size_t)(colon - spec) : all;  /* V6: all host */
        if (hl >= 256)
            return ls_error("invalid --agent '%s' (host too long)", ls_term_n(spec, 300)), 2;
        if (hl) {
            memcpy(host, spec, hl);
            host[hl] = 0;
        }
        if (colon == last && colon)
            p = colon + 1;
    }
    if (p && *p) {
        char *end;
        long v = strtol(p, &end, 10);
        if (*end || v < 1 || v > 65535 || !(*p >= '0' && *p <= '9'))
            return ls_error("invalid --agent port '%s' (1-65535)", ls_term_n(p, 300)), 2;
        snprintf(port, 8, "%ld", v);
    }
    return 0;
}

/* --------------------------------------------------------------- HTTP */

static int wait_fd(int fd, short ev, int64_t deadline)
{
    for (;;) {
        int64_t left = (deadline - now_ns()) / 1000000;
        if (left <= 0)
            return 0;
        struct pollfd p = { .fd = fd, .events = ev };
        int n = poll(&p, 1, (int)(left > 1000 ? 1000 : left));
        if (n > 0)
            return 1;
        if (n < 0 && errno != EINTR)
            return -1;
        if (stop_signal)
            return -1;
    }
}

/* GET /metrics from host:port: the body in *body (malloc'd, NUL added),
 * or NULL with the reason in err. */
static char *fetch(const char *host, const char *port, size_t *blen, char *err, size_t nerr)
{
    struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                              .ai_flags = AI_NUMERICSERV }, *ai = NULL;
    int e = getaddrinfo(host, port, &hints, &ai);
    if (e) {
        snprintf(err, nerr, "cannot resolve '%s': %s", ls_term_n(host, 200), gai_strerror(e));
        return NULL;
    }
    int fd = -1;
    snprintf(err, nerr, "cannot connect to %s port %s", ls_term_n(host, 200), port);
    for (struct addrinfo *a = ai; a && fd < 0; a = a->ai_next) {
        fd = socket(a->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd < 0)
            continue;
        int rc = connect(fd, a->ai_addr, a->ai_addrlen), soerr = 0;
        if (rc < 0 && errno == EINPROGRESS) {
            int w = wait_fd(fd, POLLOUT, now_ns() + AG_CONNECT_MS * 1000000ll);
            socklen_t sl = sizeof soerr;
            if (w <= 0)
                soerr = w == 0 ? ETIMEDOUT : EINTR;
            else if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl))
                soerr = errno;
        } else if (rc < 0) {
            soerr = errno;
        }
        if (soerr) {
            snprintf(err, nerr, "cannot connect to %s port %s: %s", ls_term_n(host, 200), port,
                     soerr == ETIMEDOUT ? "no answer within 3 s" : strerror(soerr));
            close(fd);
            fd = -1;
        }
    }
    freeaddrinfo(ai);
    if (fd < 0)
        return NULL;
    char req[400];
    int rl = snprintf(req, sizeof req, "GET /metrics HTTP/1.0\r\nHost: %s\r\n"
                                       "Accept: text/plain\r\nConnection: close\r\n\r\n",
                      strchr(host, ':') ? "localhost" : host);
    if (rl < 0 || (size_t)rl >= sizeof req)
        rl = snprintf(req, sizeof req, "GET /metrics HTTP/1.0\r\n\r\n");
    int64_t deadline = now_ns() + AG_ANSWER_MS * 1000000ll;
    char *buf = NULL;
    size_t len = 0, cap = 0;
    for (int off = 0; off < rl;) {
        ssize_t n = send(fd, req + off, (size_t)(rl - off), MSG_NOSIGNAL);
        if (n > 0) {
            off += (int)n;
        } else if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
            if (wait_fd(fd, POLLOUT, now_ns() + AG_READ_MS * 1000000ll) <= 0) {
                snprintf(err, nerr, "%s port %s took no request", ls_term_n(host, 200), port);
                goto fail;
            }
        } else {
            snprintf(err, nerr, "%s port %s: %s", ls_term_n(host, 200), port, strerror(errno));
            goto fail;
        }
    }
    for (;;) {
        if (len + 65536 + 1 > cap) {
            size_t ncap = cap ? cap * 2 : 256 * 1024;
            if (ncap > AG_MAX_BODY + AG_MAX_HEAD + 65536 + 1)
                ncap = AG_MAX_BODY + AG_MAX_HEAD + 65536 + 1;
            if (ncap <= len + 1) {
                snprintf(err, nerr, "%s port %s: answer larger than %u MiB", ls_term_n(host, 200),
                         port, AG_MAX_BODY >> 20);
                goto fail;
            }
            char *nb = realloc(buf, ncap);
            if (!nb) {
                snprintf(err, nerr, "out of memory");
                goto fail;
            }
            buf = nb;
            cap = ncap;
        }
        ssize_t n = recv(fd, buf + len, cap - len - 1, 0);
        if (n > 0) {
            len += (size_t)n;
            if (len > AG_MAX_BODY + AG_MAX_HEAD) {
                snprintf(err, nerr, "%s port %s: answer larger than %u MiB", ls_term_n(host, 200),
                         port, AG_MAX_BODY >> 20);
                goto fail;
            }
            continue;
        }
        if (n == 0)
            break;
        if (errno != EAGAIN && errno != EINTR) {
            snprintf(err, nerr, "%s port %s: %s", ls_term_n(host, 200), port, strerror(errno));
            goto fail;
        }
        int64_t d = now_ns() + AG_READ_MS * 1000000ll;
        int w = wait_fd(fd, POLLIN, d < deadline ? d : deadline);
        if (w <= 0) {
            snprintf(err, nerr, w == 0 ? "%s port %s: no whole answer in time"
                                       : "%s port %s: interrupted", ls_term_n(host, 200), port);
            goto fail;
        }
    }
    close(fd);
    fd = -1;
    buf[len] = 0;
    /* "HTTP/1.x 200 ...", headers, an empty line, the body */
    if (len < 12 || strncmp(buf, "HTTP/1.", 7) || buf[8] != ' ') {
        snprintf(err, nerr, "%s port %s: not an HTTP answer", ls_term_n(host, 200), port);
        goto fail;
    }
    int status = atoi(buf + 9);
    char *hend = memmem(buf, len < AG_MAX_HEAD ? len : AG_MAX_HEAD, "\r\n\r\n", 4);
    size_t skip = 4;
    if (!hend) {
        hend = memmem(buf, len < AG_MAX_HEAD ? len : AG_MAX_HEAD, "\n\n", 2);
        skip = 2;
    }
    if (status != 200) {
        snprintf(err, nerr, "%s port %s answered HTTP %d, not the metrics", ls_term_n(host, 200),
                 port, status);
        goto fail;
    }
    if (!hend) {
        snprintf(err, nerr, "%s port %s: no end of headers", ls_term_n(host, 200), port);
        goto fail;
    }
    size_t hl = (size_t)(hend - buf) + skip;
    if (len - hl > AG_MAX_BODY) {
        snprintf(err, nerr, "%s port %s: answer larger than %u MiB", ls_term_n(host, 200), port,
                 AG_MAX_BODY >> 20);
        goto fail;
    }
    /* a Content-Length the body falls short of: cut short */
    for (char *h = buf; h && h < hend; h = memchr(h, '\n', (size_t)(hend - h))) {
        if (*h == '\n')
            h++;
        if (!strncasecmp(h, "content-length:", 15)) {
            unsigned long long cl = strtoull(h + 15, NULL, 10);
            if (cl > len - hl) {
                snprintf(err, nerr, "%s port %s: answer cut short", ls_term_n(host, 200), port);
                goto fail;
            }
        }
    }
    memmove(buf, buf + hl, len - hl + 1);
    *blen = len - hl;
    return buf;
fail:
    if (fd >= 0)
        close(fd);
    free(buf);
    return NULL;
}

/* ------------------------------------------------------------ an answer */

typedef struct ag_proc {
    int pid;
    bool info;                              /* a loopscope_target_info sample */
    char comm[64], mode[32], runtime[64];   /* as sent, cut */
    double tasks;                           /* live tasks, all states */
    bool has_tasks;
} ag_proc;

enum { L_HIST = 1, L_SUM = 2, L_COUNT = 4, L_WAIT = 8, L_BLK = 16, L_BLKS = 32 };

typedef struct ag_loop {
    int pid;
    unsigned long long loop;
    unsigned seen;                          /* L_* */
    int nb;
    double le[AG_BUCKETS], cum[AG_BUCKETS]; /* sorted by le once read */
    double sum, count, wait, blocks, block_s;
} ag_loop;

typedef struct ag_site {
    int pid;
    char *site;
    bool eps_seen, secs_seen;
    double eps, secs;
} ag_site;

/* An open-addressing index: slot = position + 1, 0 empty. */
typedef struct ag_index {
    uint32_t *slot;
    size_t mask;
} ag_index;

typedef struct ag_snap {
    int64_t t;                              /* when the answer came */
    ag_proc *procs;
    ag_loop *loops;
    ag_site *sites;
    size_t nprocs, nloops, nsites;
    ag_index pix, lix, six;
    double cpu, rss;
    bool has_cpu, has_rss;
    size_t over;                            /* series past the bounds, values refused */
    prom_stats ps;
} ag_snap;

static uint64_t mix(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    return x ^ (x >> 33);
}

static uint64_t str_hash(const char *s, uint64_t h)
{
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 0x100000001b3ull;
    return h;
}

static bool snap_init(ag_snap *s)
{
    memset(s, 0, sizeof *s);
    s->procs = calloc(AG_MAX_PROCS, sizeof *s->procs);
    s->loops = calloc(AG_MAX_LOOPS, sizeof *s->loops);
    s->sites = calloc(AG_MAX_SITES, sizeof *s->sites);
    s->pix = (ag_index){ calloc(AG_MAX_PROCS * 2, sizeof(uint32_t)), AG_MAX_PROCS * 2 - 1 };
    s->lix = (ag_index){ calloc(AG_MAX_LOOPS * 2, sizeof(uint32_t)), AG_MAX_LOOPS * 2 - 1 };
    s->six = (ag_index){ calloc(AG_MAX_SITES * 2, sizeof(uint32_t)), AG_MAX_SITES * 2 - 1 };
    return s->procs && s->loops && s->sites && s->pix.slot && s->lix.slot && s->six.slot;
}

static void snap_clear(ag_snap *s)
{
    for (size_t i = 0; i < s->nsites; i++)
        free(s->sites[i].site);
    memset(s->pix.slot, 0, (s->pix.mask + 1) * sizeof(uint32_t));
    memset(s->lix.slot, 0, (s->lix.mask + 1) * sizeof(uint32_t));
    memset(s->six.slot, 0, (s->six.mask + 1) * sizeof(uint32_t));
    s->nprocs = s->nloops = s->nsites = 0;
    s->cpu = s->rss = 0;
    s->has_cpu = s->has_rss = false;
    s->over = 0;
    memset(&s->ps, 0, sizeof s->ps);
}

static void snap_free(ag_snap *s)
{
    if (s->sites)
        for (size_t i = 0; i < s->nsites; i++)
            free(s->sites[i].site);
    free(s->procs);
    free(s->loops);
    free(s->sites);
    free(s->pix.slot);
    free(s->lix.slot);
    free(s->six.slot);
}

static ag_proc *find_proc(const ag_snap *s, int pid)
{
    for (size_t h = mix((uint64_t)pid) & s->pix.mask;; h = (h + 1) & s->pix.mask) {
        uint32_t k = s->pix.slot[h];
        if (!k)
            return NULL;
        if (s->procs[k - 1].pid == pid)
            return &s->procs[k - 1];
    }
}

static ag_proc *get_proc(ag_snap *s, int pid)
{
    ag_proc *p = find_proc(s, pid);
    if (p || s->nprocs == AG_MAX_PROCS)
        return p;
    size_t h = mix((uint64_t)pid) & s->pix.mask;
    while (s->pix.slot[h])
        h = (h + 1) & s->pix.mask;
    p = &s->procs[s->nprocs++];
    memset(p, 0, sizeof *p);
    p->pid = pid;
    s->pix.slot[h] = (uint32_t)s->nprocs;
    return p;
}

static ag_loop *find_loop(const ag_snap *s, int pid, unsigned long long loop)
{
    for (size_t h = mix(((uint64_t)pid << 32) ^ mix(loop)) & s->lix.mask;;
         h = (h + 1) & s->lix.mask) {
        uint32_t k = s->lix.slot[h];
        if (!k)
            return NULL;
        if (s->loops[k - 1].pid == pid && s->loops[k - 1].loop == loop)
            return &s->loops[k - 1];
    }
}

static ag_loop *get_loop(ag_snap *s, int pid, unsigned long long loop)
{
    ag_loop *l = find_loop(s, pid, loop);
    if (l || s->nloops == AG_MAX_LOOPS)
        return l;
    size_t h = mix(((uint64_t)pid << 32) ^ mix(loop)) & s->lix.mask;
    while (s->lix.slot[h])
        h = (h + 1) & s->lix.mask;
    l = &s->loops[s->nloops++];
    memset(l, 0, offsetof(ag_loop, le));
    l->pid = pid;
    l->loop = loop;
    l->sum = l->count = l->wait = l->blocks = l->block_s = 0;
    s->lix.slot[h] = (uint32_t)s->nloops;
    return l;
}

static ag_site *find_site(const ag_snap *s, int pid, const char *site)
{
    for (size_t h = str_hash(site, mix((uint64_t)pid)) & s->six.mask;;
         h = (h + 1) & s->six.mask) {
        uint32_t k = s->six.slot[h];
        if (!k)
            return NULL;
        if (s->sites[k - 1].pid == pid && !strcmp(s->sites[k - 1].site, site))
            return &s->sites[k - 1];
    }
}

static ag_site *get_site(ag_snap *s, int pid, const char *site)
{
    ag_site *x = find_site(s, pid, site);
    if (x || s->nsites == AG_MAX_SITES)
        return x;
    char *copy = strdup(site);
    if (!copy)
        return NULL;
    size_t h = str_hash(site, mix((uint64_t)pid)) & s->six.mask;
    while (s->six.slot[h])
        h = (h + 1) & s->six.mask;
    x = &s->sites[s->nsites++];
    *x = (ag_site){ .pid = pid, .site = copy };
    s->six.slot[h] = (uint32_t)s->nsites;
    return x;
}

/* Strict decimal label values. */
static bool label_pid(const prom_sample *s, int *pid)
{
    const char *v = prom_label_value(s, "pid");
    if (!v || !*v || strlen(v) > 10 || v[strspn(v, "0123456789")])
        return false;
    long long x = strtoll(v, NULL, 10);
    if (x <= 0 || x > 0x7fffffff)
        return false;
    *pid = (int)x;
    return true;
}

static bool label_u64(const char *v, unsigned long long *out)
{
    if (!v || !*v || strlen(v) > 20 || v[strspn(v, "0123456789")])
        return false;
    errno = 0;
    *out = strtoull(v, NULL, 10);
    return !errno;
}

static void copy_label(char *dst, size_t n, const char *v)
{
    snprintf(dst, n, "%s", v ? v : "");
}

static int on_sample(const prom_sample *x, void *ctx)
{
    ag_snap *s = ctx;
    const char *n = x->name;
    double v = x->value;
    if (strncmp(n, "loopscope_", 10))
        return 0;
    n += 10;
    bool counter = isfinite(v) && v >= 0 && v < 1e300;
    if (!strcmp(n, "recorder_cpu_seconds_total") || !strcmp(n, "recorder_resident_bytes")) {
        if (!counter)
            s->over++;
        else if (n[9] == 'c')
            s->cpu = v, s->has_cpu = true;
        else
            s->rss = v, s->has_rss = true;
        return 0;
    }
    enum { F_INFO, F_TASKS, F_BUCKET, F_SUM, F_COUNT, F_WAIT, F_BLK, F_BLKS, F_SEPS, F_SSECS };
    static const char *const fam[] = {
        [F_INFO] = "target_info", [F_TASKS] = "tasks",
        [F_BUCKET] = "loop_iteration_seconds_bucket", [F_SUM] = "loop_iteration_seconds_sum",
        [F_COUNT] = "loop_iteration_seconds_count", [F_WAIT] = "loop_wait_seconds_total",
        [F_BLK] = "blocking_episodes_total", [F_BLKS] = "blocking_seconds_total",
        [F_SEPS] = "blocking_site_episodes_total", [F_SSECS] = "blocking_site_seconds_total",
    };
    int f = 0;
    while (f < (int)(sizeof fam / sizeof fam[0]) && strcmp(n, fam[f]))
        f++;
    if (f == (int)(sizeof fam / sizeof fam[0]))
        return 0;                               /* a family not shown */
    int pid;
    if (!label_pid(x, &pid) || (f != F_INFO && !counter)) {
        s->over++;
        return 0;
    }
    if (f == F_INFO || f == F_TASKS) {
        ag_proc *p = get_proc(s, pid);
        if (!p) {
            s->over++;
        } else if (f == F_INFO) {
            p->info = true;
            copy_label(p->comm, sizeof p->comm, prom_label_value(x, "comm"));
            copy_label(p->mode, sizeof p->mode, prom_label_value(x, "mode"));
            copy_label(p->runtime, sizeof p->runtime, prom_label_value(x, "runtime"));
        } else {
            p->tasks += v;
            p->has_tasks = true;
        }
        return 0;
    }
    if (f == F_SEPS || f == F_SSECS) {
        const char *site = prom_label_value(x, "site");
        ag_site *st = site ? get_site(s, pid, site) : NULL;
        if (!st || !get_proc(s, pid)) {
            s->over++;
        } else if (f == F_SEPS && !st->eps_seen) {
            st->eps = v;
            st->eps_seen = true;
        } else if (f == F_SSECS && !st->secs_seen) {
            st->secs = v;
            st->secs_seen = true;
        }
        return 0;
    }
    unsigned long long loop;
    ag_loop *l = label_u64(prom_label_value(x, "loop"), &loop) ? get_loop(s, pid, loop) : NULL;
    if (!l || !get_proc(s, pid)) {
        s->over++;
        return 0;
    }
    switch (f) {
    case F_BUCKET: {
        const char *le = prom_label_value(x, "le");
        double b;
        char *end;
        if (!le)
            break;
        if (!strcmp(le, "+Inf") || !strcmp(le, "Inf"))
            b = INFINITY;
        else if (!*le || le[strspn(le, "0123456789.eE+-")] || (b = strtod(le, &end), *end) ||
                 !isfinite(b))
            break;
        for (int i = 0; i < l->nb; i++)
            if (l->le[i] == b)
                return 0;                       /* the same bucket twice: the first */
        if (l->nb == AG_BUCKETS) {
            s->over++;
            break;
        }
        l->le[l->nb] = b;
        l->cum[l->nb++] = v;
        l->seen |= L_HIST;
        return 0;
    }
    case F_SUM: l->sum = v; l->seen |= L_SUM; return 0;
    case F_COUNT: l->count = v; l->seen |= L_COUNT; return 0;
    case F_WAIT: l->wait = v; l->seen |= L_WAIT; return 0;
    case F_BLK: l->blocks += v; l->seen |= L_BLK; return 0;    /* the kinds summed */
    case F_BLKS: l->block_s += v; l->seen |= L_BLKS; return 0;
    default: break;
    }
    s->over++;
    return 0;
}

static void snap_read(ag_snap *s, const char *body, size_t len)
{
    prom_parse(body, len, AG_MAX_SAMPLES, on_sample, s, &s->ps);
    for (size_t i = 0; i < s->nloops; i++) {   /* buckets by bound (at most 64) */
        ag_loop *l = &s->loops[i];
        for (int a = 1; a < l->nb; a++)
            for (int b = a; b > 0 && l->le[b - 1] > l->le[b]; b--) {
                double t = l->le[b];
                l->le[b] = l->le[b - 1];
                l->le[b - 1] = t;
                t = l->cum[b];
                l->cum[b] = l->cum[b - 1];
                l->cum[b - 1] = t;
            }
    }
}

/* ------------------------------------------------------------ the view */

/* A counter's increase; one that went down restarted from zero. */
static double delta(double cur, double prev)
{
    return cur >= prev ? cur - prev : cur;
}

typedef struct ag_row {
    const ag_proc *p;
    const ag_loop *l;                       /* NULL: a process without loop series */
    bool interval;                          /* a previous answer to compare with */
    double ips, busy, idle;                 /* -1: not known */
    double p50, p99, p50_above, p99_above;  /* seconds; -1 none; +Inf: above *_above */
    double blocks, block_s;                 /* in the interval */
} ag_row;

typedef struct ag_siterow {
    const ag_site *s;
    double eps, secs;                       /* in the interval, -1 unknown */
} ag_siterow;

typedef struct agtop {
    char host[256], port[8];
    double interval;                        /* seconds */
    double duration;
    bool text, curses;
    int64_t start;
    ag_snap snaps[2];
    ag_snap *cur, *prev;                    /* prev: NULL before a second answer */
    bool have;                              /* cur holds an answer */
    char err[512];                          /* the last fetch's failure, "" when it worked */
    int64_t down_since;
    ag_row *rows;
    size_t nrows;
    ag_siterow *srows;
    size_t nsrows;
    double dt, cpu_share;                   /* the interval, the agent's CPU share (-1) */
} agtop;

static int cmp_row(const void *a, const void *b)
{
    const ag_row *x = a, *y = b;
    if (x->p->pid != y->p->pid)
        return x->p->pid < y->p->pid ? -1 : 1;
    unsigned long long lx = x->l ? x->l->loop : 0, ly = y->l ? y->l->loop : 0;
    return lx < ly ? -1 : lx > ly;
}

static int cmp_site(const void *a, const void *b)
{
    const ag_siterow *x = a, *y = b;
    if (x->secs != y->secs)
        return x->secs > y->secs ? -1 : 1;
    if (x->eps != y->eps)
        return x->eps > y->eps ? -1 : 1;
    if (x->s->secs != y->s->secs)
        return x->s->secs > y->s->secs ? -1 : 1;
    if (x->s->pid != y->s->pid)
        return x->s->pid < y->s->pid ? -1 : 1;
    return strcmp(x->s->site, y->s->site);
}

static void quantiles(ag_row *r, const ag_loop *l, const ag_loop *pl)
{
    double d[AG_BUCKETS];
    bool reset = pl && l->count < pl->count;
    int j = 0;
    for (int i = 0; i < l->nb; i++) {
        double before = 0;
        if (pl && !reset) {
            while (j < pl->nb && pl->le[j] < l->le[i])
                j++;
            if (j < pl->nb && pl->le[j] == l->le[i])
                before = pl->cum[j];
        }
        d[i] = delta(l->cum[i], before);
    }
    double total = (l->seen & L_COUNT) ? delta(l->count, pl && !reset ? pl->count : 0) : 0;
    r->p50 = prom_bucket_quantile(l->le, d, l->nb, total, 0.5, &r->p50_above);
    r->p99 = prom_bucket_quantile(l->le, d, l->nb, total, 0.99, &r->p99_above);
}

static bool compute(agtop *t)
{
    ag_snap *c = t->cur, *pv = t->prev;
    size_t want = c->nloops + c->nprocs;
    free(t->rows);
    free(t->srows);
    t->rows = calloc(want ? want : 1, sizeof *t->rows);
    t->srows = calloc(c->nsites ? c->nsites : 1, sizeof *t->srows);
    t->nrows = t->nsrows = 0;
    if (!t->rows || !t->srows)
        return false;
    t->dt = pv ? (c->t - pv->t) / 1e9 : 0;
    bool iv = pv && t->dt > 0;
    t->cpu_share = iv && c->has_cpu && pv->has_cpu ? delta(c->cpu, pv->cpu) / t->dt : -1;
    bool *has_loop = calloc(c->nprocs ? c->nprocs : 1, sizeof *has_loop);
    if (!has_loop)
        return false;
    for (size_t i = 0; i < c->nloops; i++) {
        const ag_loop *l = &c->loops[i];
        const ag_proc *p = find_proc(c, l->pid);
        if (!p)
            continue;
        has_loop[p - c->procs] = true;
        ag_row *r = &t->rows[t->nrows++];
        *r = (ag_row){ .p = p, .l = l, .interval = iv, .ips = -1, .busy = -1, .idle = -1,
                       .p50 = -1, .p99 = -1, .p50_above = -1, .p99_above = -1 };
        if (!iv)
            continue;
        const ag_loop *pl = find_loop(pv, l->pid, l->loop);
        double dc = delta(l->count, pl ? pl->count : 0), ds = delta(l->sum, pl ? pl->sum : 0),
               dw = delta(l->wait, pl ? pl->wait : 0);
        if (l->seen & L_COUNT)
            r->ips = dc / t->dt;
        /* a loop's windows reach the agent when it next waits: a loop
         * asleep the whole interval reported nothing, its shares unknown */
        if ((l->seen & L_SUM) && (dc > 0 || ds > 0 || dw > 0))
            r->busy = ds / t->dt;
        if ((l->seen & L_WAIT) && (dc > 0 || ds > 0 || dw > 0))
            r->idle = dw / t->dt;
        if (l->seen & L_HIST)
            quantiles(r, l, pl);
        r->blocks = delta(l->blocks, pl ? pl->blocks : 0);
        r->block_s = delta(l->block_s, pl ? pl->block_s : 0);
    }
    for (size_t i = 0; i < c->nprocs; i++)
        if (!has_loop[i])
            t->rows[t->nrows++] = (ag_row){ .p = &c->procs[i], .interval = iv, .ips = -1,
                                            .busy = -1, .idle = -1, .p50 = -1, .p99 = -1 };
    free(has_loop);
    qsort(t->rows, t->nrows, sizeof *t->rows, cmp_row);
    for (size_t i = 0; i < c->nsites; i++) {
        const ag_site *s = &c->sites[i];
        const ag_site *ps = iv ? find_site(pv, s->pid, s->site) : NULL;
        ag_siterow r = { s, iv ? delta(s->eps, ps ? ps->eps : 0) : -1,
                         iv ? delta(s->secs, ps ? ps->secs : 0) : -1 };
        if (s->eps > 0 || s->secs > 0 || r.eps > 0)
            t->srows[t->nsrows++] = r;
    }
    qsort(t->srows, t->nsrows, sizeof *t->srows, cmp_site);
    return true;
}

/* --------------------------------------------------------------- cells */

static const char *pct(char *b, size_t n, double share)
{
    if (share < 0)
        snprintf(b, n, "-");
    else
        snprintf(b, n, "%.1f%%", 100 * (share > 1 ? 1 : share));
    return b;
}

static const char *secs(char *b, size_t n, double s)
{
    if (s < 0 || !isfinite(s))
        return snprintf(b, n, "-"), b;
    return ls_fmt_dur(b, n, s > 9e9 ? (int64_t)9e18 : (int64_t)llround(s * 1e9));
}

static const char *lag(char *b, size_t n, double q, double above)
{
    if (isinf(q)) {
        char a[32];
        snprintf(b, n, ">%s", above >= 0 ? secs(a, sizeof a, above) : "?");
        return b;
    }
    return secs(b, n, q);
}

static const char *count(char *b, size_t n, double v)
{
    if (v < 0)
        snprintf(b, n, "-");
    else if (v < 1e15)
        snprintf(b, n, "%.0f", v);
    else
        snprintf(b, n, "%.3g", v);
    return b;
}

static const char *rate(char *b, size_t n, double v)
{
    if (v < 0)
        snprintf(b, n, "-");
    else if (v < 10)
        snprintf(b, n, "%.1f", v);
    else
        count(b, n, v);
    return b;
}

static const char *bytes(char *b, size_t n, double v)
{
    if (v >= 1 << 30)
        snprintf(b, n, "%.2f GiB", v / (1 << 30));
    else
        snprintf(b, n, "%.1f MiB", v / (1 << 20));
    return b;
}

static void header(agtop *t, char *b, size_t n)
{
    char c[32], r[32];
    int64_t now = now_ns();
    bool v6 = strchr(t->host, ':') != NULL;
    char every[48] = "";
    if (t->interval != 1)
        snprintf(every, sizeof every, "  every %gs", t->interval);
    int k = snprintf(b, n, "agent %s%s%s:%s  %.1fs%s", v6 ? "[" : "", ls_term_n(t->host, 200),
                     v6 ? "]" : "", t->port, (now - t->start) / 1e9, every);
    if (k < 0 || (size_t)k >= n)
        return;
    if (t->have)
        snprintf(b + k, n - (size_t)k, "  agent cpu %s  rss %s  processes %zu  loops %zu%s",
                 pct(c, sizeof c, t->cpu_share), t->cur->has_rss ? bytes(r, sizeof r, t->cur->rss)
                                                                 : "-",
                 t->cur->nprocs, t->cur->nloops,
                 t->cur->over || t->cur->ps.bad || t->cur->ps.cut ? "  (some series ignored)" : "");
}

static void status(agtop *t, char *b, size_t n)
{
    b[0] = 0;
    if (t->err[0])
        snprintf(b, n, "agent unreachable for %.0fs: %s (retrying%s)",
                 (now_ns() - t->down_since) / 1e9, t->err,
                 t->have && t->curses ? "; its last answer below" : "");
}

/* --------------------------------------------------------------- text */

static void text_block(agtop *t)
{
    char h[1024], a[32], b[32], c[32], d[32], e[32], f[32], g[32], k[32], m[32];
    header(t, h, sizeof h);
    printf("top: %s\n", h);
    if (t->err[0]) {
        status(t, h, sizeof h);
        printf("top: %s\n\n", h);
        fflush(stdout);
        return;
    }
    for (size_t i = 0; i < t->nrows; i++) {
        const ag_row *r = &t->rows[i];
        char loop[24] = "-";
        if (r->l)
            snprintf(loop, sizeof loop, "%llu", r->l->loop);
        printf("loop: pid %d  loop %s  iterations/s %s  busy %s  idle %s  lag p50 %s  p99 %s  "
               "blocking %s (total %s)  blocked %s (total %s)  comm %s (%s%s%s)\n",
               r->p->pid, loop, rate(a, 32, r->ips), pct(b, 32, r->busy), pct(c, 32, r->idle),
               lag(d, 32, r->p50, r->p50_above), lag(e, 32, r->p99, r->p99_above),
               count(f, 32, r->l && r->interval ? r->blocks : -1),
               count(g, 32, r->l ? r->l->blocks : -1),
               secs(k, 32, r->l && r->interval ? r->block_s : -1),
               secs(m, 32, r->l ? r->l->block_s : -1),
               r->p->info ? ls_term_n(r->p->comm, 64) : "?",
               r->p->info ? ls_term_n(r->p->mode, 40) : "no target_info",
               r->p->runtime[0] ? ", " : "", ls_term_n(r->p->runtime, 80));
    }
    if (!t->nrows)
        printf("loop: none (the agent records no process)\n");
    size_t n = t->nsrows < AG_TEXT_SITES ? t->nsrows : AG_TEXT_SITES;
    for (size_t i = 0; i < n; i++) {
        const ag_siterow *r = &t->srows[i];
        printf("site: pid %d  episodes %s (total %s)  blocked %s (total %s)  %s\n", r->s->pid,
               count(a, 32, r->eps), count(b, 32, r->s->eps), secs(c, 32, r->secs),
               secs(d, 32, r->s->secs), ls_term_n(r->s->site, 600));
    }
    if (t->nsrows > n)
        printf("site: ... %zu more\n", t->nsrows - n);
    putchar('\n');
    fflush(stdout);
}

/* ------------------------------------------------------------- screen */

/* The bytes of s (ls_term's output) that fit in maxcols columns. */
static size_t fit_cols(const char *s, int maxcols, int *cols)
{
    mbstate_t ps;
    memset(&ps, 0, sizeof ps);
    size_t i = 0, len = strlen(s);
    int c = 0;
    while (i < len) {
        wchar_t wc;
        size_t n = mbrtowc(&wc, s + i, len - i, &ps);
        int w = 1;
        if (n == (size_t)-1 || n == (size_t)-2 || n == 0) {
            n = 1;
            memset(&ps, 0, sizeof ps);
        } else if ((w = wcwidth(wc)) < 0) {
            w = 1;
        }
        if (c + w > maxcols)
            break;
        c += w;
        i += n;
    }
    *cols = c;
    return i;
}

static void put_line(int y, const char *s)
{
    if (y < 0 || y >= LINES)
        return;
    int cols;
    size_t n = fit_cols(s, COLS, &cols);
    move(y, 0);
    addnstr(s, (int)n);
    clrtoeol();
}

/* s fitted into exactly w columns (padded) at the end of buf. */
static void cat_cell(char *buf, size_t n, const char *s, int w)
{
    size_t at = strlen(buf);
    int cols;
    size_t k = fit_cols(s, w, &cols);
    if (at + k + (size_t)(w - cols) + 2 >= n)
        return;
    memcpy(buf + at, s, k);
    at += k;
    for (int i = cols; i < w; i++)
        buf[at++] = ' ';
    buf[at++] = ' ';
    buf[at] = 0;
}

static void draw(agtop *t)
{
    char h[1024], l[2048];
    erase();
    header(t, h, sizeof h);
    snprintf(l, sizeof l, "loopscope top  %s", h);
    attron(A_BOLD);
    put_line(0, l);
    attroff(A_BOLD);
    status(t, h, sizeof h);
    if (h[0]) {
        attron(A_REVERSE);
        put_line(1, h);
        attroff(A_REVERSE);
    } else if (t->have && !t->prev) {
        put_line(1, "(the interval columns need a second answer)");
    }
    int y = 3, footer = LINES - 1;
    int site_rows = t->nsrows ? (int)(t->nsrows < 10 ? t->nsrows : 10) + 2 : 2;
    snprintf(l, sizeof l, "%-15s %7s %7s %7s %6s %6s %7s %7s %5s %7s %6s %8s", "COMM", "PID",
             "LOOP", "ITER/S", "BUSY", "IDLE", "LAG P50", "P99", "BLOCK", "BLOCKED", "TOTAL",
             "BLOCKED");
    attron(A_BOLD);
    put_line(y++, l);
    attroff(A_BOLD);
    int table_end = footer - site_rows - 1;
    if (table_end < y + 2)
        table_end = y + 2;
    size_t shown = 0;
    for (; shown < t->nrows && y < table_end; shown++, y++) {
        const ag_row *r = &t->rows[shown];
        if (shown + 1 < t->nrows && y + 1 == table_end) {
            snprintf(l, sizeof l, "... %zu more", t->nrows - shown);
            put_line(y++, l);
            break;
        }
        char a[32], b[32], c[32], d[32], e[32], f[32], g[32], k[32], m[32], loop[24] = "-";
        if (r->l)
            snprintf(loop, sizeof loop, "%llu", r->l->loop);
        l[0] = 0;
        cat_cell(l, sizeof l, r->p->info ? ls_term_n(r->p->comm, 64) : "?", 15);
        size_t at = strlen(l);
        snprintf(l + at, sizeof l - at, "%7d %7s %7s %6s %6s %7s %7s %5s %7s %6s %8s", r->p->pid,
                 loop, rate(a, 32, r->ips), pct(b, 32, r->busy), pct(c, 32, r->idle),
                 lag(d, 32, r->p50, r->p50_above), lag(e, 32, r->p99, r->p99_above),
                 count(f, 32, r->l && r->interval ? r->blocks : -1),
                 secs(g, 32, r->l && r->interval ? r->block_s : -1),
                 count(k, 32, r->l ? r->l->blocks : -1), secs(m, 32, r->l ? r->l->block_s : -1));
        put_line(y, l);
    }
    if (!t->nrows && t->have)
        put_line(y++, "(the agent records no process)");
    y = table_end + 1 > y ? table_end + 1 : y + 1;
    if (y < footer) {
        snprintf(l, sizeof l, "-- call sites by blocked time in the last interval (of %zu)",
                 t->nsrows);
        put_line(y++, l);
    }
    if (y < footer) {
        snprintf(l, sizeof l, "%5s %7s %6s %8s %7s  %s", "BLOCK", "BLOCKED", "TOTAL", "BLOCKED",
                 "PID", "SITE");
        attron(A_BOLD);
        put_line(y++, l);
        attroff(A_BOLD);
    }
    for (size_t i = 0; i < t->nsrows && y < footer; i++, y++) {
        const ag_siterow *r = &t->srows[i];
        char a[32], b[32], c[32], d[32];
        snprintf(l, sizeof l, "%5s %7s %6s %8s %7d  %s", count(b, 32, r->eps),
                 secs(a, 32, r->secs), count(d, 32, r->s->eps), secs(c, 32, r->s->secs),
                 r->s->pid, ls_term_n(r->s->site, 600));
        put_line(y, l);
    }
    attron(A_REVERSE);
    put_line(footer, "q quit   (BLOCK, BLOCKED: episodes and time in the last interval; "
                     "TOTAL: since the agent attached)");
    attroff(A_REVERSE);
    refresh();
}

static bool curses_start(agtop *t)
{
    setlocale(LC_CTYPE, "");
    SCREEN *sc = newterm(NULL, stdout, stdin);
    if (!sc)
        return false;
    set_term(sc);
    cbreak();
    noecho();
    nonl();
    nodelay(stdscr, TRUE);
    keypad(stdscr, TRUE);
    curs_set(0);
    t->curses = true;
    return true;
}

/* ------------------------------------------------------------ the loop */

static bool scrape(agtop *t)
{
    size_t len = 0;
    char err[512];
    char *body = fetch(t->host, t->port, &len, err, sizeof err);
    if (!body) {
        if (!t->err[0])
            t->down_since = now_ns();
        snprintf(t->err, sizeof t->err, "%s", err);
        return false;
    }
    ag_snap *next = t->have ? (t->cur == &t->snaps[0] ? &t->snaps[1] : &t->snaps[0]) : t->cur;
    snap_clear(next);
    next->t = now_ns();
    snap_read(next, body, len);
    free(body);
    if (t->have)
        t->prev = t->cur;
    t->cur = next;
    t->have = true;
    t->err[0] = 0;
    if (!compute(t)) {
        snprintf(t->err, sizeof t->err, "out of memory");
        t->down_since = now_ns();
        return false;
    }
    return true;
}

/* Wait until `until` (keys on the screen); true to quit. */
static bool wait_until(agtop *t, int64_t until, bool *redraw)
{
    for (;;) {
        if (stop_signal)
            return true;
        int64_t left = until - now_ns();
        if (left <= 0)
            return false;
        left = (left + 999999) / 1000000;       /* ms, rounded up: never early */
        struct pollfd p = { .fd = 0, .events = POLLIN };
        int n = poll(&p, t->curses ? 1 : 0, (int)(left > 100 ? 100 : left));
        (void)n;
        if (t->curses) {
            int ch;
            while ((ch = getch()) != ERR) {
                if (ch == 'q' || ch == 'Q')
                    return true;
                *redraw = true;               /* KEY_RESIZE among them */
            }
            if (*redraw) {
                draw(t);
                *redraw = false;
            }
        }
    }
}

int cmd_top_agent(int argc, char **argv)
{
    static const struct option opts[] = {
        { "agent", optional_argument, NULL, 'A' },
        { "interval", required_argument, NULL, 'i' },
        { "duration", required_argument, NULL, 'd' },
        { "text", no_argument, NULL, 'T' },
        { "help", no_argument, NULL, 'h' },
        { NULL, 0, NULL, 0 },
    };
    static agtop tt;
    agtop *t = &tt;
    memset(t, 0, sizeof *t);
    t->interval = 1;
    const char *spec = NULL;
    char *end;
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "i:d:h", opts, NULL)) != -1) {
        switch (c) {
        case 'A':
            /* --agent VALUE as well as --agent=VALUE: top takes no
             * positional argument, so a next word not an option is it */
            if (!optarg && optind < argc && argv[optind][0] != '-')
                optarg = argv[optind++];
            spec = optarg ? optarg : "";
            break;
        case 'i':
            t->interval = strtod(optarg, &end);
            if (*end || !(t->interval >= 0.1 && t->interval <= 3600))
                return ls_error("invalid --interval '%s' (seconds, 0.1..3600)", optarg), 2;
            break;
        case 'd':
            t->duration = strtod(optarg, &end);
            if (*end || !(t->duration > 0) || t->duration > 1e9)
                return ls_error("invalid duration '%s' (seconds, > 0)", optarg), 2;
            break;
        case 'T':
            t->text = true;
            break;
        case 'h':
            fputs(usage_agent, stdout);
            return 0;
        default:
            fprintf(stderr, "(-p, -o, -f, -t, --sort and --mode do not go with --agent)\n");
            fputs(usage_agent, stderr);
            return 2;
        }
    }
    if (optind < argc)
        return ls_error("unexpected argument '%s' (see 'loopscope top --help')",
                        ls_term_n(argv[optind], 300)), 2;
    int rc = parse_addr(spec, t->host, t->port);
    if (rc)
        return rc;
    if (!snap_init(&t->snaps[0]) || !snap_init(&t->snaps[1])) {
        snap_free(&t->snaps[0]);
        snap_free(&t->snaps[1]);
        return ls_error("out of memory");
    }
    t->cur = &t->snaps[0];
    t->text = t->text || !isatty(1);
    struct sigaction sa = { .sa_handler = on_signal };   /* no SA_RESTART: polls return */
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    t->start = now_ns();
    if (!scrape(t)) {
        rc = ls_error("%s", t->err);
        goto out;
    }
    if (!t->text && !curses_start(t))
        t->text = true;
    const char *why = NULL;
    int64_t step = (int64_t)(t->interval * 1e9);
    int64_t next = t->start + step;
    int64_t deadline = t->duration > 0 ? t->start + (int64_t)(t->duration * 1e9) : INT64_MAX;
    bool redraw = false;
    if (t->curses)
        draw(t);
    for (;;) {
        if (wait_until(t, next < deadline ? next : deadline, &redraw)) {
            why = "stopped by the user";
            break;
        }
        scrape(t);
        if (t->curses)
            draw(t);
        else
            text_block(t);
        int64_t now = now_ns();
        if (now >= deadline) {
            why = "duration reached";
            break;
        }
        next += step;
        if (next <= now)
            next = now + step;
    }
    if (t->curses) {
        endwin();
        t->curses = false;
    }
    if (t->text || strcmp(why, "stopped by the user"))
        printf("top: stopped: %s\n", why);
out:
    if (t->curses)
        endwin();
    free(t->rows);
    free(t->srows);
    snap_free(&t->snaps[0]);
    snap_free(&t->snaps[1]);
    return rc;
}
