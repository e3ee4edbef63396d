/*
 * cmd_diff.c -- `loopscope diff BEFORE AFTER`: what changed between two
 * recordings of the same service: blocking sites (new, gone, worse,
 * better), tasks grouped by name (count, busy and scheduled time, step
 * latency p50/p99), loop iteration latency, leaks.  Terminal tables, --json,
 * and --svg (diff_svg.c).  Depends on trace.h, output.h, loopstat.h
 * (iteration_hist) and gv.h (--svg's output checks).
 */
#define _GNU_SOURCE
#include "commands.h"
#include "diff.h"
#include "loopstat.h"
#include "gv.h"
#include "output.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char usage[] =
    "usage: loopscope diff BEFORE AFTER [--svg FILE] [--limit N] [--json]\n"
    "\n"
    "What changed between two recordings of the same service, e.g. before and\n"
    "after a fix:\n"
    "  blocking sites   by the application frame that made the blocking call\n"
    "                   (function, file:line, as `blocking` shows them): episodes,\n"
    "                   total and longest stall before -> after; new, gone,\n"
    "                   worse or better (total stall time changed by more than\n"
    "                   10% and 1ms); sites only in one trace but in the same\n"
    "                   function (as many each side) are the same sites moved by\n"
    "                   an edit, paired in line order\n"
    "  tasks by name    tasks grouped by name with each run of digits as '*'\n"
    "                   (conn-17 and conn-18 are conn-*): count, busy and\n"
    "                   scheduled time, steps, step latency p50/p99 (a step: from\n"
    "                   task_run to the task's next event; exact up to 4096 steps\n"
    "                   per name, then within 1/8 of a power of two); worse or\n"
    "                   better by the p99 step (10% and 100us)\n"
    "  loops            iteration latency p50/p99 per loop (iteration_hist, upper\n"
    "                   bounds of power-of-two buckets), loops matched in order\n"
    "  leaks            leaked tasks per leak kind and task name\n"
    "Only episodes at least as long as both recordings' blocking thresholds\n"
    "are compared.  Tasks and leaks are compared when both traces have a task\n"
    "lifecycle: libevl's, or a generic-mode trace's census of its asyncio tasks\n"
    "(its times as the censuses saw them: a note says so).  Traces of different\n"
    "programs, or a libevl trace against a generic-mode one without a census,\n"
    "still diff: what cannot be compared is said.\n"
    "\n"
    "  --svg FILE   the blocking call graph of both, coloured by change: new red,\n"
    "               gone grey and dashed, worse orange, better green\n"
    "  --limit N    at most N rows per table (default 20; --json lists all)\n"
    "  --json       JSON instead of text\n"
    "\n"
    "example: loopscope diff before.db after.db --svg change.svg\n";

const char *const diff_change_name[DC_N] = { "same", "new", "gone", "worse", "better", "n/a" };

struct opts {
    const char *svg;
    long limit;
};

static int on_opt(int c, const char *arg, void *ctx)
{
    struct opts *o = ctx;
    char *end;
    if (c == 's') {
        o->svg = arg;
    } else if (c == 'l') {
        o->limit = strtol(arg, &end, 10);
        if (*end || o->limit <= 0)
            return ls_error("diff: invalid --limit '%s'", arg);
    }
    return 0;
}

enum diff_change diff_compare(int64_t before, int64_t after, int64_t min_abs)
{
    int64_t d = after - before;      /* both clamped: no overflow */
    if (d >= min_abs && (double)after > 1.1 * (double)before)
        return DC_WORSE;
    if (-d >= min_abs && (double)after < (double)before / 1.1)
        return DC_BETTER;
    return DC_SAME;
}

/* SQL name_pattern(name): ls_name_pattern (trace.h), as graph --kind tasks
 * groups sibling tasks. */
static void sql_name_pattern(sqlite3_context *cx, int argc, sqlite3_value **argv)
{
    (void)argc;
    const unsigned char *s = sqlite3_value_text(argv[0]);
    if (!s) {
        sqlite3_result_null(cx);
        return;
    }
    char *p = ls_name_pattern((const char *)s);
    if (!p) {
        sqlite3_result_error_nomem(cx);
        return;
    }
    sqlite3_result_text(cx, p, -1, free);
}

/* ---------------------------------------------------------------- sides */

/* "prog args" from meta target_cmdline (or target_binary), the program's
 * directory cut; *program gets the program's file name. */
static char *target_of(ls_trace *t, char **program)
{
    char *cmd = ls_meta(t, LS_META_TARGET_CMDLINE);
    if (!cmd || !*cmd) {
        free(cmd);
        cmd = ls_meta(t, LS_META_TARGET_BINARY);
    }
    if (!cmd)
        cmd = strdup("?");
    size_t first = strcspn(cmd, " ");
    const char *base = cmd;
    for (const char *p = cmd; p < cmd + first; p++)
        if (*p == '/' && p + 1 < cmd + first)
            base = p + 1;
    *program = strndup(base, (size_t)(cmd + first - base));
    char *r = strdup(base);
    free(cmd);
    return r;
}

static bool side_open(struct diff_side *s, const char *path)
{
    memset(s, 0, sizeof(*s));
    s->path = path;
    s->t = ls_trace_open(path);
    if (!s->t)
        return false;
    if (!ls_create_app_frames(s->t) ||
        sqlite3_create_function(s->t->db, "name_pattern", 1, SQLITE_UTF8 | SQLITE_DETERMINISTIC,
                                NULL, sql_name_pattern, NULL, NULL) != SQLITE_OK)
        return false;
    s->target = target_of(s->t, &s->program);
    s->generic = ls_is_generic(s->t);
    s->lifecycle = ls_has_lifecycle(s->t);
    s->source = ls_lifecycle_text(s->t);
    s->task_source = ls_meta(s->t, LS_META_TASK_SOURCE);
    char *det = ls_meta(s->t, LS_META_BLOCKING_DETECTION);
    s->detection_off = det && !strcmp(det, "off");
    free(det);
    ls_drops d;
    ls_read_drops(s->t, &d);
    s->lossy = ls_drops_lossy(&d);
    s->duration_ns = ls_meta_ts(s->t, LS_META_DURATION_NS, 0);
    if (s->duration_ns <= 0)
        s->duration_ns = ls_ts(ls_meta_ts(s->t, LS_META_END_NS, 0) -
                               ls_meta_ts(s->t, LS_META_START_NS, 0));
    s->threshold_ns = ls_meta_ts(s->t, LS_META_BLOCK_THRESHOLD_NS, 0);
    if (s->threshold_ns < 0)
        s->threshold_ns = 0;
    s->tasks = ls_query_int(s->t, "SELECT count(*) FROM tasks");
    s->episodes = ls_query_int(s->t, "SELECT count(*) FROM blocking");
    return true;
}

static void side_close(struct diff_side *s)
{
    ls_trace_close(s->t);
    free(s->target);
    free(s->program);
    free(s->source);
    free(s->task_source);
}


/* ------------------------------------------------------------- output */

static void json_side(ls_json *j, const struct diff_side *s)
{
    ls_json_begin_object(j);
    ls_json_key(j, "path"); ls_json_str(j, s->path);
    ls_json_key(j, "target"); ls_json_str(j, s->target);
    ls_json_key(j, "mode"); ls_json_str(j, s->generic ? "generic" : "libevl");
    if (s->task_source) {     /* only then: older outputs stay as they were */
        ls_json_key(j, "lifecycle"); ls_json_bool(j, s->lifecycle);
        ls_json_key(j, "task_source"); ls_json_str(j, s->task_source);
    }
    ls_json_key(j, "duration_ns"); ls_json_int(j, s->duration_ns);
    ls_json_key(j, "tasks"); ls_json_int(j, s->tasks);
    ls_json_key(j, "blocking_episodes"); ls_json_int(j, s->episodes);
    ls_json_key(j, "block_threshold_ns"); ls_json_int(j, s->threshold_ns);
    ls_json_key(j, "blocking_detection"); ls_json_bool(j, !s->detection_off);
    ls_json_key(j, "lossy"); ls_json_bool(j, s->lossy);
    ls_json_end_object(j);
}

/* The notes on what cannot be compared, or only with care. */
static int make_notes(struct diff_side s[2], int64_t min_ns, char *notes[8])
{
    static const char *const which[2] = { "BEFORE", "AFTER" };
    char d1[32], d2[32], d3[32];
    int n = 0;
    if (strcmp(s[0].program, s[1].program) &&
        asprintf(&notes[n], "the traces are of different programs (%s, %s): the comparison may "
                            "mean little", s[0].program, s[1].program) >= 0)
        n++;
    /* Tasks, steps and leaks are compared when both have a lifecycle. */
    if (s[0].lifecycle != s[1].lifecycle) {
        int g = s[0].lifecycle ? 1 : 0;   /* the one without */
        if (!s[1 - g].generic &&
            asprintf(&notes[n], "%s is a generic-mode trace and %s a libevl one: tasks, steps and "
                                "leaks cannot be compared (a generic trace has no task lifecycle)",
                     which[g], which[1 - g]) >= 0)
            n++;
        else if (s[1 - g].generic &&
                 asprintf(&notes[n], "%s has no task lifecycle (no census of its asyncio tasks) "
                                     "and %s has one: tasks, steps and leaks cannot be compared",
                          which[g], which[1 - g]) >= 0)
            n++;
    } else if (!s[0].lifecycle &&
               asprintf(&notes[n], "generic-mode traces have no task lifecycle: tasks, steps and "
                                   "leaks are not compared") >= 0) {
        n++;
    } else {
        for (int k = 0; k < 2; k++)
            if (s[k].source &&
                asprintf(&notes[n], "%s has an %s: its busy, scheduled and step times are as "
                                    "the censuses saw them (a step between two censuses is not "
                                    "seen), compare them with care", which[k], s[k].source) >= 0)
                n++;
    }
    for (int k = 0; k < 2; k++)
        if (s[k].detection_off &&
            asprintf(&notes[n], "blocking detection was off in %s: its blocking sites are unknown",
                     which[k]) >= 0)
            n++;
    if (s[0].threshold_ns != s[1].threshold_ns &&
        asprintf(&notes[n], "the blocking thresholds differ (%s, %s): episodes of at least %s are "
                            "compared", ls_fmt_dur(d1, sizeof(d1), s[0].threshold_ns),
                 ls_fmt_dur(d2, sizeof(d2), s[1].threshold_ns),
                 ls_fmt_dur(d3, sizeof(d3), min_ns)) >= 0)
        n++;
    for (int k = 0; k < 2; k++)
        if (s[k].lossy && asprintf(&notes[n], "%s lost events (dropped or rejected records): its "
                                              "counts are lower bounds", which[k]) >= 0)
            n++;
    return n;
}

/* ---------------------------------------------------------------- main */

int cmd_diff(int argc, char **argv)
{
    struct opts o = { .svg = NULL, .limit = 20 };
    static const struct option longopts[] = {
        { "svg", required_argument, NULL, 's' },
        { "limit", required_argument, NULL, 'l' },
        { 0 },
    };
    ls_optspec spec = { longopts, "", on_opt, &o };
    const char *paths[2] = { NULL, NULL };
    bool json = false;
    int rc = ls_parse_common(argc, argv, usage, &paths[0], &json, &spec, &paths[1]);
    if (rc)
        return rc;
    if (!paths[1]) {
        fprintf(stderr, "error: diff: two traces needed, BEFORE and AFTER\n"
                        "see 'loopscope diff --help'\n");
        return 2;
    }
    if (o.svg && gv_check_writable("diff", o.svg))
        return 1;

    struct diff_side s[2];
    struct diff_site *sites = NULL;
    struct diff_group *groups = NULL;
    struct diff_leak *leaks = NULL;
    size_t nsites = 0, ngroups = 0, nleaks = 0, nl[2] = { 0, 0 };
    ls_loopstat *ls[2] = { NULL, NULL };
    char *notes[8] = { 0 };
    int nnotes = 0;
    rc = 1;
    memset(s, 0, sizeof(s));
    if (!side_open(&s[0], paths[0]) || !side_open(&s[1], paths[1]))
        goto out;
    int64_t min_ns = s[0].threshold_ns > s[1].threshold_ns ? s[0].threshold_ns : s[1].threshold_ns;
    bool lifecycle = s[0].lifecycle && s[1].lifecycle;
    if (!diff_read_sites(s, min_ns, &sites, &nsites) ||
        (lifecycle && (!diff_read_groups(s, &groups, &ngroups) ||
                       !diff_read_leaks(s, &leaks, &nleaks))) ||
        !ls_loopstats_read(s[0].t, &ls[0], &nl[0]) || !ls_loopstats_read(s[1].t, &ls[1], &nl[1]))
        goto out;
    nnotes = make_notes(s, min_ns, notes);

    bool changed = false;
    ls_json jj, *j = NULL;
    char d[32];
    if (json) {
        j = &jj;
        ls_json_init(j, stdout);
        ls_json_begin_object(j);
        ls_json_key(j, "before"); json_side(j, &s[0]);
        ls_json_key(j, "after"); json_side(j, &s[1]);
        ls_json_key(j, "notes");
        ls_json_begin_array(j);
        for (int i = 0; i < nnotes; i++)
            ls_json_str(j, notes[i]);
        ls_json_end_array(j);
    } else {
        for (int k = 0; k < 2; k++)
            printf("%-7s %s: %s (%s), %s, %lld task%s, %lld blocking episode%s\n",
                   k ? "after:" : "before:", ls_term(s[k].path), ls_term(s[k].target),
                   s[k].source ? "generic, asyncio tasks by census" : s[k].generic ? "generic"
                                                                         : "libevl",
                   ls_fmt_dur(d, sizeof(d), s[k].duration_ns),
                   (long long)s[k].tasks, s[k].tasks == 1 ? "" : "s", (long long)s[k].episodes,
                   s[k].episodes == 1 ? "" : "s");
        for (int i = 0; i < nnotes; i++)
            printf("note: %s\n", ls_term(notes[i]));
    }
    diff_print_sites(sites, nsites, min_ns, o.limit, j, &changed);
    if (lifecycle) {
        diff_print_groups(groups, ngroups, o.limit, j, &changed);
    } else if (j) {
        ls_json_key(j, "tasks"); ls_json_null(j);
    }
    diff_print_loops(ls, nl, o.limit, j, &changed);
    if (lifecycle) {
        diff_print_leaks(leaks, nleaks, o.limit, j, &changed);
    } else if (j) {
        ls_json_key(j, "leaks"); ls_json_null(j);
    }
    if (j) {
        ls_json_key(j, "changed"); ls_json_bool(j, changed);
        ls_json_end_object(j);
    } else if (!changed) {
        printf("\nnothing changed\n");
    }
    rc = o.svg ? diff_svg(s, min_ns, o.svg) : 0;
out:
    for (int i = 0; i < nnotes; i++)
        free(notes[i]);
    diff_free_sites(sites, nsites);
    diff_free_groups(groups, ngroups);
    diff_free_leaks(leaks, nleaks);
    for (int k = 0; k < 2; k++) {
        ls_loopstats_free(ls[k], nl[k]);
        side_close(&s[k]);
    }
    return rc;
}
