/*
 * record.c -- `loopscope record`: attach record.bpf.c to a running process
 * (or to a command it starts) and write what it sees into a trace database.
 * Overview: tracer/README.md.  This file is the command: its options and
 * its lifecycle: parse -> find the probes (target.c) -> open skeleton ->
 * configure rodata -> load -> attach (attach.c) -> poll the ring buffer
 * (ingest.c, blocks.c) until the target exits, a signal, or --duration ->
 * finish the database (meta.c, store.c); one cleanup path whose destroy
 * calls accept NULL.  The lifecycle is ls_recorder_open / _run / _close,
 * shared with `loopscope top` (ls_live_run, live.h), which may keep no
 * trace file (r->store NULL: every store writer is then a no-op, and
 * there is no derivation) and watches through hooks (live.c).
 */
#define _GNU_SOURCE
#include "recorder.h"
#include "tracer.h"
#include "live.h"
#include "flight.h"

#include <bpf/libbpf.h>
#include <errno.h>
#include <getopt.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* --max-size: recording stops when the file and its WAL reach this part
 * of the cap less LS_MAX_SIZE_RESERVE and LS_END_BYTES_PER_TASK for each
 * task created so far: what is still in SQLite's page cache, the indexes
 * and the derived tables written at the end (a task_stats and a
 * task_slices row a task: 46-52 bytes with their B-tree pages,
 * tests/bench/results/max_size.txt) fit in the rest (tracer/README.md). */
#define LS_MAX_SIZE_STOP 0.90
#define LS_MAX_SIZE_RESERVE (4ull << 20)
#define LS_END_BYTES_PER_TASK 64
#define LS_MAX_SIZE_MIN (8ull << 20)
/* --backlog (backlog.c): 64 MiB is about 5 s of http_server's records
 * under wrk -c8 on the benchmark machine, 11-12 MB/s of batches */
#define LS_BACKLOG_DEFAULT (64ull << 20)
#define LS_BACKLOG_MIN (1ull << 20)
#define LS_BACKLOG_MAX (64ull << 30)   /* resident from the start: a typo must not take the machine */

static volatile sig_atomic_t ls_stop_signal, ls_usr1;

static void ls_on_signal(int sig) { ls_stop_signal = sig; }
static void ls_on_usr1(int sig) { (void)sig; ls_usr1 = 1; }

int64_t ls_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000ll + ts.tv_nsec;
}

static int ls_libbpf_print(enum libbpf_print_level level, const char *fmt, va_list ap)
{
    if (level == LIBBPF_DEBUG || !getenv("LOOPSCOPE_DEBUG"))
        return 0;
    return vfprintf(stderr, fmt, ap);
}

uint64_t ls_stat(recorder *r, enum ls_stat k)
{
    if (r->offline)                   /* a flight trace: over its window */
        return ls_flight_stat(r->parent, k, r->start_ns);
    int ncpu = libbpf_num_possible_cpus();
    if (ncpu <= 0 || !r->skel)
        return 0;
    uint64_t vals[ncpu], sum = 0;
    uint32_t key = k;
    if (bpf_map__lookup_elem(r->skel->maps.stats, &key, sizeof(key), vals,
                             sizeof(uint64_t) * (size_t)ncpu, 0) != 0)
        return 0;
    for (int i = 0; i < ncpu; i++)
        sum += vals[i];
    return sum;
}

/* ------------------------------------------------------------ the command */

static void ls_usage(FILE *f)
{
    fputs("usage: loopscope record -p PID [-o FILE] [-d SECONDS] [options]\n"
          "       loopscope record [-o FILE] [-d SECONDS] [options] -- CMD [ARGS...]\n"
          "\n"
          "Attach to a running program (or start one) and record it into a SQLite\n"
          "trace: the task lifecycle of a libevl program, or in the generic loop mode\n"
          "(any other process: Python asyncio, Node.js, libuv, redis ...) its loop\n"
          "threads' iterations and blocking calls.  Ends on Ctrl-C/SIGTERM, after\n"
          "--duration, or when the target exits.\n"
          "\n"
          "  -p, --pid PID        attach to this running process\n"
          "  -o, --output FILE    trace database to write (default: trace.db)\n"
          "  -d, --duration SEC   stop after SEC seconds\n"
          "  -f, --force          replace FILE if it exists (only once the new trace is done)\n"
          "      --no-batch       one uprobe hit per event instead of per batch (slower)\n"
          "      --ringbuf-kb N   ring buffer size in KiB, a power of two >= 256 (default 65536)\n"
          "  -t, --block-threshold MS  report loop stalls of at least MS ms (default 10)\n"
          "      --no-blocking    do not detect blocking (no sched_switch program)\n"
          "      --syscalls       also time every syscall of the loop threads (costs\n"
          "                       every process on the machine ~0.1-0.2 us per syscall)\n"
          "      --mode MODE      auto (default: libevl if the target has its probes,\n"
          "                       else generic), libevl or generic\n"
          "      --wait-calls SET generic mode: the calls a loop waits in: epoll (default:\n"
          "                       epoll_wait, epoll_pwait, epoll_pwait2) or all (also\n"
          "                       poll, ppoll, select, pselect6)\n"
          "      --wait-hook HOOK generic mode: how the wait calls are seen: tracepoint\n"
          "                       (default: their own syscall tracepoints) or raw (one\n"
          "                       raw tracepoint on every syscall; see tracer/README.md)\n"
          "  -q, --quiet          no live status line\n"
          "      --priority P     idle (default), batch or normal: idle runs the recorder\n"
          "                       as SCHED_IDLE, on the CPU time the service leaves,\n"
          "                       raised back when starved; batch as SCHED_BATCH, which\n"
          "                       never preempts the service when woken (the default of\n"
          "                       top); normal as any thread (tracer/README.md)\n"
          "      --backlog SIZE   while the machine's CPUs are busy, keep what a loop hands\n"
          "                       over in memory, up to SIZE, and store it when they have\n"
          "                       time to spare, it is 10 s old or recording ends\n"
          "                       (default 64M; 0: store everything as it comes; not with\n"
          "                       --max-size or --flight-recorder; tracer/README.md)\n"
          "      --max-size SIZE  stop (as after --duration) once the trace file and its WAL\n"
          "                       reach 90% of SIZE less 4 MiB and 64 bytes a task, so that\n"
          "                       what is written at the end (indexes, derived tables)\n"
          "                       fits: bytes with a K, M or G suffix (powers of 1024),\n"
          "                       at least 8M; meta\n"
          "                       stop_reason is \"max size reached\"\n"
          "\n"
          "Flight recorder (libevl or generic mode; see tracer/README.md):\n"
          "      --flight-recorder WINDOW  keep the last WINDOW (e.g. 30s, 500ms, 2m) of\n"
          "                       what the probes send in memory, and write a complete trace\n"
          "                       each time a trigger fires, covering [trigger - WINDOW,\n"
          "                       detection + TAIL]: FILE-1.db, FILE-2.db ... beside -o FILE\n"
          "                       (an existing file is never replaced: the next free number)\n"
          "      --trigger blocking>=DUR  a blocking episode of at least DUR (off-CPU: its\n"
          "                       duration; on-CPU: its step's wall time so far); lowers\n"
          "                       --block-threshold to DUR if it is above\n"
          "      --trigger leak   a task leak verdict (libevl)\n"
          "                       SIGUSR1 to the recorder always triggers; a trigger while\n"
          "                       a trace is being captured (its tail) goes into that trace\n"
          "      --tail DUR       how long after the trigger is seen (default 2s)\n"
          "      --flight-memory SIZE  the recorder's own memory for the window: the copied\n"
          "                       messages and the live-task map (default 256M, at least 8M);\n"
          "                       the oldest messages go first when it is full.  RSS stays\n"
          "                       under 2 x the ring buffer + SIZE + 160 MiB\n"
          "\n"
          "example: loopscope record -p $(pidof server) -d 10 -o server.db\n"
          "         loopscope record -p $(pidof server) --flight-recorder 30s \\\n"
          "                  --trigger blocking>=100ms -o /var/tmp/server.db\n", f);
}

/* SIZE: bytes, with an optional K, M, G or T suffix (powers of 1024) and
 * an optional B or iB after it: 500M, 2G, 1.5GiB, 65536. */
static int ls_parse_size(const char *s, uint64_t *out)
{
    char *end;
    if (!*s || !(s[0] >= '0' && s[0] <= '9'))
        return -1;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s)
        return -1;
    double mul = 1;
    switch (*end) {
    case 'k': case 'K': mul = 1024.0; end++; break;
    case 'm': case 'M': mul = 1048576.0; end++; break;
    case 'g': case 'G': mul = 1073741824.0; end++; break;
    case 't': case 'T': mul = 1099511627776.0; end++; break;
    }
    if (mul > 1 && *end == 'i')
        end++;
    if (*end == 'B' || (*end == 'b' && mul > 1))
        end++;
    if (*end || !(v * mul >= 1) || v * mul > 9e18)
        return -1;
    *out = (uint64_t)(v * mul);
    return 0;
}

/* DURATION: a number with a unit, ns, us, ms, s, m or h (seconds if none). */
static int ls_parse_dur(const char *s, int64_t *out)
{
    char *end;
    if (!*s || !((s[0] >= '0' && s[0] <= '9') || s[0] == '.'))
        return -1;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s)
        return -1;
    static const struct { const char *unit; double ns; } units[] = {
        { "", 1e9 }, { "ns", 1 }, { "us", 1e3 }, { "ms", 1e6 }, { "s", 1e9 }, { "m", 60e9 },
        { "h", 3600e9 },
    };
    for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++)
        if (!strcmp(end, units[i].unit)) {
            double ns = v * units[i].ns;
            if (!(ns >= 0) || ns > 9e18)
                return -1;
            *out = (int64_t)ns;
            return 0;
        }
    return -1;
}

static int ls_parse(recorder *r, int argc, char **argv)
{
    static const struct option opts[] = {
        { "pid", required_argument, NULL, 'p' },
        { "output", required_argument, NULL, 'o' },
        { "duration", required_argument, NULL, 'd' },
        { "force", no_argument, NULL, 'f' },
        { "quiet", no_argument, NULL, 'q' },
        { "no-batch", no_argument, NULL, 'B' },
        { "ringbuf-kb", required_argument, NULL, 'R' },
        { "block-threshold", required_argument, NULL, 't' },
        { "no-blocking", no_argument, NULL, 'N' },
        { "syscalls", no_argument, NULL, 'S' },
        { "mode", required_argument, NULL, 'M' },
        { "wait-calls", required_argument, NULL, 'W' },
        { "wait-hook", required_argument, NULL, 'H' },
        { "max-size", required_argument, NULL, 1001 },
        { "flight-recorder", required_argument, NULL, 1002 },
        { "trigger", required_argument, NULL, 1003 },
        { "tail", required_argument, NULL, 1004 },
        { "flight-memory", required_argument, NULL, 1005 },
        { "priority", required_argument, NULL, 1006 },
        { "backlog", required_argument, NULL, 1007 },
        { "help", no_argument, NULL, 'h' },
        { NULL, 0, NULL, 0 },
    };
    int c;
    char *end;
    bool triggers = false, tail = false, memory = false, backlog = false;
    optind = 1;
    while ((c = getopt_long(argc, argv, "+p:o:d:t:fqh", opts, NULL)) != -1) {
        switch (c) {
        case 'p': {
            long v = strtol(optarg, &end, 10);
            if (*end || v <= 0 || v > INT_MAX)
                return 1 + ls_error("invalid pid '%s'", optarg);
            r->pid = (pid_t)v;
            break;
        }
        case 'o':
            r->out = optarg;
            break;
        case 'd':
            r->duration = strtod(optarg, &end);
            if (*end || !(r->duration > 0))
                return 1 + ls_error("invalid duration '%s' (seconds, > 0)", optarg);
            break;
        case 'f':
            r->force = true;
            break;
        case 'q':
            r->quiet = true;
            break;
        case 'B':
            r->no_batch = true;
            break;
        case 'R': {
            long v = strtol(optarg, &end, 10);
            /* Below a few full batches (64 KiB each) most batches would
             * not fit: refused rather than silently lossy. */
            if (*end || v < LS_MIN_RINGBUF_KB || v > (1 << 21) || (v & (v - 1)))
                return 1 + ls_error("invalid --ringbuf-kb '%s' (a power of two, %d..2097152)",
                                    optarg, LS_MIN_RINGBUF_KB);
            r->ringbuf_kb = (unsigned)v;
            break;
        }
        case 't':
            r->threshold_given = true;
            r->block_threshold_ms = strtod(optarg, &end);
            if (*end || !(r->block_threshold_ms >= 0.1) || r->block_threshold_ms > 60000)
                return 1 + ls_error("invalid --block-threshold '%s' (milliseconds, 0.1..60000)",
                                optarg);
            break;
        case 'N':
            r->no_blocking = true;
            break;
        case 'S':
            r->syscalls = true;
            break;
        case 'M':
            if (!strcmp(optarg, "auto"))
                r->mode = LS_MODE_AUTO;
            else if (!strcmp(optarg, "libevl"))
                r->mode = LS_MODE_LIBEVL;
            else if (!strcmp(optarg, "generic"))
                r->mode = LS_MODE_GENERIC;
            else
                return 1 + ls_error("invalid --mode '%s' (auto, libevl or generic)", optarg);
            break;
        case 'W':
            if (strcmp(optarg, "epoll") && strcmp(optarg, "all"))
                return 1 + ls_error("invalid --wait-calls '%s' (epoll or all)", optarg);
            r->wait_all = !strcmp(optarg, "all");
            break;
        case 'H':
            if (strcmp(optarg, "tracepoint") && strcmp(optarg, "raw"))
                return 1 + ls_error("invalid --wait-hook '%s' (tracepoint or raw)", optarg);
            r->wait_raw = !strcmp(optarg, "raw");
            break;
        case 1001:
            if (ls_parse_size(optarg, &r->max_size) < 0 || r->max_size < LS_MAX_SIZE_MIN)
                return 1 + ls_error("invalid --max-size '%s' (bytes with an optional K, M or G "
                                    "suffix, at least 8M)", optarg);
            break;
        case 1002:
            if (ls_parse_dur(optarg, &r->flight_window_ns) < 0 ||
                r->flight_window_ns < 100000000ll || r->flight_window_ns > 3600000000000ll)
                return 1 + ls_error("invalid --flight-recorder '%s' (a duration such as 30s, "
                                    "500ms or 2m: 100ms..1h)", optarg);
            break;
        case 1003: {
            const char *v = optarg;
            if (!strcmp(v, "leak")) {
                r->trig_leak = true;
            } else if (!strncmp(v, "blocking>=", 10) && ls_parse_dur(v + 10, &r->trig_block_ns) == 0
                       && r->trig_block_ns >= 100000 && r->trig_block_ns <= 60000000000ll) {
                ;
            } else {
                return 1 + ls_error("invalid --trigger '%s' (blocking>=DURATION, e.g. "
                                    "blocking>=100ms, 0.1ms..60s; or leak)", optarg);
            }
            triggers = true;
            break;
        }
        case 1004:
            if (ls_parse_dur(optarg, &r->flight_tail_ns) < 0 || r->flight_tail_ns > 600000000000ll)
                return 1 + ls_error("invalid --tail '%s' (a duration such as 2s: 0..10m)", optarg);
            tail = true;
            break;
        case 1005:
            if (ls_parse_size(optarg, &r->flight_memory) < 0 ||
                r->flight_memory < LS_FLIGHT_MIN_MEMORY || r->flight_memory > (1ull << 40))
                return 1 + ls_error("invalid --flight-memory '%s' (bytes with an optional K, M or "
                                    "G suffix, 8M..1T)", optarg);
            memory = true;
            break;
        case 1006:
            r->priority = -1;
            for (int i = 0; i < 3; i++)
                if (!strcmp(optarg, ls_prio_names[i]))
                    r->priority = i;
            if (r->priority < 0)
                return 1 + ls_error("invalid --priority '%s' (normal, batch or idle)", optarg);
            break;
        case 1007:
            r->backlog.limit = 0;
            if ((strcmp(optarg, "0") && ls_parse_size(optarg, &r->backlog.limit) < 0) ||
                (r->backlog.limit && r->backlog.limit < LS_BACKLOG_MIN) ||
                r->backlog.limit > LS_BACKLOG_MAX)
                return 1 + ls_error("invalid --backlog '%s' (bytes with an optional K, M or G "
                                    "suffix: 0, or 1M..64G)", optarg);
            backlog = true;
            break;
        case 'h':
            ls_usage(stdout);
            exit(0);
        default:
            ls_usage(stderr);
            return 2;
        }
    }
    if (optind < argc)
        r->cmd = argv + optind;
    if (!r->pid == !r->cmd)
        return 1 + ls_error("give either -p PID or -- CMD (see 'loopscope record --help')");
    if (!r->flight_window_ns && (triggers || tail || memory))
        return 1 + ls_error("--%s needs --flight-recorder WINDOW",
                            triggers ? "trigger" : tail ? "tail" : "flight-memory");
    if (backlog && r->backlog.limit && (r->max_size || r->flight_window_ns))
        return 1 + ls_error("--backlog does not apply to --%s (%s)",
                            r->max_size ? "max-size" : "flight-recorder",
                            r->max_size ? "the cap is checked against what is stored"
                                        : "its window is in memory already");
    if (!backlog && !r->max_size && !r->flight_window_ns)
        r->backlog.limit = LS_BACKLOG_DEFAULT;
    const char *t = getenv("LOOPSCOPE_TEST_BACKLOG");
    r->backlog.hold = t && !strcmp(t, "hold");
    if (r->flight_window_ns) {
        if (r->max_size)
            return 1 + ls_error("--max-size does not apply to --flight-recorder (each of its "
                                "traces is bounded by --flight-memory)");
        if (r->force)
            return 1 + ls_error("--force does not apply to --flight-recorder (its traces never "
                                "replace a file)");
        if (r->trig_block_ns && r->no_blocking)
            return 1 + ls_error("--trigger blocking needs blocking detection (no --no-blocking)");
        if (!tail)
            r->flight_tail_ns = 2000000000ll;
        if (!memory)
            r->flight_memory = 256ull << 20;
        /* Episodes shorter than --block-threshold are never sent: a
         * blocking trigger below it would never fire. */
        double x = r->trig_block_ns / 1e6;
        if (r->trig_block_ns && r->block_threshold_ms > x) {
            if (r->threshold_given)
                return 1 + ls_error("--block-threshold %g ms is above the blocking trigger's "
                                    "%g ms: shorter episodes would never be seen", 
                                    r->block_threshold_ms, x);
            r->block_threshold_ms = x;
        }
    }
    return 0;
}

static void ls_status(recorder *r, int64_t now, uint64_t *last_ev, int64_t *last_t)
{
    double el = (now - r->start_ns) / 1e9, dt = (now - *last_t) / 1e9;
    uint64_t ev = ls_store_nevents(r->store);
    if (r->generic) {
        fprintf(stderr, "\rrecording pid %d: %.1fs  loop threads %zu  blocking episodes %llu  "
                        "dropped %llu   ", r->pid, el, r->nloops, (unsigned long long)r->blocks,
                (unsigned long long)ls_stat(r, LS_STAT_DROPPED_MSGS));
        return;
    }
    fprintf(stderr, "\rrecording pid %d: %.1fs  %.0f events/s  tasks alive %llu  dropped %llu  "
                    "backlog %.1f MiB   ",
            r->pid, el, dt > 0 ? (ev - *last_ev) / dt : 0.0,
            (unsigned long long)(r->tasks_created - r->tasks_finished),
            (unsigned long long)ls_stat(r, LS_STAT_DROPPED_MSGS), r->backlog.bytes / 1048576.0);
    *last_ev = ev;
    *last_t = now;
}

/* The live replay's one callback, when `top` watches (live.h). */
static void ls_fwd_done(void *ctx, const ls_task *t, bool finished)
{
    recorder *r = ctx;
    if (r->live->task_done)
        r->live->task_done(r->live->ctx, t, finished);
}

/* Everything up to the main loop: the target, the BPF programs loaded and
 * attached, the trace (when r->out), the replay, the signals.  On error
 * returns non-zero after one error line; ls_recorder_close cleans up. */
static int ls_recorder_open(recorder *r, int argc, char **argv)
{
    char errbuf[512];
    int err;
    libbpf_set_print(ls_libbpf_print);
    if ((err = ls_check_privileges()))
        return err;
    /* A bad output is refused before the target is touched; the file
     * itself is made only once every probe is attached, so a failed
     * attach leaves nothing behind. */
    if (r->flight_window_ns) {
        if ((err = ls_flight_open(r)))
            return err;
    } else if (r->out && ls_store_check(r->out, r->force, errbuf, sizeof(errbuf)) < 0) {
        return ls_error("%s", errbuf);
    }

    if (r->cmd) {
        if ((err = ls_spawn(r)))
            return err;
    } else {
        if (kill(r->pid, 0) < 0 && errno == ESRCH)
            return ls_error("no process with pid %d", r->pid);
        if ((err = ls_check_target_access(r->pid)) || (err = ls_find_probes(r)))
            return err;
    }
    r->pidfd = (int)syscall(SYS_pidfd_open, r->pid, 0);
    if (r->pidfd < 0)
        return ls_error("cannot watch pid %d: %s", r->pid, strerror(errno));

    r->skel = record_bpf__open();
    if (!r->skel)
        return ls_error("cannot open the BPF object: %s", strerror(errno));
    r->skel->rodata->target_tgid = (uint32_t)r->pid;
    r->skel->rodata->block_threshold_ns = (uint64_t)(r->block_threshold_ms * 1e6);
    r->skel->rodata->detect_blocking = !r->no_blocking;
    r->skel->rodata->trace_syscalls = r->syscalls;
    r->skel->rodata->generic = r->generic;
    ls_detect_runtime(r, !r->child);
    r->skel->rodata->window_ns = LS_WINDOW_NS;
    r->skel->rodata->wait_all = r->wait_all;
    ls_choose_programs(r);
    if (!r->syscalls) {
        bpf_program__set_autoload(r->skel->progs.on_sys_enter, false);
        bpf_program__set_autoload(r->skel->progs.on_sys_exit, false);
    }
    if (r->no_blocking) {
        bpf_program__set_autoload(r->skel->progs.on_switch, false);
        bpf_program__set_autoload(r->skel->progs.on_cpu_sample, false);
    }
    bpf_map__set_max_entries(r->skel->maps.events, r->ringbuf_kb * 1024u);
    int ncpu = libbpf_num_possible_cpus();
    bpf_map__set_max_entries(r->skel->maps.block_scratch, ncpu > 0 ? (uint32_t)ncpu : 1);
    /* Preallocated (record.h, LS_OPEN_EPISODES): no room where unused. */
    if (r->no_blocking)
        bpf_map__set_max_entries(r->skel->maps.offcpu, 1);
    if (r->no_blocking || !r->generic)
        bpf_map__set_max_entries(r->skel->maps.oncpu_open, 1);
    if ((err = record_bpf__load(r->skel)))
        return ls_error("cannot load the BPF programs: %s%s", strerror(-err),
                        err == -EPERM || err == -EACCES ? " (needs CAP_SYS_ADMIN)" : "");
    /* The handlers before the first probe: a signal that comes once the
     * target's semaphores are up must stop the recording, not kill it. */
    struct sigaction sa = { .sa_handler = ls_on_signal };
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    if (r->flight) {
        struct sigaction su = { .sa_handler = ls_on_usr1 };
        sigemptyset(&su.sa_mask);
        sigaction(SIGUSR1, &su, NULL);
    }
    /* Only kept batches wait in the backlog: none in the generic mode or
     * without batches.  Mapped and touched before the first probe. */
    if (r->generic || r->no_batch)
        r->backlog.limit = 0;
    if ((err = ls_backlog_open(r)))
        return err;
    r->attach_ns = ls_now();
    if ((err = ls_attach_all(r)))
        return err;
    if (r->out && !r->flight) {
        r->store = ls_store_create(r->out, r->force, errbuf, sizeof(errbuf));
        if (!r->store)
            return ls_error("%s", errbuf);
    }
    r->rb = ring_buffer__new(bpf_map__fd(r->skel->maps.events), ls_on_msg, r, NULL);
    if (!r->rb)
        return ls_error("cannot create the ring buffer reader: %s", strerror(errno));
    r->start_ns = ls_now();
    if (r->store)
        ls_write_meta(r, argc, argv);
    /* Recording only stores events: what is derived from them is replayed
     * once they are all in (ls_output_finish), off the target's time. */
    if (!(r->rows = ls_tasks_new(LS_TASKS_MAX)))
        return ls_error("out of memory");
    if (r->live) {
        ls_replay_ops ops = { .on_task_done = ls_fwd_done, .ctx = r, .spans_only = true };
        if (!(r->replay = ls_replay_new(&ops, LS_TASKS_MAX)))
            return ls_error("out of memory");
    }
    if (r->generic && !r->child)
        ls_find_waiting_threads(r);
    if (r->child) {
        if (write(r->go_pipe, "g", 1) != 1)
            return ls_error("cannot start '%s': %s", r->cmd[0], strerror(errno));
        close(r->go_pipe);
        r->go_pipe = -1;
    }

    if (r->flight) {
        if (!r->quiet) {
            char x[32] = "";
            if (r->trig_block_ns)
                snprintf(x, sizeof(x), "blocking>=%g ms, ", r->trig_block_ns / 1e6);
            fprintf(stderr, "flight recorder on pid %d (%s) in the %s: the last %g s in memory "
                            "(at most %llu MiB); triggers: %s%sSIGUSR1; traces '%s-N%s'%s\n",
                    r->pid, r->binary, r->generic ? "generic loop mode" : "libevl mode",
                    r->flight_window_ns / 1e9, (unsigned long long)(r->flight_memory >> 20), x,
                    r->trig_leak ? "leak, " : "", ls_flight_stem(r), ls_flight_ext(r),
                    isatty(2) ? "; Ctrl-C to stop" : "");
        }
    } else if (!r->quiet)
        fprintf(stderr, "recording pid %d (%s) in the %s into '%s'%s\n", r->pid, r->binary,
                r->generic ? "generic loop mode" : "libevl mode", r->out,
                isatty(2) ? "; Ctrl-C to stop" : "");
    return 0;
}

static ls_live_status ls_live_status_now(recorder *r, int64_t now)
{
    return (ls_live_status){
        .pid = r->pid, .binary = r->binary, .generic = r->generic, .start_ns = r->start_ns,
        .now = now, .nloops = r->nloops, .tasks_created = r->tasks_created,
        .tasks_finished = r->tasks_finished, .records = r->records, .blocks = r->blocks,
        .dropped = ls_stat(r, LS_STAT_DROPPED_MSGS), .rejected = r->rejected + r->rejected_msgs,
        .untracked = r->untracked, .replay = r->replay,
    };
}

static void ls_live_tick(recorder *r, int64_t now, const char **why, bool *stop)
{
    ls_live_status st = ls_live_status_now(r, now);
    if (r->live->tick && r->live->tick(r->live->ctx, &st)) {
        *why = "stopped by the user";
        *stop = true;
    }
}

#define LS_DRAIN_MS 20
/* While batches come, the recorder drains on a timer of its own and the
 * BPF side does not wake it for each batch (record.bpf.c,
 * recorder_polling).  The timer aims at one batch per drain: an empty
 * drain lengthens it by a millisecond, one that took several shortens it,
 * within LS_POLL_MIN_MS..LS_POLL_MAX_MS.  After LS_DRAIN_MS without a
 * batch the recorder sleeps until woken again. */
#define LS_POLL_MIN_MS 1
#define LS_POLL_MAX_MS 10
/* A drain's work, at most about: it stops there with messages left, and
 * the next turn drains again without sleeping.  As SCHED_IDLE
 * (LS_DRAIN_IDLE_NS) the service preempts it whenever it wakes, so it may
 * as well empty the ring; the bound is how late the watchdog's beat, a
 * flight trigger or `top` can be.  Otherwise (LS_DRAIN_BUSY_NS) it keeps
 * a producer faster than SQLite from holding off a commit or the stop. */
#define LS_DRAIN_IDLE_NS (LS_DRAIN_MS * 1000000ll)
#define LS_DRAIN_BUSY_NS 200000000ll

/* --max-size: the file and its WAL, against LS_MAX_SIZE_STOP of the cap
 * (the end adds indexes and derived tables: tracer/README.md).  Reached,
 * the trace ends at its newest record (or now, without records: generic
 * mode), and what the ring and the loops still hold is read and released
 * but not stored: after the check that saw the cap, nothing more counts
 * against it but the end. */
bool ls_max_size_reached(recorder *r)
{
    if (r->capped_ns)
        return true;
    if (!r->max_size || !r->store ||
        (double)ls_store_size(r->store) + (double)LS_MAX_SIZE_RESERVE +
                (double)r->tasks_created * LS_END_BYTES_PER_TASK <
            LS_MAX_SIZE_STOP * (double)r->max_size)
        return false;
    int64_t newest = 0;
    for (size_t i = 0; i < r->nloops; i++)
        if (r->loops[i].last_ts > newest)
            newest = r->loops[i].last_ts;
    r->capped_ns = newest > r->start_ns ? newest : ls_now();
    return true;
}

/* The main loop: drain the ring buffer until the target exits, a signal,
 * the duration, or a live hook stops it.  Sets *why; returns non-zero
 * after one error line. */
static int ls_recorder_run(recorder *r, const char **why)
{
    char fail[600] = "";
    bool tty = !r->quiet && isatty(2), stop = false;
    int64_t deadline = r->duration > 0 ? r->start_ns + (int64_t)(r->duration * 1e9) : 0;
    int64_t last_status = r->start_ns, last_tick = 0;
    uint64_t last_ev = 0;
    int poll_ms = 4;                  /* the timer while polling */
    int64_t last_batch = 0;           /* when a drain last took a batch */
    volatile uint32_t *polling = &r->skel->bss->recorder_polling;
    bool backlog_due = false;         /* stored less of the backlog than was due */
    bool behind = false;              /* the last drain stopped on its budget */
    struct pollfd pfd[2] = { { r->pidfd, POLLIN, 0 },
                             { ring_buffer__epoll_fd(r->rb), POLLIN, 0 } };
    *why = "target exited";
    if (r->priority == LS_PRIO_IDLE)
        ls_prio_start(&r->prio, gettid(), r->skel->maps.events);   /* prio.c */
    else if (r->priority == LS_PRIO_BATCH)
        ls_prio_batch(&r->prio, gettid());
    while (!stop) {
        if (ls_stop_signal) {
            *why = ls_stop_signal == SIGINT ? "interrupted (SIGINT)" : "terminated by signal";
            break;
        }
        int64_t now = ls_now();
        if (deadline && now >= deadline) {
            *why = "duration reached";
            break;
        }
        /* Sleep until a batch wakes us (when not polling), a message
         * after an empty ring, the target's exit, or the timer, then drain
         * the ring.  One drain is one burst of CPU: the records that came
         * since the last.  On a loaded machine the target's latency grows
         * with the longest such burst, not with their share of the CPU
         * (tests/bench/results/burst_latency.txt: 1 ms of CPU every 20 ms
         * moves a server's p99 from 0.14 to 0.95 ms; 0.05 ms every 1 ms, to
         * 0.18 ms).  A busy loop hands over a batch every EVL_BATCH_BYTES
         * of records, a quiet one every EVL_TRACE_FLUSH_NS at most: while
         * they come, a drain on the polling timer takes about one batch,
         * as a wakeup per batch did, without the target's thread paying
         * for the wakeup (record.bpf.c, recorder_polling). */
        /* Holding the backlog back (not full), a read is all a batch
         * costs now: every batch that came, on a slower timer.  Full, each
         * batch stores the oldest: drains on the polling timer again, as
         * without a backlog. */
        bool holding = r->backlog.n && r->backlog.n < r->backlog.nslots;
        int wait_ms = backlog_due || behind ? 0 : holding ? LS_DRAIN_MS : *polling ? poll_ms : LS_DRAIN_MS;
        if (poll(pfd, 2, wait_ms) < 0 && errno != EINTR) {
            snprintf(fail, sizeof(fail), "poll: %s", strerror(errno));
            break;
        }
        /* As SCHED_IDLE a drain goes on until the ring is empty (or
         * LS_DRAIN_IDLE_NS): the recorder must keep up on the CPU time the
         * service leaves, or the watchdog raises it (tracer/README.md,
         * "Sharing the CPU") */
        uint64_t batches = r->batches_in;
        int64_t slice = r->prio.started && atomic_load(&r->prio.idle) ? LS_DRAIN_IDLE_NS
                                                                       : LS_DRAIN_BUSY_NS;
        int took_msgs = ls_consume(r, slice);
        behind = took_msgs == -1;     /* budget spent (ingest.c) */
        ls_prio_beat(&r->prio, took_msgs >= 0);
        if (r->backlog.mem)
            backlog_due = ls_backlog_tick(r, ls_now(), slice);
        uint64_t took = r->batches_in - batches;
        if (took) {
            if (*polling && took > 1)
                poll_ms -= poll_ms > LS_POLL_MIN_MS;
            last_batch = ls_now();
            *polling = 1;
        } else if (*polling) {
            poll_ms += poll_ms < LS_POLL_MAX_MS;
            if (ls_now() - last_batch >= LS_DRAIN_MS * 1000000ll)
                *polling = 0;         /* a batch sent meanwhile waits LS_DRAIN_MS at most */
        }
        if (r->flight) {
            bool usr1 = ls_usr1;
            ls_usr1 = 0;
            ls_flight_tick(r, ls_now(), usr1, why);
        }
        if (pfd[0].revents & POLLIN) {
            r->target_gone = true;    /* drain what it sent before dying */
            while (ls_consume(r, 200000000) < 0)
                ;
            if (r->capped_ns)
                *why = "max size reached";  /* before it exited */
            break;
        }
        now = ls_now();
        if (ls_store_tick(r->store, now) < 0) {
            snprintf(fail, sizeof(fail), "writing '%s' failed: %s", r->out,
                     ls_store_error(r->store));
            break;
        }
        if (ls_max_size_reached(r)) {
            *why = "max size reached";
            break;
        }
        if (tty && now - last_status >= 1000000000ll) {
            if (r->flight) {
                char st[160];
                ls_flight_status(r, st, sizeof(st));
                fprintf(stderr, "\r%s   ", st);
                last_status = now;
            } else {
                ls_status(r, now, &last_ev, &last_status);
            }
        }
        if (r->live && now - last_tick >= LS_LIVE_TICK_NS) {
            last_tick = now;
            ls_live_tick(r, now, why, &stop);
        }
    }
    ls_prio_stop(&r->prio);           /* what is left (drain, derive) at full speed */
    if (tty)
        fputc('\n', stderr);
    if (r->live && r->live->stopped) {
        ls_live_status st = ls_live_status_now(r, ls_now());
        r->live->stopped(r->live->ctx, &st, *why);
    }
    return fail[0] ? ls_error("%s", fail) : 0;
}

/* The end of a trace, the recorder's or a flight trace (flight.c, r->offline,
 * whose end_ns is its window's end): the episodes and windows still open
 * in BPF, the end meta, the derived tables replayed from the stored
 * events (open spans end at their loop's stop or end_ns; at most
 * LS_TASKS_MAX live tasks tracked, as while recording), indexes; r->store
 * is NULL afterwards unless finishing failed.  `top` without a trace:
 * only its live replay's end. */
int ls_output_finish(recorder *r, const char *why)
{
    char errbuf[512];
    int err = 0;
    ls_flush_open_episodes(r);
    ls_flush_windows(r);
    ls_store_syscalls(r);
    if (!r->offline)
        r->end_ns = r->capped_ns ? r->capped_ns : ls_now();
    if (r->store)
        ls_write_end_meta(r, why);
    ls_tasks_free(r->rows);           /* everything is in: the derivation's table next */
    r->rows = NULL;
    if (r->replay) {
        for (size_t l = 0; l < r->nloops; l++)
            if (r->loops[l].stopped)
                ls_replay_loop_stop(r->replay, r->loops[l].id, r->loops[l].stopped);
        ls_replay_end(r->replay, r->end_ns);
    }
    if (!r->store)
        return 0;
    ls_store_flush(r->store);
    if (ls_derive_all(ls_store_db(r->store), r->end_ns, LS_TASKS_MAX, errbuf, sizeof(errbuf)) < 0)
        err = ls_error("cannot derive the trace's tables (the viewer derives them on first "
                       "read): %s", errbuf);
    if (ls_store_finish(r->store, errbuf, sizeof(errbuf)) < 0)
        err = ls_error("%s", errbuf);
    r->store = NULL;                  /* ls_store_finish freed it, even on error */
    return err;
}

/* Detach (the target keeps running, its semaphores drop to 0), take what
 * is still in the ring buffer, finish the trace; with finish false (open
 * failed) only the cleanup.  Returns err, or the first error here. */
static int ls_recorder_close(recorder *r, int err, bool finish, const char *why)
{
    char errbuf[512];
    if (!finish)
        goto cleanup;
    ls_flush_loops(r);
    r->detach_ns = ls_now();
    /* The samplers first: once the batch probe is gone the loop stops
     * stamping its steps (evl_loop_pub.since), and a sample would take
     * the last step for one still running. */
    for (int i = 0; i < r->nsampled; i++)
        bpf_link__destroy(r->samplers[i]);
    r->nsampled = 0;
    free(r->samplers);
    r->samplers = NULL;
    for (int i = 0; i < r->nlinks; i++)
        bpf_link__destroy(r->links[i]);
    r->nlinks = 0;
    while (ls_consume(r, 200000000) < 0)
        ;                             /* nothing new arrives once detached */
    ls_backlog_drain(r, 0);
    ls_loops_leave(r);
    if (r->flight) {                  /* no trace of its own: the one being captured */
        ls_flight_close(r, why);
        goto cleanup;
    }
    /* Drained for good: its pages (the data mapped twice) go before the
     * derivation's memory comes. */
    ring_buffer__free(r->rb);
    r->rb = NULL;
    uint64_t nev = ls_store_nevents(r->store);
    bool stored = r->store != NULL;
    int ferr = ls_output_finish(r, why);
    if (ferr && !err)
        err = ferr;
    if (!stored || ferr)              /* no trace, or it could not be finished */
        goto cleanup;
    uint64_t dropped = ls_stat(r, LS_STAT_DROPPED_MSGS), rejected = r->rejected + r->rejected_msgs;
    uint64_t lost = r->generic ? 0 : ls_loop_lost(r);
    double secs = (ls_now() - r->start_ns) / 1e9;
    if (!r->live && (!r->quiet || dropped || lost || rejected)) {
        if (r->generic)
            fprintf(stderr, "recorded %llu blocking episode%s, %llu loop thread%s from pid %d in "
                            "%.1f s into '%s' (%s)", (unsigned long long)r->blocks,
                    r->blocks == 1 ? "" : "s", (unsigned long long)r->nloops,
                    r->nloops == 1 ? "" : "s", r->pid, secs, r->out, why);
        else
            fprintf(stderr, "recorded %llu events, %llu tasks, %llu loop%s from pid %d in %.1f s "
                            "into '%s' (%s)", (unsigned long long)nev,
                    (unsigned long long)r->tasks_created, (unsigned long long)r->nloops,
                    r->nloops == 1 ? "" : "s", r->pid, secs, r->out, why);
        if (dropped)
            fprintf(stderr, "; LOSSY: %llu messages dropped (the target claims %llu events "
                            "in them)", (unsigned long long)dropped,
                    (unsigned long long)ls_stat(r, LS_STAT_CLAIMED_DROPPED));
        if (lost)
            fprintf(stderr, "; LOSSY: the target's loops dropped %llu records while the recorder "
                            "held every buffer they lend (their own count)",
                    (unsigned long long)lost);
        if (rejected)
            fprintf(stderr, "; %llu malformed records or messages rejected",
                    (unsigned long long)rejected);
        fputc('\n', stderr);
    }

cleanup:
    for (int i = 0; i < r->nlinks; i++)
        bpf_link__destroy(r->links[i]);
    for (int i = 0; i < r->nsampled; i++)
        bpf_link__destroy(r->samplers[i]);
    free(r->samplers);
    ring_buffer__free(r->rb);
    record_bpf__destroy(r->skel);
    if (r->store && r->start_ns)      /* an error while recording: keep what was written */
        ls_store_finish(r->store, errbuf, sizeof(errbuf));
    else
        ls_store_abort(r->store);     /* nothing was recorded: leave nothing behind */
    ls_syms_free(r->syms);
    ls_py_free(r->py);
    ls_replay_free(r->replay);
    ls_tasks_free(r->rows);
    ls_live_free(r);
    ls_flight_free(r);
    free(r->loops);
    free(r->ref_buf);
    ls_backlog_free(r);
    if (r->go_pipe >= 0)
        close(r->go_pipe);            /* the child exits without running */
    if (r->child) {
        int status;
        if (!r->target_gone)
            kill(r->child, SIGTERM);
        waitpid(r->child, &status, 0);
    }
    if (r->pidfd >= 0)
        close(r->pidfd);
    return err;
}

int cmd_record(int argc, char **argv)
{
    recorder rr = { .out = "trace.db", .ringbuf_kb = 65536, .block_threshold_ms = 10,
                    .priority = LS_PRIO_IDLE, .pidfd = -1, .go_pipe = -1 };
    recorder *r = &rr;
    const char *why = "";
    r->argc = argc;
    r->argv = argv;
    int err = ls_parse(r, argc, argv);
    if (err)
        return err;
    if ((err = ls_recorder_open(r, argc, argv)))
        return ls_recorder_close(r, err, false, why);
    err = ls_recorder_run(r, &why);
    return ls_recorder_close(r, err, true, why);
}

int ls_live_run(const ls_live_opts *o, const ls_live_hooks *h)
{
    recorder rr = { .pid = o->pid, .out = o->out, .force = o->force, .duration = o->duration,
                    .ringbuf_kb = 65536, .quiet = true, .live = h, .pidfd = -1, .go_pipe = -1,
                    /* not idle: a starved idle recorder is raised after
                     * LS_PRIO_STALL_NS, a second without a redraw */
                    .priority = LS_PRIO_BATCH,
                    .block_threshold_ms = o->block_threshold_ms > 0 ? o->block_threshold_ms : 10,
                    .mode = o->mode == 1 ? LS_MODE_LIBEVL : o->mode == 2 ? LS_MODE_GENERIC
                                                                       : LS_MODE_AUTO };
    recorder *r = &rr;
    const char *why = "";
    int err = ls_recorder_open(r, o->argc, o->argv);
    if (err)
        return ls_recorder_close(r, err, false, why);
    err = ls_recorder_run(r, &why);
    return ls_recorder_close(r, err, true, why);
}
