/*
 * commands.h -- the subcommands of the loopscope CLI, one file each
 * (cmd_NAME.c), and the option parsing they share.  Each takes the
 * command's own argv (argv[0] is the command name) and returns the exit
 * status: 0 ok, 1 error (one "error: ..." line printed), 2 usage error.
 */
#ifndef LOOPSCOPE_COMMANDS_H
#define LOOPSCOPE_COMMANDS_H

#include <getopt.h>
#include <stdbool.h>

int cmd_info(int argc, char **argv);
int cmd_tasks(int argc, char **argv);
int cmd_timeline(int argc, char **argv);
int cmd_blocking(int argc, char **argv);
int cmd_graph(int argc, char **argv);
int cmd_export(int argc, char **argv);
int cmd_lint(int argc, char **argv);
int cmd_sql(int argc, char **argv);
int cmd_diff(int argc, char **argv);
int cmd_top(int argc, char **argv);        /* live: tracer/live.h */
int cmd_top_agent(int argc, char **argv);  /* top --agent: an agent's /metrics */

/* A command's own options: getopt_long tables and a handler that returns
 * 0, or non-zero after printing an error for a bad value. */
#define LS_OPT_PID 0x10000         /* --pid's getopt code: no command's own */

typedef struct ls_optspec {
    const struct option *longopts;   /* terminated by a zero entry; may be NULL */
    const char *shortopts;           /* getopt letters, e.g. "o:k:" */
    int (*fn)(int c, const char *arg, void *ctx);
    void *ctx;
} ls_optspec;

/* Parse argv: --help/-h (prints usage to stdout, exits through
 * ls_finish_stdout: 0, or 1 if it could not be written), --json when json is not
 * NULL, --pid PID (every command that reads a trace: ls_trace_pid, trace.h),
 * the command's options, and exactly one positional: the trace path
 * (or, when extra_pos is not NULL, the path then at most one more
 * positional stored there, e.g. the query of `sql`).  Returns 0, or 2
 * after printing a usage error. */
int ls_parse_common(int argc, char **argv, const char *usage, const char **path, bool *json,
                    const ls_optspec *spec, const char **extra_pos);

/* The one check of stdout: flush it and, if any write to it failed, print
 * one "error: cannot write output: ..." line (none for a closed pipe) and
 * return rc, or 1 if rc was 0.  Every way out of loopscope goes through it:
 * main's return, --help, and (registered with atexit by main) any exit()
 * call, where a failed write turns the status into 1. */
int ls_finish_stdout(int rc);
void ls_check_stdout_at_exit(void);

#endif
