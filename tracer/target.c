/*
 * target.c -- the process `loopscope record` traces: the file holding its
 * evl probes (.note.stapsdt) or else the generic mode, our privileges
 * over it, the command we start (-- CMD), what it runs on (libevl,
 * CPython, Node.js, native), and in the generic mode the threads already
 * waiting when we attach.  Part of the recorder (recorder.h).
 */
#define _GNU_SOURCE
#include "recorder.h"
#include "stapsdt.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

/* Find the file that holds libevl in the target: its executable, else a
 * mapped shared library.  Fills r->binary; -1 if there is none. */
static int probe_file(recorder *r)
{
    char exe[64];
    snprintf(exe, sizeof(exe), "/proc/%d/exe", r->pid);
    /* Attach through /proc/PID/exe: a binary replaced on disk since the
     * process started would otherwise silently record nothing. */
    if (ls_sdt_has_provider(exe, "evl")) {
        snprintf(r->binary, sizeof(r->binary), "%s", exe);
        return 0;
    }
    char maps[64], line[PATH_MAX + 128];
    snprintf(maps, sizeof(maps), "/proc/%d/maps", r->pid);
    FILE *f = fopen(maps, "re");
    if (f) {
        while (fgets(line, sizeof(line), f)) {
            char *path = strchr(line, '/');
            if (!path || !strstr(line, "r-xp"))
                continue;
            path[strcspn(path, "\n")] = 0;
            if (ls_sdt_has_provider(path, "evl")) {
                snprintf(r->binary, sizeof(r->binary), "%s", path);
                fclose(f);
                return 0;
            }
        }
        fclose(f);
    }
    return -1;
}

/* Choose the mode: libevl's probes when the target has them (unless
 * --mode generic), else the generic loop mode (unless --mode libevl). */
int ls_find_probes(recorder *r)
{
    char exe[64];
    snprintf(exe, sizeof(exe), "/proc/%d/exe", r->pid);
    if (r->mode != LS_MODE_GENERIC && probe_file(r) == 0) {
        r->dec = &ls_decoder_evl;
        return 0;
    }
    char target[PATH_MAX] = "?";
    ssize_t n = readlink(exe, target, sizeof(target) - 1);
    if (n > 0)
        target[n] = 0;
    if (r->mode != LS_MODE_LIBEVL) {
        r->dec = &ls_decoder_generic;
        snprintf(r->binary, sizeof(r->binary), "%s", target);
        return 0;
    }
    return ls_error("pid %d (%s) has no loopscope probes: no USDT provider 'evl' in %s or in "
                    "its mapped libraries (is it built with libevl and EVL_PROBES on?)",
                    r->pid, target, exe);
}

/* Effective capabilities of this process (a bit per CAP_ number). */
static unsigned long long cap_eff(void)
{
    unsigned long long eff = 0;
    FILE *f = fopen("/proc/self/status", "re");
    char line[256];
    while (f && fgets(line, sizeof(line), f))
        if (sscanf(line, "CapEff: %llx", &eff) == 1)
            break;
    if (f)
        fclose(f);
    return eff;
}

enum { LS_CAP_DAC_READ_SEARCH = 2, LS_CAP_SYS_PTRACE = 19, LS_CAP_SYS_ADMIN = 21 };

/* Which capabilities recording needs and this process lacks (measured on
 * this project's kernel, tracer/README.md "Privileges"): creating uprobes
 * needs CAP_SYS_ADMIN (CAP_BPF + CAP_PERFMON load the programs but the
 * uprobe perf events fail with EACCES).  Checked on the capabilities, not
 * the uid: root in a container may lack them. */
int ls_check_privileges(void)
{
    if (!(cap_eff() & (1ull << LS_CAP_SYS_ADMIN)))
        return ls_error("recording needs CAP_SYS_ADMIN (uprobes; CAP_BPF and CAP_PERFMON "
                        "are not enough on this kernel); missing: CAP_SYS_ADMIN");
    return 0;
}

/* A target of another user: reading its maps, memory and files (probes,
 * stacks, symbols, the snapshot request) needs CAP_SYS_PTRACE and
 * CAP_DAC_READ_SEARCH. */
int ls_check_target_access(pid_t pid)
{
    char path[64], line[256];
    snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "re");
    long uid = -1;
    while (f && fgets(line, sizeof(line), f))
        if (sscanf(line, "Uid: %*d %ld", &uid) == 1)
            break;
    if (f)
        fclose(f);
    unsigned long long eff = cap_eff();
    bool ptrace = eff & (1ull << LS_CAP_SYS_PTRACE), dac = eff & (1ull << LS_CAP_DAC_READ_SEARCH);
    if (uid < 0 || (uid == (long)geteuid() && uid == (long)getuid()) || (ptrace && dac))
        return 0;
    return ls_error("pid %d runs as uid %ld: reading its memory and files needs CAP_SYS_PTRACE "
                    "and CAP_DAC_READ_SEARCH; missing: %s%s%s", (int)pid, uid,
                    ptrace ? "" : "CAP_SYS_PTRACE", !ptrace && !dac ? ", " : "",
                    dac ? "" : "CAP_DAC_READ_SEARCH");
}

/* Generic mode, a command we started: its first loop thread shows that it
 * runs its program now (past any shell or pyenv shim): what it is. */
void ls_child_runs(recorder *r)
{
    char exe[64], path[PATH_MAX];
    snprintf(exe, sizeof(exe), "/proc/%d/exe", r->pid);
    ssize_t n = readlink(exe, path, sizeof(path) - 1);
    if (n <= 0)
        return;
    path[n] = 0;
    snprintf(r->binary, sizeof(r->binary), "%s", path);
    r->dec->runtime(r, true);
    ls_sink_meta(r, LS_META_TARGET_BINARY, "%s", r->binary);
    ls_sink_meta(r, LS_META_RUNTIME, "%s", r->runtime);
}


/* Process pid's command name (/proc/PID/comm; "" if gone): any byte but
 * NUL, a newline too, so only the last one is the file's. */
void ls_proc_comm(pid_t pid, char *comm, size_t len)
{
    char cp[64];
    snprintf(cp, sizeof cp, "/proc/%d/comm", (int)pid);
    FILE *cf = fopen(cp, "re");
    size_t n = cf ? fread(comm, 1, len - 1, cf) : 0;
    if (cf)
        fclose(cf);
    if (n && comm[n - 1] == '\n')
        n--;
    comm[n] = 0;
}

/* -- CMD: fork a child that waits until we are attached, then execs. */
int ls_spawn(recorder *r)
{
    const char *cmd = r->cmd[0];
    char path[PATH_MAX];
    if (strchr(cmd, '/')) {
        snprintf(path, sizeof(path), "%s", cmd);
    } else {
        const char *env = getenv("PATH");
        char *dirs = strdup(env ? env : "/usr/local/bin:/usr/bin:/bin");
        bool ok = false;
        for (char *save, *d = strtok_r(dirs, ":", &save); d && !ok; d = strtok_r(NULL, ":", &save)) {
            snprintf(path, sizeof(path), "%s/%s", d, cmd);
            ok = access(path, X_OK) == 0;
        }
        free(dirs);
        if (!ok)
            return ls_error("command not found: '%s'", cmd);
    }
    if (access(path, X_OK) != 0)
        return ls_error("cannot execute '%s': %s", path, strerror(errno));
    if (!realpath(path, r->binary))
        return ls_error("cannot resolve '%s': %s", path, strerror(errno));
    bool probes = r->mode != LS_MODE_GENERIC && ls_sdt_has_provider(r->binary, "evl");
    if (!probes && r->mode == LS_MODE_LIBEVL)
        return ls_error("'%s' has no loopscope probes in its executable (for libevl in a shared "
                        "library, start the program and use -p PID)", r->binary);
    r->dec = probes ? &ls_decoder_evl : &ls_decoder_generic;
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) < 0)
        return ls_error("pipe: %s", strerror(errno));
    pid_t c = fork();
    if (c < 0)
        return ls_error("fork: %s", strerror(errno));
    if (c == 0) {
        char b;
        close(fds[1]);
        if (read(fds[0], &b, 1) != 1)
            _exit(127);               /* the recorder gave up */
        execv(r->binary, r->cmd);
        fprintf(stderr, "error: cannot execute '%s': %s\n", r->binary, strerror(errno));
        _exit(127);
    }
    close(fds[0]);
    r->child = c;
    r->pid = c;
    r->go_pipe = fds[1];
    return 0;
}

/* A CPython whose structures we know: where they are, for the BPF side
 * (py_cfg lives in .bss, so it can be set while the programs run; the
 * walk starts once runtime is set, written last).  A command we started
 * is looked at when its first loop thread shows up: by then it runs the
 * interpreter, not the shell or pyenv shim that started it. */
static void detect_python(recorder *r)
{
    struct ls_py_cfg cfg;
    const char *why = NULL;
    char desc[sizeof(r->runtime)];
    if (r->py || !(r->py = ls_py_detect(r->pid, &cfg, desc, sizeof(desc), &why)))
        return;
    uint64_t runtime = cfg.runtime;
    cfg.runtime = 0;
    r->skel->bss->py_cfg = cfg;
    __atomic_store_n(&r->skel->bss->py_cfg.runtime, runtime, __ATOMIC_RELEASE);
    snprintf(r->runtime, sizeof(r->runtime), "%s", desc);
}

/* Generic mode: what the target runs on (meta.runtime, the first line);
 * running: it runs its program (not a command we started that has not
 * exec'd yet). */
void ls_detect_generic_runtime(recorder *r, bool running)
{
    const char *base = strrchr(r->binary, '/');
    base = base ? base + 1 : r->binary;
    if (running)
        detect_python(r);
    if (r->py)
        return;
    if (!strncmp(base, "python", 6))
        snprintf(r->runtime, sizeof(r->runtime), "CPython (no Python stacks)");
    else if (!strcmp(base, "node") || !strcmp(base, "nodejs"))
        snprintf(r->runtime, sizeof(r->runtime), "Node.js");
    else
        snprintf(r->runtime, sizeof(r->runtime), "native");
}

/* Is thread tid of pid asleep in a wait call (wait_calls: LS_WAIT_*), by
 * /proc/PID/task/TID/syscall?  0 no, 1 in epoll_*, 2 in poll or select on
 * some descriptor (one on none is a sleep: CPython 3.10's time.sleep). */
int ls_thread_waits(pid_t pid, long tid, int wait_calls)
{
    static const long calls[] = { SYS_epoll_wait, SYS_epoll_pwait, 441 /* epoll_pwait2 */,
                                  SYS_poll, SYS_ppoll, SYS_select, SYS_pselect6 };
    int ncalls = wait_calls != LS_WAIT_EPOLL ? (int)(sizeof(calls) / sizeof(calls[0]))
                                             : LS_EPOLL_CALLS;
    char sp[96], buf[64], *end;
    snprintf(sp, sizeof(sp), "/proc/%d/task/%ld/syscall", (int)pid, tid);
    int fd = open(sp, O_RDONLY | O_CLOEXEC);
    ssize_t n = fd >= 0 ? read(fd, buf, sizeof(buf) - 1) : -1;
    if (fd >= 0)
        close(fd);
    if (n <= 0)
        return 0;
    buf[n] = 0;
    long nr = strtol(buf, &end, 10);
    if (end == buf)
        return 0;                     /* "running" */
    char *a1;
    unsigned long arg0 = strtoul(end, &a1, 16), arg1 = strtoul(a1, NULL, 16);
    bool nofd = (nr == SYS_poll || nr == SYS_ppoll) ? !arg1
                : (nr == SYS_select || nr == SYS_pselect6) ? !arg0 : false;
    for (int i = 0; i < ncalls; i++)
        if (nr == calls[i])
            return i < LS_EPOLL_CALLS ? 1 : nofd ? 0 : 2;
    return 0;
}

/* Generic mode: threads already asleep in a wait call when we attach are
 * loop threads from the start (else a thread is one from its next wait
 * call on). */
void ls_find_waiting_threads(recorder *r)
{
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/task", r->pid);
    DIR *d = opendir(path);
    struct dirent *e;
    while (d && (e = readdir(d))) {
        char *end;
        long tid = strtol(e->d_name, &end, 10);
        if (*end || tid <= 0 || tid > INT32_MAX)
            continue;
        int call = ls_thread_waits(r->pid, tid, r->wait_calls);
        if (!call)
            continue;
        int64_t now = ls_now();
        /* asleep in epoll_*: an epoll loop, whose poll and select calls
         * are blocking calls from now on (--wait-calls auto) */
        bool epoll = call == 1;
        struct ls_gloop g = { .in_wait = 1, .enter_ns = (uint64_t)now, .epoll = epoll,
                              .polls = !epoll, .w.start_ns = (uint64_t)now };
        uint32_t key = (uint32_t)tid;
        if (bpf_map__update_elem(r->skel->maps.gloops, &key, sizeof(key), &g, sizeof(g),
                                 BPF_NOEXIST) == 0)
            ls_loop_seen(r, key, (uint32_t)r->pid, key, now);
    }
    if (d)
        closedir(d);
}
