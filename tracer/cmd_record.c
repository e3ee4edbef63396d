/*
 * cmd_record.c -- the `loopscope record` command: its options (parsed and
 * checked into the recorder's options, before anything is touched), the
 * status line and the summary it prints.  The work is the engine's
 * (engine.c: open -> run -> stop -> free), which `loopscope top` drives
 * too (ls_live_run, live.c).  Overview: tracer/README.md.
 */
#define _GNU_SOURCE
#include "recorder.h"
#include "metrics.h"
#include "tracer.h"
#include "flight.h"

#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LS_MAX_SIZE_MIN (8ull << 20)
/* --backlog (backlog.c): 64 MiB is about 5 s of http_server's records
 * under wrk -c8 on the benchmark machine, 11-12 MB/s of batches */
#define LS_BACKLOG_DEFAULT (64ull << 20)
#define LS_BACKLOG_MIN (1ull << 20)
#define LS_BACKLOG_MAX (64ull << 30)   /* resident from the start: a typo must not take the machine */

static void usage(FILE *f)
{
    fputs("usage: loopscope record -p PID [-o FILE] [-d SECONDS] [options]\n"
          "       loopscope record [-o FILE] [-d SECONDS] [options] -- CMD [ARGS...]\n"
          "       loopscope record {-p PID,PID... | --cgroup PATH | --comm NAME} [--children]\n"
          "                        [-o FILE] [-d SECONDS] [options]\n"
          "\n"
          "Attach to a running program (or start one) and record it into a SQLite\n"
          "trace: the task lifecycle of a libevl program, or in the generic loop mode\n"
          "(any other process: Python asyncio, Node.js, libuv, redis ...) its loop\n"
          "threads' iterations and blocking calls.  Ends on Ctrl-C/SIGTERM, after\n"
          "--duration, or when the target exits.\n"
          "\n"
          "  -p, --pid PID[,PID...]  attach to this running process; several: one\n"
          "                       trace of them all (a process group, below)\n"
          "  -o, --output FILE    trace database to write (default: trace.db)\n"
          "  -d, --duration SEC   stop after SEC seconds\n"
          "  -f, --force          replace FILE if it exists (only once the new trace is done)\n"
          "      --no-batch       one uprobe hit per event instead of per batch (slower)\n"
          "      --ringbuf-kb N   ring buffer size in KiB, a power of two >= 256 (default 65536)\n"
          "  -t, --block-threshold MS  report loop stalls of at least MS ms (default 10)\n"
          "      --no-blocking    do not detect blocking (no sched_switch program)\n"
          "      --no-tasks       generic mode, CPython: no asyncio task lifecycle (the\n"
          "                       census of its tasks), blocking episodes only\n"
          "      --census-ms MS   generic mode, CPython: read the task set every MS ms\n"
          "                       (default 10): the lifecycle's resolution\n"
          "      --task-probe-rate N  generic mode, CPython: probe where each task is made\n"
          "                       and destroyed while at most N are made a second\n"
          "                       (default 2000; over it, or 0: the census alone)\n"
          "      --syscalls       also time every syscall of the loop threads (costs\n"
          "                       every process on the machine ~0.1-0.2 us per syscall)\n"
          "      --mode MODE      auto (default: libevl if the target has its probes,\n"
          "                       else generic), libevl or generic\n"
          "      --metrics [HOST:]PORT  serve running totals in Prometheus's text format\n"
          "                       at http://HOST:PORT/metrics while recording (HOST\n"
          "                       127.0.0.1 unless given; PORT 0: any free one)\n"
          "      --wait-calls SET generic mode: the calls a loop waits in: auto (default:\n"
          "                       epoll_wait, epoll_pwait, epoll_pwait2; poll, ppoll,\n"
          "                       select, pselect6 on threads that never call those),\n"
          "                       epoll (those three only) or all (the seven anywhere)\n"
          "      --wait-hook HOOK generic mode: how the wait calls are seen: tracepoint\n"
          "                       (default: their own syscall tracepoints), raw (one\n"
          "                       raw tracepoint on every syscall) or switch (only the\n"
          "                       waits that sleep, from the scheduler: the agent's\n"
          "                       always-on default; see tracer/README.md)\n"
          "  -q, --quiet          no live status line\n"
          "      --priority P     idle (default), batch or normal: idle runs the recorder\n"
          "                       as SCHED_IDLE, on the CPU time the service leaves,\n"
          "                       raised back when starved; batch as SCHED_BATCH, which\n"
          "                       never preempts the service when woken (the default of\n"
          "                       top, and of a CPython asyncio target's census, which\n"
          "                       must keep its time); normal as any thread\n"
          "                       (tracer/README.md)\n"
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
          "Process groups (one trace, each process in it; see tracer/README.md):\n"
          "      --children       also the processes the selected ones fork, as they\n"
          "                       appear (a pre-fork server's workers), and their own\n"
          "      --cgroup PATH    every process in this cgroup (v2; under /sys/fs/cgroup\n"
          "                       or from its root), as they come, until stopped\n"
          "      --comm NAME      every process named NAME (/proc/PID/comm), as they come,\n"
          "                       until stopped\n"
          "      --loops          every process with a thread asleep in a wait call\n"
          "                       (epoll_wait; poll or select on a descriptor), looked\n"
          "                       for every 2 s\n"
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
static int parse_size(const char *s, uint64_t *out)
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
static int parse_dur(const char *s, int64_t *out)
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

#define LS_GROUP_PIDS 64

/* -p PID[,PID...]: the first into r->pid, every one into sel (a group
 * when more than one). */
static int parse_pids(recorder *r, struct ls_group_sel *sel, pid_t *pids, const char *arg)
{
    const char *p = arg;
    for (;;) {
        char *end;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (end == p || errno || v <= 0 || v > INT_MAX || (*end && *end != ','))
            return 1 + ls_error("invalid pid '%s' (a process id, or several joined by ',')", arg);
        if (sel->npids == LS_GROUP_PIDS)
            return 1 + ls_error("too many pids in '%s' (at most %d)", arg, LS_GROUP_PIDS);
        pids[sel->npids++] = (pid_t)v;
        if (!*end)
            break;
        p = end + 1;
    }
    sel->pids = pids;
    r->pid = pids[0];
    return 0;
}

/* The command line (record's, or the agent's: its options and its
 * configuration file's lines as options before them, cmd_agent). */
static int parse(recorder *r, struct ls_group_sel *sel, int argc, char **argv, bool agent)
{
    static pid_t pids[LS_GROUP_PIDS];
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
        { "no-tasks", no_argument, NULL, 1008 },
        { "census-ms", required_argument, NULL, 1009 },
        { "task-probe-rate", required_argument, NULL, 1010 },
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
        { "metrics", required_argument, NULL, 1011 },
        { "children", no_argument, NULL, 1012 },
        { "cgroup", required_argument, NULL, 1013 },
        { "comm", required_argument, NULL, 1014 },
        { "loops", no_argument, NULL, 1017 },
        { "dir", required_argument, NULL, 1015 },
        { "max-total", required_argument, NULL, 1016 },
        { "help", no_argument, NULL, 'h' },
        { NULL, 0, NULL, 0 },
    };
    int c;
    char *end;
    bool triggers = false, tail = false, memory = false, backlog = false;
    optind = 1;
    while ((c = getopt_long(argc, argv, "+p:o:d:t:fqh", opts, NULL)) != -1) {
        switch (c) {
        case 'p':
            if (sel->npids)
                return 1 + ls_error("-p given twice (several pids: -p PID,PID,...)");
            if (parse_pids(r, sel, pids, optarg))
                return 1;
            break;
        case 1012:
            sel->children = true;
            break;
        case 1013:
            if (sel->ncgroup == LS_SEL_MAX)
                return 1 + ls_error("too many --cgroup (at most %d)", LS_SEL_MAX);
            sel->cgroup[sel->ncgroup++] = optarg;
            break;
        case 1014:
            if (!*optarg || strlen(optarg) > 15)
                return 1 + ls_error("invalid --comm '%s' (a process name, 1..15 bytes as in "
                                    "/proc/PID/comm)", optarg);
            if (sel->ncomm == LS_SEL_MAX)
                return 1 + ls_error("too many --comm (at most %d)", LS_SEL_MAX);
            sel->comm[sel->ncomm++] = optarg;
            break;
        case 1017:
            sel->loops = true;
            break;
        case 1015:
        case 1016:
            if (!agent)
                return 1 + ls_error("--%s is the agent's (loopscope agent)",
                                    c == 1015 ? "dir" : "max-total");
            if (c == 1015)
                sel->dir = optarg;
            else if (parse_size(optarg, &sel->dir_cap) < 0 || sel->dir_cap < (8u << 20))
                return 1 + ls_error("invalid --max-total '%s' (bytes with an optional K, M or "
                                    "G suffix, at least 8M)", optarg);
            break;
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
            r->ringbuf_given = true;
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
        case 1008:
            r->no_tasks = true;
            break;
        case 1009: {
            long v = strtol(optarg, &end, 10);
            if (*end || v < 1 || v > 10000)
                return 1 + ls_error("invalid --census-ms '%s' (milliseconds, 1..10000)", optarg);
            r->census_ms = (int)v;
            break;
        }
        case 1010: {
            long v = strtol(optarg, &end, 10);
            if (*end || v < 0 || v > 10000000)
                return 1 + ls_error("invalid --task-probe-rate '%s' (tasks a second, 0..10000000)",
                                    optarg);
            r->task_probe_rate = (int)v;
            break;
        }
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
            if (!strcmp(optarg, "auto"))
                r->wait_calls = LS_WAIT_AUTO;
            else if (!strcmp(optarg, "epoll"))
                r->wait_calls = LS_WAIT_EPOLL;
            else if (!strcmp(optarg, "all"))
                r->wait_calls = LS_WAIT_ALL;
            else
                return 1 + ls_error("invalid --wait-calls '%s' (auto, epoll or all)", optarg);
            break;
        case 'H':
            if (!strcmp(optarg, "tracepoint"))
                r->wait_hook = LS_HOOK_TRACEPOINT;
            else if (!strcmp(optarg, "raw"))
                r->wait_hook = LS_HOOK_RAW;
            else if (!strcmp(optarg, "switch"))
                r->wait_hook = LS_HOOK_SWITCH;
            else
                return 1 + ls_error("invalid --wait-hook '%s' (tracepoint, raw or switch)", optarg);
            break;
        case 1011: {
            char host[256], port[16];
            if (ls_metrics_parse(optarg, host, port))
                return 2;
            r->metrics_addr = optarg;
            break;
        }
        case 1001:
            if (parse_size(optarg, &r->max_size) < 0 || r->max_size < LS_MAX_SIZE_MIN)
                return 1 + ls_error("invalid --max-size '%s' (bytes with an optional K, M or G "
                                    "suffix, at least 8M)", optarg);
            break;
        case 1002:
            if (parse_dur(optarg, &r->flight_window_ns) < 0 ||
                r->flight_window_ns < 100000000ll || r->flight_window_ns > 3600000000000ll)
                return 1 + ls_error("invalid --flight-recorder '%s' (a duration such as 30s, "
                                    "500ms or 2m: 100ms..1h)", optarg);
            break;
        case 1003: {
            const char *v = optarg;
            if (!strcmp(v, "leak")) {
                r->trig_leak = true;
            } else if (!strncmp(v, "blocking>=", 10) && parse_dur(v + 10, &r->trig_block_ns) == 0
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
            if (parse_dur(optarg, &r->flight_tail_ns) < 0 || r->flight_tail_ns > 600000000000ll)
                return 1 + ls_error("invalid --tail '%s' (a duration such as 2s: 0..10m)", optarg);
            tail = true;
            break;
        case 1005:
            if (parse_size(optarg, &r->flight_memory) < 0 ||
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
            r->priority_given = true;
            break;
        case 1007:
            r->backlog_limit = 0;
            if ((strcmp(optarg, "0") && parse_size(optarg, &r->backlog_limit) < 0) ||
                (r->backlog_limit && r->backlog_limit < LS_BACKLOG_MIN) ||
                r->backlog_limit > LS_BACKLOG_MAX)
                return 1 + ls_error("invalid --backlog '%s' (bytes with an optional K, M or G "
                                    "suffix: 0, or 1M..64G)", optarg);
            backlog = true;
            break;
        case 'h':
            usage(stdout);
            exit(0);
        default:
            usage(stderr);
            return 2;
        }
    }
    if (optind < argc)
        r->cmd = argv + optind;
    bool looks = sel->ncgroup || sel->ncomm || sel->loops;
    if (agent) {
        if (r->cmd || sel->npids)
            return 1 + ls_error("the agent selects processes with --comm, --cgroup and --loops "
                                "(no -p, no -- CMD)");
        if (!looks)
            return 1 + ls_error("the agent needs a selection: --comm NAME, --cgroup PATH or "
                                "--loops (on the command line or in its --config file)");
        if (!r->flight_window_ns)
            r->flight_window_ns = 30000000000ll;
        if (!triggers) {              /* a stall of 100 ms */
            r->trig_block_ns = 100000000ll;
            triggers = true;
        }
        if (!memory)
            r->flight_memory = 32ull << 20;
        memory = true;
        if (!r->metrics_addr)
            r->metrics_addr = "127.0.0.1:9464";
        if (!sel->dir)
            sel->dir = "/var/lib/loopscope";
        if (!sel->dir_cap)
            sel->dir_cap = 1ull << 30;
    } else if ((sel->ncgroup != 0) + (sel->ncomm != 0) + sel->loops > 1) {
        return 1 + ls_error("give one of --cgroup, --comm and --loops");
    }
    bool group = agent || sel->npids > 1 || sel->children || looks;
    if (looks && !agent && (r->pid || r->cmd))
        return 1 + ls_error("--%s selects the processes itself: no -p or -- CMD with it",
                            sel->ncgroup ? "cgroup" : sel->ncomm ? "comm" : "loops");
    if (!agent && !r->pid == !r->cmd && !looks)
        return 1 + ls_error("give either -p PID or -- CMD (see 'loopscope record --help')");
    if (group && r->cmd)
        return 1 + ls_error("--children with -- CMD: start the command, then -p its pid "
                            "--children");
    if (group && ((r->flight_window_ns && !agent) || r->max_size || backlog))
        return 1 + ls_error("--%s does not apply to a process group yet (-p with several "
                            "pids, --children, --cgroup, --comm)",
                            r->flight_window_ns ? "flight-recorder" : r->max_size ? "max-size"
                            : "backlog");
    if (r->metrics_addr && r->flight_window_ns && !agent)
        return 1 + ls_error("--metrics does not apply to --flight-recorder yet (its records "
                            "are decoded only when a trigger fires)");
    if (!r->flight_window_ns && (triggers || tail || memory))
        return 1 + ls_error("--%s needs --flight-recorder WINDOW",
                            triggers ? "trigger" : tail ? "tail" : "flight-memory");
    if (backlog && r->backlog_limit && (r->max_size || r->flight_window_ns))
        return 1 + ls_error("--backlog does not apply to --%s (%s)",
                            r->max_size ? "max-size" : "flight-recorder",
                            r->max_size ? "the cap is checked against what is stored"
                                        : "its window is in memory already");
    if (r->wait_hook == LS_HOOK_SWITCH && r->no_blocking)
        return 1 + ls_error("--wait-hook switch sees the waits from the scheduler's switches, "
                            "which --no-blocking leaves unwatched");
    if (!backlog && !r->max_size && !r->flight_window_ns && !group)
        r->backlog_limit = LS_BACKLOG_DEFAULT;
    const char *t = getenv("LOOPSCOPE_TEST_BACKLOG");
    r->backlog_test_hold = t && !strcmp(t, "hold");
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

/* The live status line, about once a second (r->on_status). */
static void print_status(recorder *r, int64_t now)
{
    static int64_t last_t;
    if (r->flight_window_ns) {
        char st[160];
        ls_flight_status(r, st, sizeof(st));
        fprintf(stderr, "\r%s   ", st);
        return;
    }
    if (!last_t)
        last_t = r->start_ns;
    r->dec->status(r, stderr, (now - r->start_ns) / 1e9, (now - last_t) / 1e9);
    last_t = now;
}

/* The last line: what was recorded, and whether anything was lost. */
static void print_summary(recorder *r, const char *why)
{
    uint64_t dropped = ls_stat(r, LS_STAT_DROPPED_MSGS), rejected = r->rejected + r->rejected_msgs;
    uint64_t lost = ls_loop_lost(r), unread = ls_read_errors(r);
    double secs = (ls_now() - r->start_ns) / 1e9;
    if (r->quiet && !dropped && !lost && !unread && !rejected)
        return;
    r->dec->summary(r, stderr);
    fprintf(stderr, " from pid %d in %.1f s into '%s' (%s)", r->pid, secs, r->out, why);
    if (dropped)
        fprintf(stderr, "; LOSSY: %llu messages dropped (the target claims %llu events "
                        "in them)", (unsigned long long)dropped,
                (unsigned long long)ls_stat(r, LS_STAT_CLAIMED_DROPPED));
    if (lost)
        fprintf(stderr, "; LOSSY: the target's loops dropped %llu records while the recorder "
                        "held every buffer they lend (their own count)",
                (unsigned long long)lost);
    if (unread)
        fprintf(stderr, "; LOSSY: %llu batch%s of records could not be read from the target",
                (unsigned long long)unread, unread == 1 ? "" : "es");
    if (rejected)
        fprintf(stderr, "; %llu malformed records or messages rejected",
                (unsigned long long)rejected);
    fputc('\n', stderr);
}

int cmd_record(int argc, char **argv)
{
    recorder rr = { .out = "trace.db", .ringbuf_kb = 65536, .block_threshold_ms = 10,
                    .census_ms = 10, .task_probe_rate = 2000,
                    .priority = LS_PRIO_IDLE, .pidfd = -1, .go_pipe = -1,
                    .on_status = print_status };
    recorder *r = &rr;
    const char *why = "";
    r->argc = argc;
    r->argv = argv;
    struct ls_group_sel sel = { 0 };
    int err = parse(r, &sel, argc, argv, false);
    if (err)
        return err;
    if (sel.npids > 1 || sel.children || sel.ncgroup || sel.ncomm || sel.loops)
        return ls_group_record(r, &sel, &why);   /* group.c: its own summary */
    if ((err = ls_recorder_open(r))) {
        ls_recorder_free(r);
        return err;
    }
    err = ls_recorder_run(r, &why);
    err = ls_recorder_stop(r, err, why);
    if (r->trace_done)
        print_summary(r, why);
    ls_recorder_free(r);
    return err;
}

/* ---- loopscope agent */

/* The agent's arguments: its configuration file's lines (`key value`,
 * `key = value` or `key`, as the long option --key; # to the end of a
 * line is a comment) first, then its command line, which wins where an
 * option can be given once.  The strings live in *keep (free it). */
static int agent_args(const char *config, int argc, char **argv, int *nargc, char ***nargv,
                      char **keep)
{
    char *text = NULL;
    size_t tlen = 0;
    if (config) {
        FILE *f = fopen(config, "re");
        if (!f)
            return 1 + ls_error("cannot read the configuration '%s': %s", config,
                                strerror(errno));
        char chunk[4096];
        size_t n;
        FILE *m = open_memstream(&text, &tlen);
        while (m && (n = fread(chunk, 1, sizeof(chunk), f)) > 0 && tlen < (1u << 20))
            fwrite(chunk, 1, n, m);
        fclose(f);
        if (!m || fclose(m))
            return 1 + ls_error("out of memory");
        if (tlen >= (1u << 20)) {
            free(text);
            return 1 + ls_error("the configuration '%s' is over 1 MiB", config);
        }
    }
    /* at most two arguments a line, and the command line's */
    size_t lines = 1;
    for (size_t i = 0; i < tlen; i++)
        lines += text[i] == '\n';
    char **v = calloc(2 * lines + (size_t)argc + 1, sizeof(*v));
    char *store = malloc(2 * tlen + 4 * lines + 1);   /* "--" before each key */
    if (!v || !store) {
        free(v);
        free(store);
        free(text);
        return 1 + ls_error("out of memory");
    }
    int n = 0;
    size_t o = 0;
    v[n++] = argv[0];
    for (char *save, *line = text ? strtok_r(text, "\n", &save) : NULL; line;
         line = strtok_r(NULL, "\n", &save)) {
        line[strcspn(line, "#")] = 0;
        char *key = line + strspn(line, " \t\r");
        size_t klen = strcspn(key, " \t\r=");
        if (!klen)
            continue;
        char *val = key + klen;
        val += strspn(val, " \t\r");
        if (*val == '=')
            val += 1 + strspn(val + 1, " \t\r");
        size_t vlen = strlen(val);
        while (vlen && strchr(" \t\r", val[vlen - 1]))
            vlen--;
        v[n++] = store + o;
        o += (size_t)sprintf(store + o, "--%.*s", (int)klen, key) + 1;
        if (vlen) {
            v[n++] = store + o;
            memcpy(store + o, val, vlen);
            store[o + vlen] = 0;
            o += vlen + 1;
        }
    }
    free(text);
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-c") || !strcmp(argv[i], "--config")) {
            i++;
            continue;
        }
        if (!strncmp(argv[i], "--config=", 9))
            continue;
        v[n++] = argv[i];
    }
    *nargc = n;
    *nargv = v;
    keep[0] = store;
    keep[1] = (char *)v;
    return 0;
}

static const char *agent_config;
static int agent_argc;
static char **agent_argv;
static char *agent_keep[2];

static recorder agent_defaults(void)
{
    return (recorder){ .ringbuf_kb = 65536, .block_threshold_ms = 10, .census_ms = 100,
                       .wait_hook = LS_HOOK_SWITCH,
                       .task_probe_rate = 2000, .priority = LS_PRIO_IDLE, .pidfd = -1,
                       .go_pipe = -1 };
}

/* SIGHUP: the configuration again; what it says from now on (processes
 * already recorded keep the options they were attached with). */
static int agent_reload(recorder *r, struct ls_group_sel *sel)
{
    int nargc;
    char **nargv, *keep[2];
    if (agent_args(agent_config, agent_argc, agent_argv, &nargc, &nargv, keep))
        return 1;
    recorder t = agent_defaults();
    struct ls_group_sel ns = { .reload = agent_reload };
    if (parse(&t, &ns, nargc, nargv, true)) {
        free(keep[0]);
        free(keep[1]);
        return 1;
    }
    *sel = ns;
    r->flight_window_ns = t.flight_window_ns;
    r->flight_tail_ns = t.flight_tail_ns;
    r->flight_memory = t.flight_memory;
    r->trig_block_ns = t.trig_block_ns;
    r->trig_leak = t.trig_leak;
    r->block_threshold_ms = t.block_threshold_ms;
    r->census_ms = t.census_ms;
    r->no_tasks = t.no_tasks;
    r->no_blocking = t.no_blocking;
    r->wait_hook = t.wait_hook;
    r->quiet = t.quiet;
    free(agent_keep[0]);
    free(agent_keep[1]);
    agent_keep[0] = keep[0];
    agent_keep[1] = keep[1];
    return 0;
}

int cmd_agent(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            fputs("usage: loopscope agent [-c FILE] [--comm NAME]... [--cgroup PATH]... [--loops]\n"
                  "                       [--dir DIR] [--max-total SIZE] [--metrics [HOST:]PORT]\n"
                  "                       [--flight-recorder WINDOW] [--trigger T]... [options]\n"
                  "\n"
                  "Watch a host's event-loop processes and keep a flight recorder on each:\n"
                  "every process whose name is a --comm, that is in a --cgroup, or (--loops)\n"
                  "that has an event loop, is attached\n"
                  "as it appears and let go as it exits; each trigger writes a trace of that\n"
                  "process into DIR (COMM-PID-N.db), whose traces are kept under --max-total\n"
                  "(the oldest removed first); /metrics serves every process's loop lag,\n"
                  "blocking episodes by kind and call site, tasks by state and the agent's own\n"
                  "cost in Prometheus's text format.  SIGHUP reads the configuration again;\n"
                  "SIGTERM or Ctrl-C detaches from everything.\n"
                  "\n"
                  "  -c, --config FILE    options, one a line: `comm python3`, `trigger =\n"
                  "                       blocking>=200ms` (the long options without --);\n"
                  "                       the command line's come after the file's\n"
                  "      --comm NAME      processes named NAME (/proc/PID/comm); repeatable\n"
                  "      --cgroup PATH    processes in this cgroup (v2: from its root, or a\n"
                  "                       path); repeatable\n"
                  "      --loops          every process with a thread asleep in a wait call\n"
                  "                       (epoll_wait; poll or select on a descriptor)\n"
                  "      --dir DIR        where the traces go (default /var/lib/loopscope)\n"
                  "      --max-total SIZE their total size at most (default 1G)\n"
                  "      --metrics [HOST:]PORT  the endpoint (default 127.0.0.1:9464)\n"
                  "      --flight-recorder WINDOW  each process's window in memory (default 30s)\n"
                  "      --trigger T      blocking>=DUR (default blocking>=100ms) or leak\n"
                  "      --flight-memory SIZE  each process's memory for its window (default 32M)\n"
                  "      --check          read the configuration, print what it says, exit\n"
                  "      and record's --tail, -t, --no-tasks, --census-ms, --wait-calls,\n"
                  "      --wait-hook (default switch: the always-on mode), -q\n"
                  "\n"
                  "example: loopscope agent --comm python3 --comm node --dir /var/lib/loopscope\n"
                  "         (examples/loopscope-agent.service runs it under systemd)\n", stdout);
            return 0;
        }
        if ((!strcmp(argv[i], "-c") || !strcmp(argv[i], "--config")) && i + 1 < argc)
            agent_config = argv[i + 1];
        else if (!strncmp(argv[i], "--config=", 9))
            agent_config = argv[i] + 9;
    }
    agent_argc = argc;
    agent_argv = argv;
    int nargc;
    char **nargv;
    if (agent_args(agent_config, argc, argv, &nargc, &nargv, agent_keep))
        return 1;
    recorder rr = agent_defaults();
    recorder *r = &rr;
    r->argc = argc;
    r->argv = argv;
    struct ls_group_sel sel = { .reload = agent_reload };
    /* --check: the configuration read and said, nothing attached */
    bool check = false;
    for (int i = 1; i < argc; i++)
        check = check || !strcmp(argv[i], "--check");
    for (int i = 1; check && i < nargc; i++)
        if (!strcmp(nargv[i], "--check"))
            nargv[i] = "--quiet";
    int err = parse(r, &sel, nargc, nargv, true);
    if (!err && check) {
        for (int i = 0; i < sel.ncomm; i++)
            printf("comm %s\n", sel.comm[i]);
        for (int i = 0; i < sel.ncgroup; i++)
            printf("cgroup %s\n", sel.cgroup[i]);
        if (sel.loops)
            printf("loops\n");
        printf("dir %s\nmax-total %llu\nmetrics %s\nflight-recorder %gs\ntrigger "
               "blocking>=%gms%s\ntail %gs\nflight-memory %llu\n", sel.dir,
               (unsigned long long)sel.dir_cap, r->metrics_addr, r->flight_window_ns / 1e9,
               r->trig_block_ns / 1e6, r->trig_leak ? "\ntrigger leak" : "",
               r->flight_tail_ns / 1e9, (unsigned long long)r->flight_memory);
    } else if (!err) {
        const char *why = "";
        err = ls_group_record(r, &sel, &why);
    }
    free(agent_keep[0]);
    free(agent_keep[1]);
    return err;
}
