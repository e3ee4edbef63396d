/*
 * tracer.h -- what the tracer offers the loopscope CLI (viewer/main.c).
 */
#ifndef LOOPSCOPE_TRACER_H
#define LOOPSCOPE_TRACER_H

#ifndef LOOPSCOPE_VERSION
#define LOOPSCOPE_VERSION "0.1.0"
#endif

/* `loopscope record ...`; argv[0] is "record".  Returns the exit status. */
int cmd_record(int argc, char **argv);

/* `loopscope agent ...` (cmd_record.c): a flight recorder on each
 * selected process of a host, its traces in a capped directory, /metrics. */
int cmd_agent(int argc, char **argv);

/* `loopscope ps [--tree|--json] PID` (cmd_ps.c): the asyncio tasks of a
 * running CPython process.  Returns the exit status. */
int cmd_ps(int argc, char **argv);

#endif
