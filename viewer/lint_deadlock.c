/*
 * lint_deadlock.c -- lint's deadlock rule: one warning per wait-for cycle
 * (graph_waits.c finds them, for `graph --kind tasks` too): tasks each
 * suspended waiting for the next -- awaiting it, or waiting for a lock it
 * holds -- so that none can go on unless something outside the cycle
 * cancels one.  On an asyncio trace, each member's await chain when it
 * joined the cycle follows (await_stacks, stacks.h): its innermost frame
 * and its innermost application frame.  Depends on lint.h, graph.h (the
 * wait-for scan) and stacks.h.
 */
#define _GNU_SOURCE
#include "lint.h"
#include "evl-probes.h"
#include "graph.h"
#include "stacks.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Append to a malloc'd string; false when out of memory. */
static bool cat(char **s, size_t *len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static bool cat(char **s, size_t *len, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char *add = NULL;
    int n = vasprintf(&add, fmt, ap);
    va_end(ap);
    char *grown = n >= 0 ? realloc(*s, *len + (size_t)n + 1) : NULL;
    if (!grown) {
        free(add);
        return false;
    }
    memcpy(grown + *len, add, (size_t)n + 1);
    *s = grown;
    *len += (size_t)n;
    free(add);
    return true;
}

/* Statements for the members' await chains (NULL: the trace has none). */
struct chain_q {
    sqlite3_stmt *aw;         /* ls_await_prepare */
    sqlite3_stmt *fr;         /* a stack's frames, innermost first, application or not */
};

/* "at Lock.acquire asyncio/locks.py:113", escaped for the terminal */
static void print_frame(const char *fn, const char *file, int line)
{
    printf("at %s", fn ? ls_term(fn) : "?");
    if (file)
        printf(" %s:%d", ls_term(ls_short_path(file)), line);
}

static void frame_json(lint *L, sqlite3_stmt *fr)
{
    ls_json_begin_object(L->j);
    ls_json_key(L->j, "function"); ls_json_str(L->j, ls_col_text(fr, 1));
    ls_json_key(L->j, "file"); ls_json_str(L->j, ls_col_text(fr, 2));
    ls_json_key(L->j, "line"); ls_json_int(L->j, sqlite3_column_int(fr, 3));
    ls_json_key(L->j, "application"); ls_json_bool(L->j, sqlite3_column_int(fr, 4));
    ls_json_end_object(L->j);
}

/* Member x's await chain when its wait in the cycle began (the suspend at
 * cycle_since): one indented line, its innermost frame and, when that is
 * not one, its innermost application frame; with --json an element of the
 * evidence's await_chains.  Nothing when the census recorded no chain. */
static void member_chain(lint *L, const struct gtask *x, struct chain_q *q)
{
    int64_t stack = ls_await_stack(q->aw, x->id, x->cycle_since);
    if (stack < 0)
        return;
    sqlite3_reset(q->fr);
    sqlite3_bind_int64(q->fr, 1, stack);
    if (L->j) {
        ls_json_begin_object(L->j);
        ls_json_key(L->j, "task_id"); ls_json_int(L->j, x->id);
        ls_json_key(L->j, "since_ns"); ls_json_int(L->j, ls_ts(x->cycle_since) - L->start);
        ls_json_key(L->j, "frames");
        ls_json_begin_array(L->j);
    } else {
        printf("    task '%s' (id %lld) ", ls_term(lint_task_or(x->name)), (long long)x->id);
    }
    int shown = 0;
    while (sqlite3_step(q->fr) == SQLITE_ROW) {
        bool app = sqlite3_column_int(q->fr, 4);
        if (shown && !app)
            continue;
        if (L->j) {
            frame_json(L, q->fr);
        } else {
            if (shown)
                printf(", ");
            print_frame(ls_col_text(q->fr, 1), ls_col_text(q->fr, 2), sqlite3_column_int(q->fr, 3));
        }
        shown++;
        if (app)
            break;
    }
    sqlite3_reset(q->fr);
    if (L->j) {
        ls_json_end_array(L->j);
        ls_json_end_object(L->j);
    } else {
        printf("%s\n", shown ? "" : "(an empty await chain)");
    }
}

/* One warning for cycle c, from its member of lowest id, tk[first].  A
 * member that was in an earlier cycle keeps how it waited there (struct
 * gtask): the walk stops at it and refers to that one. */
static bool report(lint *L, const struct gtask *tk, char *const *fn, int first, int c,
                   struct chain_q *q)
{
    char *msg = NULL, *ids = NULL;
    size_t len = 0, idlen = 0;
    bool ok = true, at_end = true;
    int members = 0, m = first;
    int64_t broken = 0;               /* the first member's wait to end */
    do {
        const struct gtask *x = &tk[m], *y = &tk[x->cycle_next];
        if (x->cycle_no != c) {
            ok &= cat(&msg, &len, "; task '%s' (id %lld) was in the deadlock reported before",
                      lint_task_or(x->name), (long long)x->id);
            at_end = false;
            break;
        }
        at_end &= x->final < 0 && x->wait == x->cycle_next;
        if (x->cycle_end && (!broken || x->cycle_end < broken))
            broken = x->cycle_end;
        if (x->cycle_reason == EVL_SUSPEND_LOCK)
            ok &= cat(&msg, &len, "%stask '%s' (id %lld%s%s) waits for lock 0x%llx held by task '%s' (id %lld)",
                      members ? "; " : "", lint_task_or(x->name), (long long)x->id,
                      fn[m] ? ", in " : "", fn[m] ? fn[m] : "", (unsigned long long)x->cycle_obj,
                      lint_task_or(y->name), (long long)y->id);
        else
            ok &= cat(&msg, &len, "%stask '%s' (id %lld%s%s) awaits task '%s' (id %lld)",
                      members ? "; " : "", lint_task_or(x->name), (long long)x->id,
                      fn[m] ? ", in " : "", fn[m] ? fn[m] : "", lint_task_or(y->name), (long long)y->id);
        ok &= cat(&ids, &idlen, "%s%lld", members ? "," : "", (long long)x->id);
        members++;
        m = x->cycle_next;
    } while (ok && m != first && members <= 1 << 20);
    if (ok) {
        char until[96] = " to the end of the recording";
        if (broken)
            snprintf(until, sizeof(until), " to %s (%s)", lint_at(L, broken),
                     lint_dur(broken - tk[first].cycle_ts));
        lint_warn_begin(L, R_DEADLOCK, tk[first].id, tk[first].name,
                        "%d task%s deadlocked from %s%s: %s", members, members == 1 ? "" : "s",
                        lint_at(L, tk[first].cycle_ts), broken || at_end ? until : "", msg);
        lint_ev_str(L, "tasks", ids);
        lint_ev_int(L, "since_ns", tk[first].cycle_ts - L->start);
        if (broken)
            lint_ev_int(L, "until_ns", broken - L->start);
        lint_ev_int(L, "until_end", at_end && !broken);
        if (q) {
            /* the members as the message names them, in an earlier cycle or not */
            if (L->j) {
                ls_json_key(L->j, "await_chains");
                ls_json_begin_array(L->j);
            }
            int k = 0;
            m = first;
            do {
                if (tk[m].cycle_no != c)
                    break;
                member_chain(L, &tk[m], q);
                m = tk[m].cycle_next;
            } while (m != first && ++k <= 1 << 20);
            if (L->j)
                ls_json_end_array(L->j);
        }
        lint_warn_end(L);
    }
    free(msg);
    free(ids);
    return ok;
}

bool lint_deadlock(lint *L)
{
    struct gtask *tk = NULL;
    char **fn = NULL;
    size_t n = 0, cap = 0, capfn = 0;
    struct await *aw = NULL;
    struct pair *cyc = NULL;
    size_t naw = 0, ncyc = 0;
    bool ok = false;
    int step;
    sqlite3_stmt *st = lint_prep(L, "SELECT id, name, final_state, function FROM tasks ORDER BY id");
    if (!st)
        return false;
    while ((step = sqlite3_step(st)) == SQLITE_ROW) {
        if (!ls_grow((void **)&tk, &cap, n + 1, sizeof(*tk)) ||
            !ls_grow((void **)&fn, &capfn, n + 1, sizeof(*fn)))
            break;
        struct gtask *x = &tk[n];
        memset(x, 0, sizeof(*x));
        const char *name = (const char *)sqlite3_column_text(st, 1);
        const char *f = (const char *)sqlite3_column_text(st, 3);
        x->id = sqlite3_column_int64(st, 0);
        x->name = name ? strdup(name) : NULL;
        x->final = sqlite3_column_type(st, 2) == SQLITE_NULL ? -1 : sqlite3_column_int(st, 2);
        x->wait = -1;
        x->wait_id = -1;
        fn[n++] = f ? strdup(f) : NULL;
    }
    bool read = ls_step_ok(L->t, st, step);
    sqlite3_finalize(st);
    if (read && step == SQLITE_ROW)
        read = !ls_error("lint: out of memory");
    if (!read)
        goto out;
    if (!graph_task_waits(L->t, tk, (int)n, &aw, &naw, &cyc, &ncyc))
        goto out;
    /* An asyncio trace's members' await chains (app_frames: cmd_lint.c made it). */
    struct chain_q q = { NULL, NULL }, *qp = NULL;
    if (!ls_await_none(L->t)) {
        q.aw = ls_await_prepare(L->t);
        q.fr = ls_prepare(L->t,
            "SELECT f.depth, f.function, f.file, f.line, EXISTS (SELECT 1 FROM app_frames a"
            "  WHERE a.stack_id = f.stack_id AND a.depth = f.depth)"
            " FROM frames f WHERE f.stack_id = ?1 ORDER BY f.depth");
        if (!q.aw || !q.fr) {
            sqlite3_finalize(q.aw);
            sqlite3_finalize(q.fr);
            goto out;
        }
        qp = &q;
    }
    ok = true;
    /* In the order the cycles formed; each from its member of lowest id. */
    int cycles = 0;
    for (size_t i = 0; i < n; i++)
        if (tk[i].cycle_no > cycles)
            cycles = tk[i].cycle_no;
    for (int c = 1; ok && c <= cycles; c++) {
        int first = -1;
        for (size_t i = 0; i < n && first < 0; i++)
            if (tk[i].cycle_no == c)
                first = (int)i;
        if (first >= 0)
            ok = report(L, tk, fn, first, c, qp);
    }
    sqlite3_finalize(q.aw);
    sqlite3_finalize(q.fr);
out:
    for (size_t i = 0; i < n; i++) {
        free(tk[i].name);
        free(fn[i]);
    }
    free(tk);
    free(fn);
    free(aw);
    free(cyc);
    return ok;
}
