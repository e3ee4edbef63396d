/*
 * engine.c -- the recorder's one lifecycle, as in libbpf-tools: open (the
 * target found, the BPF object opened, configured, loaded and attached,
 * the trace created) -> run (the main loop: drain the ring buffer into the
 * pipeline until the target exits, a signal, --duration, --max-size or a
 * live hook stops it) -> stop (detach, drain what is left, finish the
 * trace) -> free (one cleanup path whose destroy calls accept NULL).
 * `loopscope record` (cmd_record.c) and `loopscope top` (live.c,
 * ls_live_run) both drive it.  How a message travels through the stages:
 * ARCHITECTURE.md, "The recorder's pipeline".
 */
#define _GNU_SOURCE
#include "recorder.h"
#include "metrics.h"
#include "live.h"
#include "flight.h"

#include <bpf/libbpf.h>
#include <errno.h>
#include <getopt.h>
#include <malloc.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <semaphore.h>
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
static volatile sig_atomic_t ls_stop_signal, ls_usr1;

static void on_signal(int sig) { ls_stop_signal = sig; }
static void on_usr1(int sig) { (void)sig; ls_usr1 = 1; }

/* Loading the BPF object parses the kernel's BTF (about 11 MiB, freed at
 * the load's end) in the loading thread's malloc arena.  A group loads one
 * object per member, each on its member's thread: unbounded, a storm of
 * forks on a busy machine had 64 loads under way at once, 700 MiB of the
 * recorder's memory (tests/tracer/test_group.py, fork_storm).  So at most
 * two loads per CPU at a time (a load waits on the kernel part of its
 * time), each load's freed memory given back as it ends. */
static sem_t load_slots;
static pthread_once_t load_once = PTHREAD_ONCE_INIT;

static void load_slots_init(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    sem_init(&load_slots, 0, n < 1 ? 2 : n > 8 ? 16 : 2 * (unsigned)n);
}

static int load_object(struct record_bpf *skel)
{
    pthread_once(&load_once, load_slots_init);
    while (sem_wait(&load_slots) && errno == EINTR)
        ;
    int err = record_bpf__load(skel);
    malloc_trim(0);
    sem_post(&load_slots);
    return err;
}

int64_t ls_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000ll + ts.tv_nsec;
}

static int libbpf_print(enum libbpf_print_level level, const char *fmt, va_list ap)
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

/* Everything up to the main loop: the target, the BPF programs loaded and
 * attached, the trace (when r->out), the replay, the signals.  On error
 * returns non-zero after one error line; ls_recorder_free cleans up. */
int ls_recorder_open(recorder *r)
{
    char errbuf[512];
    int err;
    libbpf_set_print(libbpf_print);
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
    r->dec->runtime(r, !r->child);
    r->skel->rodata->window_ns = LS_WINDOW_NS;
    r->skel->rodata->wait_all = r->wait_calls == LS_WAIT_ALL;
    r->skel->rodata->wait_auto = r->wait_calls == LS_WAIT_AUTO;
    r->skel->rodata->watch_procs = r->watch_procs;
    bpf_program__set_autoload(r->skel->progs.on_fork, r->watch_procs);
    bpf_program__set_autoload(r->skel->progs.on_exec, r->watch_procs);
    r->dec->configure(r);             /* its programs; the generic flag */
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
    if (r->no_blocking)
        bpf_map__set_max_entries(r->skel->maps.oncpu_open, 1);
    /* A group's member: a few open at once (64 loop threads blocked at
     * once in one process of a group are counted as lost): each is 64 KiB. */
    if (r->member && !r->no_blocking) {
        bpf_map__set_max_entries(r->skel->maps.offcpu, LS_MEMBER_EPISODES);
        bpf_map__set_max_entries(r->skel->maps.oncpu_open, LS_MEMBER_EPISODES);
    }
    if ((err = load_object(r->skel)))
        return ls_error("cannot load the BPF programs: %s%s", strerror(-err),
                        err == -EPERM || err == -EACCES ? " (needs CAP_SYS_ADMIN)" : "");
    /* The handlers before the first probe: a signal that comes once the
     * target's semaphores are up must stop the recording, not kill it. */
    struct sigaction sa = { .sa_handler = on_signal };
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    if (r->flight_window_ns) {
        struct sigaction su = { .sa_handler = on_usr1 };
        sigemptyset(&su.sa_mask);
        sigaction(SIGUSR1, &su, NULL);
    }
    /* Mapped and touched before the first probe. */
    if ((err = ls_backlog_open(r)))
        return err;
    r->attach_ns = ls_now();
    if ((err = ls_attach_all(r)))
        return err;
    /* What names the target's code is taken now and kept up to date by a
     * thread of normal priority (symbols.h, ls_syms_watch), not when the
     * recorder's thread, idle and maybe starved, comes to a message: a
     * short-lived target may have exited by then.  A command we start
     * still runs our image here; the keeper sees its exec within 2 ms. */
    if (!r->offline && !r->parent)
        ls_syms_watch(ls_get_syms(r));
    /* The sinks: `top`'s live view, the trace file. */
    if (r->live && (err = ls_live_sink_add(r)))
        return err;
    if (r->out && !r->flight_window_ns) {
        r->store = ls_store_create(r->out, r->force, errbuf, sizeof(errbuf));
        if (!r->store)
            return ls_error("%s", errbuf);
        if ((err = ls_sink_add(r, &ls_store_sink, r->store)))
            return err;
    }
    if (r->metrics_addr && (err = ls_metrics_start(r, r->metrics_addr)))
        return err;
    r->rb = ring_buffer__new(bpf_map__fd(r->skel->maps.events), ls_on_msg, r, NULL);
    if (!r->rb)
        return ls_error("cannot create the ring buffer reader: %s", strerror(errno));
    r->start_ns = ls_now();
    if (r->store || r->member)        /* a group member's: to its processes row (group.c) */
        ls_write_meta(r, r->argc, r->argv);
    /* Recording only stores events: what is derived from them is replayed
     * once they are all in (ls_output_finish), off the target's time. */
    if (!(r->rows = ls_tasks_new(LS_TASKS_MAX)))
        return ls_error("out of memory");
    if (r->dec->started)
        r->dec->started(r);
    if (r->child) {
        if (write(r->go_pipe, "g", 1) != 1)
            return ls_error("cannot start '%s': %s", r->cmd[0], strerror(errno));
        close(r->go_pipe);
        r->go_pipe = -1;
    }

    if (r->flight_window_ns) {
        if (!r->quiet) {
            char x[32] = "";
            if (r->trig_block_ns)
                snprintf(x, sizeof(x), "blocking>=%g ms, ", r->trig_block_ns / 1e6);
            fprintf(stderr, "flight recorder on pid %d (%s) in the %s: the last %g s in memory "
                            "(at most %llu MiB); triggers: %s%sSIGUSR1; traces '%s-N%s'%s\n",
                    r->pid, r->binary, r->dec->name,
                    r->flight_window_ns / 1e9, (unsigned long long)(r->flight_memory >> 20), x,
                    r->trig_leak ? "leak, " : "", ls_flight_stem(r), ls_flight_ext(r),
                    isatty(2) ? "; Ctrl-C to stop" : "");
        }
    } else if (!r->quiet)
        fprintf(stderr, "recording pid %d (%s) in the %s into '%s'%s\n", r->pid, r->binary,
                r->dec->name, r->out,
                isatty(2) ? "; Ctrl-C to stop" : "");
    ls_metrics_announce(r);
    return 0;
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
int ls_recorder_run(recorder *r, const char **why)
{
    char fail[600] = "";
    bool tty = !r->quiet && isatty(2), stop = false;
    int64_t deadline = r->duration > 0 ? r->start_ns + (int64_t)(r->duration * 1e9) : 0;
    int64_t last_status = r->start_ns, last_tick = 0;
    int poll_ms = 4;                  /* the timer while polling */
    int64_t last_batch = 0;           /* when a drain last took a batch */
    volatile uint32_t *polling = &r->skel->bss->recorder_polling;
    bool hold_due = false;            /* the hold stage passed on less than was due */
    bool behind = false;              /* the last drain stopped on its budget */
    struct pollfd pfd[2 + 16] = { { r->pidfd, POLLIN, 0 },
                                  { ring_buffer__epoll_fd(r->rb), POLLIN, 0 } };
    *why = "target exited";
    /* a census keeps time: starved as SCHED_IDLE it would stop seeing
     * states for as long as the machine's CPUs are busy */
    if (r->priority == LS_PRIO_IDLE && !r->priority_given && r->py && !r->no_tasks &&
        r->census_ms > 0)
        r->priority = LS_PRIO_BATCH;
    if (r->priority == LS_PRIO_IDLE)
        ls_prio_start(&r->prio, gettid(), r->skel->maps.events);   /* prio.c */
    else if (r->priority == LS_PRIO_BATCH)
        ls_prio_batch(&r->prio, gettid());
    while (!stop) {
        if (ls_stop_signal) {
            *why = ls_stop_signal == SIGINT ? "interrupted (SIGINT)" : "terminated by signal";
            break;
        }
        if (atomic_load(&r->stop_req)) {  /* its group stops it (group.c) */
            *why = r->stop_why;
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
        bool holding = r->hold && r->hold->holding && r->hold->holding(r);
        int wait_ms = hold_due || behind ? 0 : holding ? LS_DRAIN_MS : *polling ? poll_ms : LS_DRAIN_MS;
        int tick_ms = r->dec->tick_ms ? r->dec->tick_ms(r) : 0;
        if (tick_ms > 0 && wait_ms > tick_ms)
            wait_ms = tick_ms;
        nfds_t nfd = 2 + (nfds_t)ls_metrics_pollfds(r, pfd + 2, 16);
        if (poll(pfd, nfd, wait_ms) < 0 && errno != EINTR) {
            snprintf(fail, sizeof(fail), "poll: %s", strerror(errno));
            break;
        }
        if (r->metrics)
            ls_metrics_io(r, ls_now());   /* never blocks */
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
        if (r->hold) {                /* what it holds that is due; flight triggers */
            bool usr1 = ls_usr1;
            ls_usr1 = 0;
            hold_due = r->hold->tick(r, ls_now(), slice, usr1);
        }
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
        if (r->dec->tick)
            r->dec->tick(r, now);
        if (ls_max_size_reached(r)) {
            *why = "max size reached";
            break;
        }
        if (tty && r->on_status && now - last_status >= 1000000000ll) {
            r->on_status(r, now);
            last_status = now;
        }
        if (r->live && now - last_tick >= LS_LIVE_TICK_NS) {
            last_tick = now;
            ls_live_tick(r, now, why, &stop);
        }
    }
    ls_prio_stop(&r->prio);           /* what is left (drain, derive) at full speed */
    if (tty)
        fputc('\n', stderr);
    ls_live_stopped(r, *why);
    return fail[0] ? ls_error("%s", fail) : 0;
}

/* The end of a trace, the recorder's or a flight trace (flight_write.c,
 * r->offline, whose end_ns is its window's end): the episodes and windows
 * still open in BPF, the end meta, then each sink's end (the store's: the
 * derived tables replayed from the stored events, indexes; the live
 * view's: its replay's); r->store is NULL afterwards. */
int ls_output_finish(recorder *r, const char *why)
{
    ls_flush_open_episodes(r);
    if (r->dec->flush)
        r->dec->flush(r);
    ls_store_syscalls(r);
    if (!r->offline)
        r->end_ns = r->capped_ns ? r->capped_ns : ls_now();
    if (r->store || r->member)
        ls_write_end_meta(r, why);
    ls_tasks_free(r->rows);           /* everything is in: the derivation's table next */
    r->rows = NULL;
    int err = ls_sinks_end(r, r->end_ns);
    r->store = NULL;                  /* its end finished it, even on error */
    return err;
}

/* Detach (the target keeps running, its semaphores drop to 0), take what
 * is still in the ring buffer, finish the trace (r->trace_done once it is
 * complete).  Returns err, or the first error here. */
int ls_recorder_stop(recorder *r, int err, const char *why)
{
    if (r->dec->detaching)
        r->dec->detaching(r);
    r->detach_ns = ls_now();
    /* The samplers first: once the batch probe is gone the loop stops
     * stamping its steps (evl_loop_pub.since), and a sample would take
     * the last step for one still running. */
    ls_stop_samplers(r);
    for (int i = 0; i < r->nlinks; i++)
        bpf_link__destroy(r->links[i]);
    r->nlinks = 0;
    while (ls_consume(r, 200000000) < 0)
        ;                             /* nothing new arrives once detached */
    if (r->hold && r->hold->drain)
        r->hold->drain(r);            /* the backlog: stored now */
    ls_loops_leave(r);
    if (r->hold && r->hold->close)
        r->hold->close(r, why);       /* the flight recorder: its capture written */
    if (!r->nsinks)                   /* no trace, no live view: nothing to finish */
        return err;
    /* Drained for good: its pages (the data mapped twice) go before the
     * derivation's memory comes. */
    ring_buffer__free(r->rb);
    r->rb = NULL;
    bool stored = r->store != NULL;
    int ferr = ls_output_finish(r, why);
    r->trace_done = stored && !ferr;
    return err ? err : ferr;
}

/* Everything open lets go: what ls_recorder_open made, in any state.  A
 * trace still open (an error while recording) keeps what was written;
 * one with nothing recorded is removed. */
void ls_recorder_free(recorder *r)
{
    char errbuf[512];
    for (int i = 0; i < r->nlinks; i++)
        bpf_link__destroy(r->links[i]);
    ls_blocks_free(r);
    ring_buffer__free(r->rb);
    record_bpf__destroy(r->skel);
    r->skel = NULL;
    if (r->store && r->start_ns)      /* an error while recording: keep what was written */
        ls_store_finish(r->store, errbuf, sizeof(errbuf));
    else
        ls_store_abort(r->store);     /* nothing was recorded: leave nothing behind */
    ls_syms_free(r->syms);
    ls_asyncio_free(r);
    ls_py_free(r->py);
    ls_tasks_free(r->rows);
    ls_sinks_free(r);
    if (r->hold && r->hold->free)
        r->hold->free(r);
    free(r->loops);
    free(r->ref_buf);
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
}
