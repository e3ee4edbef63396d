/*
 * record.c -- `loopscope record`: attach record.bpf.c to a running process
 * (or to a command it starts) and write what it sees into a trace database.
 * Overview: tracer/README.md.  This file is the command: its options and
 * its lifecycle: parse -> find the probes (target.c) -> open skeleton ->
 * configure rodata -> load -> attach (attach.c) -> poll the ring buffer
 * (ingest.c, blocks.c) until the target exits, a signal, or --duration ->
 * finish the database (meta.c, store.c); one cleanup path whose destroy
 * calls accept NULL.
 */
#define _GNU_SOURCE
#include "recorder.h"
#include "tracer.h"

#include <bpf/libbpf.h>
#include <errno.h>
#include <getopt.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static volatile sig_atomic_t ls_stop_signal;

static void ls_on_signal(int sig) { ls_stop_signal = sig; }

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
          "\n"
          "example: loopscope record -p $(pidof server) -d 10 -o server.db\n", f);
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
        { "help", no_argument, NULL, 'h' },
        { NULL, 0, NULL, 0 },
    };
    int c;
    char *end;
    optind = 1;
    while ((c = getopt_long(argc, argv, "+p:o:d:t:fqh", opts, NULL)) != -1) {
        switch (c) {
        case 'p': {
            long v = strtol(optarg, &end, 10);
            if (*end || v <= 0 || v > INT_MAX)
                return ls_error("invalid pid '%s'", optarg);
            r->pid = (pid_t)v;
            break;
        }
        case 'o':
            r->out = optarg;
            break;
        case 'd':
            r->duration = strtod(optarg, &end);
            if (*end || !(r->duration > 0))
                return ls_error("invalid duration '%s' (seconds, > 0)", optarg);
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
                return ls_error("invalid --ringbuf-kb '%s' (a power of two, %d..2097152)", optarg,
                                LS_MIN_RINGBUF_KB);
            r->ringbuf_kb = (unsigned)v;
            break;
        }
        case 't':
            r->block_threshold_ms = strtod(optarg, &end);
            if (*end || !(r->block_threshold_ms >= 0.1) || r->block_threshold_ms > 60000)
                return ls_error("invalid --block-threshold '%s' (milliseconds, 0.1..60000)",
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
                return ls_error("invalid --mode '%s' (auto, libevl or generic)", optarg);
            break;
        case 'W':
            if (strcmp(optarg, "epoll") && strcmp(optarg, "all"))
                return ls_error("invalid --wait-calls '%s' (epoll or all)", optarg);
            r->wait_all = !strcmp(optarg, "all");
            break;
        case 'H':
            if (strcmp(optarg, "tracepoint") && strcmp(optarg, "raw"))
                return ls_error("invalid --wait-hook '%s' (tracepoint or raw)", optarg);
            r->wait_raw = !strcmp(optarg, "raw");
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
        return ls_error("give either -p PID or -- CMD (see 'loopscope record --help')");
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
    fprintf(stderr, "\rrecording pid %d: %.1fs  %.0f events/s  tasks alive %llu  dropped %llu   ",
            r->pid, el, dt > 0 ? (ev - *last_ev) / dt : 0.0,
            (unsigned long long)(r->tasks_created - r->tasks_finished),
            (unsigned long long)ls_stat(r, LS_STAT_DROPPED_MSGS));
    *last_ev = ev;
    *last_t = now;
}

int cmd_record(int argc, char **argv)
{
    recorder rr = { .out = "trace.db", .ringbuf_kb = 65536, .block_threshold_ms = 10,
                    .pidfd = -1, .go_pipe = -1 };
    recorder *r = &rr;
    char errbuf[512];
    const char *why = "target exited";
    int err = ls_parse(r, argc, argv);
    if (err)
        return err;
    libbpf_set_print(ls_libbpf_print);
    if ((err = ls_check_privileges()))
        return err;
    /* A bad output is refused before the target is touched; the file
     * itself is made only once every probe is attached, so a failed
     * attach leaves nothing behind. */
    if (ls_store_check(r->out, r->force, errbuf, sizeof(errbuf)) < 0)
        return ls_error("%s", errbuf);

    if (r->cmd) {
        if ((err = ls_spawn(r)))
            goto cleanup;
    } else {
        if (kill(r->pid, 0) < 0 && errno == ESRCH) {
            err = ls_error("no process with pid %d", r->pid);
            goto cleanup;
        }
        if ((err = ls_check_target_access(r->pid)) || (err = ls_find_probes(r)))
            goto cleanup;
    }
    r->pidfd = (int)syscall(SYS_pidfd_open, r->pid, 0);
    if (r->pidfd < 0) {
        err = ls_error("cannot watch pid %d: %s", r->pid, strerror(errno));
        goto cleanup;
    }

    r->skel = record_bpf__open();
    if (!r->skel) {
        err = ls_error("cannot open the BPF object: %s", strerror(errno));
        goto cleanup;
    }
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
    bpf_map__set_max_entries(r->skel->maps.scratch, ncpu > 0 ? (uint32_t)ncpu : 1);
    if ((err = record_bpf__load(r->skel))) {
        err = ls_error("cannot load the BPF programs: %s%s", strerror(-err),
                       err == -EPERM || err == -EACCES ? " (needs CAP_SYS_ADMIN)" : "");
        goto cleanup;
    }
    r->attach_ns = ls_now();
    if ((err = ls_attach_all(r)))
        goto cleanup;
    r->store = ls_store_create(r->out, r->force, errbuf, sizeof(errbuf));
    if (!r->store) {
        err = ls_error("%s", errbuf);
        goto cleanup;
    }
    r->rb = ring_buffer__new(bpf_map__fd(r->skel->maps.events), ls_on_msg, r, NULL);
    if (!r->rb) {
        err = ls_error("cannot create the ring buffer reader: %s", strerror(errno));
        goto cleanup;
    }
    r->start_ns = ls_now();
    ls_write_meta(r, argc, argv);
    /* After the meta: the derivation reads the blocking threshold there. */
    r->derive = ls_derive_new(ls_store_db(r->store), errbuf, sizeof(errbuf));
    ls_replay_ops ops = r->derive ? ls_derive_ops(r->derive) : (ls_replay_ops){ 0 };
    r->replay = r->derive ? ls_replay_new(&ops, LS_TASKS_MAX) : NULL;
    if (!r->replay) {
        err = ls_error("%s", r->derive ? "out of memory" : errbuf);
        goto cleanup;
    }
    if (r->generic && !r->child)
        ls_find_waiting_threads(r);
    if (r->child) {
        if (write(r->go_pipe, "g", 1) != 1) {
            err = ls_error("cannot start '%s': %s", r->cmd[0], strerror(errno));
            goto cleanup;
        }
        close(r->go_pipe);
        r->go_pipe = -1;
    }

    struct sigaction sa = { .sa_handler = ls_on_signal };
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    bool tty = !r->quiet && isatty(2);
    if (!r->quiet)
        fprintf(stderr, "recording pid %d (%s) in the %s into '%s'%s\n", r->pid, r->binary,
                r->generic ? "generic loop mode" : "libevl mode", r->out,
                tty ? "; Ctrl-C to stop" : "");
    int64_t deadline = r->duration > 0 ? r->start_ns + (int64_t)(r->duration * 1e9) : 0;
    int64_t last_status = r->start_ns;
    uint64_t last_ev = 0;
    struct pollfd pfd = { r->pidfd, POLLIN, 0 };
    for (;;) {
        if (ls_stop_signal) {
            why = ls_stop_signal == SIGINT ? "interrupted (SIGINT)" : "terminated by signal";
            break;
        }
        int64_t now = ls_now();
        if (deadline && now >= deadline) {
            why = "duration reached";
            break;
        }
        /* Batches arrive without wakeups (BPF_RB_NO_WAKEUP): poll the
         * target's pidfd with a short timeout and drain each time. */
        if (poll(&pfd, 1, 20) < 0 && errno != EINTR) {
            err = ls_error("poll: %s", strerror(errno));
            break;
        }
        ls_consume(r, 200000000);
        if (pfd.revents & POLLIN) {
            r->target_gone = true;    /* drain what it sent before dying */
            while (ls_consume(r, 200000000) < 0)
                ;
            break;
        }
        now = ls_now();
        if (ls_store_tick(r->store, now) < 0) {
            err = ls_error("writing '%s' failed: %s", r->out, ls_store_error(r->store));
            break;
        }
        if (tty && now - last_status >= 1000000000ll)
            ls_status(r, now, &last_ev, &last_status);
    }
    if (tty)
        fputc('\n', stderr);

    /* Detach first (the target keeps running, semaphores drop to 0), then
     * take what is still in the ring buffer. */
    r->detach_ns = ls_now();
    for (int i = 0; i < r->nlinks; i++)
        bpf_link__destroy(r->links[i]);
    r->nlinks = 0;
    for (int i = 0; i < r->nsampled; i++)
        bpf_link__destroy(r->samplers[i]);
    r->nsampled = 0;
    while (ls_consume(r, 200000000) < 0)
        ;                             /* nothing new arrives once detached */
    ls_flush_open_episodes(r);
    ls_flush_windows(r);
    ls_store_syscalls(r);
    ls_write_end_meta(r, why);
    r->end_ns = ls_now();
    /* Open spans end at their loop's stop, or now; then the derived tables. */
    for (size_t l = 0; l < r->nloops; l++)
        if (r->loops[l].stopped)
            ls_replay_loop_stop(r->replay, r->loops[l].id, r->loops[l].stopped);
    ls_replay_end(r->replay, r->end_ns);
    ls_store_flush(r->store);
    if (ls_derive_finish(r->derive, r->replay, errbuf, sizeof(errbuf)) < 0)
        err = ls_error("cannot derive the trace's tables (the viewer derives them on first "
                       "read): %s", errbuf);
    ls_derive_free(r->derive);
    r->derive = NULL;
    uint64_t dropped = ls_stat(r, LS_STAT_DROPPED_MSGS), rejected = r->rejected + r->rejected_msgs;
    uint64_t nev = ls_store_nevents(r->store);
    double secs = (ls_now() - r->start_ns) / 1e9;
    ls_store *st = r->store;
    r->store = NULL;
    if (ls_store_finish(st, errbuf, sizeof(errbuf)) < 0) {
        err = ls_error("%s", errbuf);
        goto cleanup;
    }
    if (!r->quiet || dropped || rejected) {
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
    ring_buffer__free(r->rb);
    record_bpf__destroy(r->skel);
    ls_derive_free(r->derive);        /* its statements, before the store closes */
    if (r->store && r->start_ns)      /* an error while recording: keep what was written */
        ls_store_finish(r->store, errbuf, sizeof(errbuf));
    else
        ls_store_abort(r->store);     /* nothing was recorded: leave nothing behind */
    ls_syms_free(r->syms);
    ls_py_free(r->py);
    ls_replay_free(r->replay);
    free(r->loops);
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
