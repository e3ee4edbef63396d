/*
 * options.c -- ls_parse_common and the checked end of stdout,
 * ls_finish_stdout and ls_check_stdout_at_exit (commands.h).  Depends on
 * libc only.
 */
#include "commands.h"
#include "trace.h"

#include <assert.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static bool stdout_checked;

int ls_finish_stdout(int rc)
{
    if (stdout_checked)
        return rc;
    stdout_checked = true;
    errno = 0;
    if (fflush(stdout) != 0 || ferror(stdout)) {
        int err = errno ? errno : EIO;
        if (err != EPIPE)
            fprintf(stderr, "error: cannot write output: %s\n", strerror(err));
        return rc ? rc : 1;
    }
    return rc;
}

void ls_check_stdout_at_exit(void)
{
    if (stdout_checked)
        return;
    /* Reached through exit() without ls_finish_stdout: whatever status
     * exit() was given, a lost write must not end in success. */
    if (ls_finish_stdout(0) != 0)
        _exit(1);
}

#define LS_MAX_OPTS 32

int ls_parse_common(int argc, char **argv, const char *usage, const char **path, bool *json,
                    const ls_optspec *spec, const char **extra_pos)
{
    struct option opts[LS_MAX_OPTS];
    int n = 0;
    opts[n++] = (struct option){ "help", no_argument, NULL, 'h' };
    opts[n++] = (struct option){ "pid", required_argument, NULL, LS_OPT_PID };
    if (json)
        opts[n++] = (struct option){ "json", no_argument, NULL, 'J' };
    for (const struct option *o = spec && spec->longopts ? spec->longopts : NULL; o && o->name; o++) {
        assert(n < LS_MAX_OPTS - 1 && "raise LS_MAX_OPTS");
        opts[n++] = *o;
    }
    opts[n] = (struct option){ NULL, 0, NULL, 0 };
    char shortopts[64];
    snprintf(shortopts, sizeof(shortopts), "h%s", spec && spec->shortopts ? spec->shortopts : "");
    const char *cmd = argv[0];
    int c;
    optind = 1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, shortopts, opts, NULL)) != -1) {
        if (c == 'h') {
            fputs(usage, stdout);
            exit(ls_finish_stdout(0));
        } else if (c == 'J' && json) {
            *json = true;
        } else if (c == LS_OPT_PID) {
            char *end;
            errno = 0;
            long long v = strtoll(optarg, &end, 10);
            if (!*optarg || *end || errno || v <= 0 || v > INT32_MAX) {
                fprintf(stderr, "error: %s: invalid --pid '%s' (a process id)\n", cmd, optarg);
                return 2;
            }
            ls_trace_pid = v;
        } else if (c == '?' || c == ':') {
            if (optopt)
                fprintf(stderr, "error: %s: option -%c %s\n", cmd, optopt,
                        c == ':' || strchr(shortopts, optopt) ? "needs a value" : "is unknown");
            else
                fprintf(stderr, "error: %s: option '%s' is unknown or needs a value\n", cmd,
                        argv[optind - 1]);
            fprintf(stderr, "see 'loopscope %s --help'\n", cmd);
            return 2;
        } else if (spec && spec->fn) {
            if (spec->fn(c, optarg, spec->ctx) != 0)
                return 2;
        }
    }
    int npos = argc - optind;
    if (npos < 1) {
        fprintf(stderr, "error: %s: no trace given\nsee 'loopscope %s --help'\n", cmd, cmd);
        return 2;
    }
    if (npos > (extra_pos ? 2 : 1)) {
        fprintf(stderr, "error: %s: unexpected argument '%s'\nsee 'loopscope %s --help'\n", cmd,
                argv[optind + (extra_pos ? 2 : 1)], cmd);
        return 2;
    }
    *path = argv[optind];
    if (extra_pos)
        *extra_pos = npos > 1 ? argv[optind + 1] : NULL;
    return 0;
}
