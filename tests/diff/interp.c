/*
 * interp.c -- diff_interp: runs a random differential program (written by
 * tests/diff/gen.py) on libevl and prints what it does.
 *
 *   diff_interp SPEC_FILE [--virtual]
 *
 * The spec format and the line printed by each operation are defined in
 * gen.py's docstring; gen.py's asyncio interpreter (_run_task) is the other
 * half of this file and must stay line-for-line equivalent.  Exit status: 0,
 * 1 if main failed or tasks leaked, 2 on a bad spec or a setup error.
 */
#define _POSIX_C_SOURCE 200809L

#include "evl.h"

#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_TASKS 64
#define MAX_FUTURES 16
#define MAX_ARGS 16

enum op_kind {
    OP_PRINT, OP_SLEEP, OP_SLEEPC, OP_SPAWN, OP_AWAIT, OP_CANCEL, OP_GATHER,
    OP_WAITFOR, OP_JOIN, OP_FSET, OP_FFAIL, OP_FCANCEL, OP_FAWAIT, OP_FCB,
    OP_SOON, OP_LATER, OP_CANCELSELF, OP_RETURN, OP_FAIL,
};

static const struct {
    const char *name;
    int min_args, max_args;
} op_table[] = {
    [OP_PRINT] = {"print", 1, 1},     [OP_SLEEP] = {"sleep", 1, 1},
    [OP_SLEEPC] = {"sleepc", 1, 1},
    [OP_SPAWN] = {"spawn", 1, 1},     [OP_AWAIT] = {"await", 1, 1},
    [OP_CANCEL] = {"cancel", 1, 1},   [OP_GATHER] = {"gather", 2, MAX_ARGS},
    [OP_WAITFOR] = {"waitfor", 2, 2}, [OP_JOIN] = {"join", 1, 1},
    [OP_FSET] = {"fset", 2, 2},       [OP_FFAIL] = {"ffail", 1, 1},
    [OP_FCANCEL] = {"fcancel", 1, 1}, [OP_FAWAIT] = {"fawait", 1, 1},
    [OP_FCB] = {"fcb", 2, 2},         [OP_SOON] = {"soon", 1, 1},
    [OP_LATER] = {"later", 2, 2},     [OP_CANCELSELF] = {"cancelself", 0, 0},
    [OP_RETURN] = {"return", 1, 1},   [OP_FAIL] = {"fail", 0, 0},
};

struct op {
    int kind;
    int nargs;
    int args[MAX_ARGS];
};

struct prog {
    int defined;
    int nops, cap;
    struct op *ops;
};

static struct prog progs[MAX_TASKS];
static evl_task *handles[MAX_TASKS];
static int nfutures;
static evl_future *futures[MAX_FUTURES];
static evl_loop *L;

static void say(const char *format, ...) __attribute__((format(printf, 1, 2)));
static void say(const char *format, ...)
{
    va_list ap;
    va_start(ap, format);
    vprintf(format, ap);
    va_end(ap);
    putchar('\n');
    fflush(stdout);
}

/* gen.py's _fmt(). */
static const char *str_of(intptr_t r, char *buf, size_t len)
{
    if (r == EVL_ECANCELED)
        return "cancelled";
    if (r == EVL_ETIMEDOUT)
        return "timeout";
    if (r < 0)
        return "error";
    snprintf(buf, len, "%ld", (long)r);
    return buf;
}

/* ------------------------------------------------------------- parser */

static int parse_error(const char *file, int lineno, const char *msg)
{
    fprintf(stderr, "%s:%d: %s\n", file, lineno, msg);
    return -1;
}

static int parse_spec(const char *file)
{
    FILE *f = fopen(file, "r");
    if (!f) {
        perror(file);
        return -1;
    }
    char line[512];
    int lineno = 0, cur = -1, rc = 0;
    while (rc == 0 && fgets(line, sizeof line, f)) {
        lineno++;
        char *hash = strchr(line, '#');
        if (hash)
            *hash = '\0';
        char *save = NULL;
        char *word = strtok_r(line, " \t\r\n", &save);
        if (!word)
            continue;
        int nums[MAX_ARGS + 1], n = 0;
        char *tok;
        while ((tok = strtok_r(NULL, " \t\r\n", &save)) != NULL) {
            char *end;
            long v = strtol(tok, &end, 10);
            if (*end || n > MAX_ARGS || v < 0 || v > 1000000) {
                rc = parse_error(file, lineno, "bad or too many arguments");
                break;
            }
            nums[n++] = (int)v;
        }
        if (rc)
            break;
        if (strcmp(word, "futures") == 0) {
            if (cur != -1 || n != 1 || nums[0] > MAX_FUTURES)
                rc = parse_error(file, lineno, "bad futures line");
            else
                nfutures = nums[0];
            continue;
        }
        if (strcmp(word, "task") == 0) {
            if (cur != -1 || n != 1 || nums[0] >= MAX_TASKS || progs[nums[0]].defined)
                rc = parse_error(file, lineno, "bad task line");
            else
                progs[cur = nums[0]].defined = 1;
            continue;
        }
        if (strcmp(word, "end") == 0) {
            if (cur == -1)
                rc = parse_error(file, lineno, "end outside a task");
            cur = -1;
            continue;
        }
        int kind = -1;
        for (int k = 0; k < (int)(sizeof op_table / sizeof op_table[0]); k++)
            if (strcmp(word, op_table[k].name) == 0)
                kind = k;
        if (kind < 0 || cur == -1 || n < op_table[kind].min_args || n > op_table[kind].max_args) {
            rc = parse_error(file, lineno, "unknown operation, wrong arguments, or outside a task");
            break;
        }
        struct prog *p = &progs[cur];
        if (p->nops == p->cap) {
            p->cap = p->cap ? 2 * p->cap : 8;
            p->ops = realloc(p->ops, (size_t)p->cap * sizeof *p->ops);
            if (!p->ops) {
                perror("realloc");
                exit(2);
            }
        }
        struct op *op = &p->ops[p->nops++];
        op->kind = kind;
        op->nargs = n;
        memcpy(op->args, nums, (size_t)n * sizeof nums[0]);
    }
    fclose(f);
    if (rc == 0 && cur != -1)
        rc = parse_error(file, lineno, "missing end");
    if (rc == 0 && !progs[0].defined)
        rc = parse_error(file, lineno, "no task 0");
    /* Every task an operation names must be defined. */
    for (int t = 0; rc == 0 && t < MAX_TASKS; t++)
        for (int i = 0; rc == 0 && i < progs[t].nops; i++) {
            const struct op *op = &progs[t].ops[i];
            int first = 0, last = 0; /* range of args that are task numbers */
            switch (op->kind) {
            case OP_SPAWN: case OP_AWAIT: case OP_CANCEL: case OP_WAITFOR: case OP_JOIN:
                last = 1;
                break;
            case OP_GATHER:
                first = 1, last = op->nargs;
                break;
            default:
                break;
            }
            for (int a = first; a < last; a++)
                if (op->args[a] >= MAX_TASKS || !progs[op->args[a]].defined)
                    rc = parse_error(file, 0, "an operation names an undefined task");
            if (rc == 0 && op->kind >= OP_FSET && op->kind <= OP_FCB && op->args[0] >= nfutures)
                rc = parse_error(file, 0, "an operation names an undefined future");
        }
    return rc;
}

/* -------------------------------------------------------- interpreter */

/* fcb: print "cb<N> f<F> -> outcome"; arg packs F and N. */
static void done_cb(evl_future *f, void *arg)
{
    char b[24];
    intptr_t v = (intptr_t)arg;
    say("cb%d f%d -> %s", (int)(v & 0xffff), (int)(v >> 16),
        str_of(evl_future_result(f), b, sizeof b));
}

/* soon: print "soon<N>". */
static void soon_cb(evl_loop *loop, void *arg)
{
    (void)loop;
    say("soon%d", (int)(intptr_t)arg);
}

/* later: print "later<N>". */
static void later_cb(evl_loop *loop, void *arg)
{
    (void)loop;
    say("later%d", (int)(intptr_t)arg);
}

static intptr_t run_task(void *arg)
{
    int k = (int)(intptr_t)arg;
    const struct prog *p = &progs[k];
    char b1[24], b2[24];
    int exiting = 0; /* a sleepc was cancelled: only joins are left to do */
    say("t%d start", k);
    for (int i = 0; i < p->nops; i++) {
        const struct op *op = &p->ops[i];
        const int a = op->args[0];
        if (exiting && op->kind != OP_JOIN)
            continue;
        switch (op->kind) {
        case OP_PRINT:
            say("t%d print %d", k, a);
            break;
        case OP_SLEEP: {
            int r = evl_sleep(EVL_MS(a));
            say("t%d sleep %d -> %s", k, a, r == EVL_ECANCELED ? "cancelled" : "ok");
            break;
        }
        case OP_SLEEPC:
            if (evl_sleep(EVL_MS(a)) == EVL_ECANCELED) {
                say("t%d sleepc %d -> cancelled, exiting", k, a);
                exiting = 1;
            } else {
                say("t%d sleepc %d -> ok", k, a);
            }
            break;
        case OP_SPAWN: {
            char name[16];
            snprintf(name, sizeof name, "t%d", a);
            say("t%d spawn t%d", k, a);
            handles[a] = evl_spawn(L, name, run_task, (void *)(intptr_t)a);
            if (!handles[a]) {
                perror("evl_spawn");
                exit(2);
            }
            break;
        }
        case OP_AWAIT:
            say("t%d await t%d -> %s", k, a, str_of(evl_await(handles[a]), b1, sizeof b1));
            break;
        case OP_CANCEL:
            say("t%d cancel t%d -> %d", k, a, evl_cancel(handles[a]));
            break;
        case OP_GATHER: {
            evl_future *futs[MAX_ARGS];
            intptr_t res[MAX_ARGS];
            char names[MAX_ARGS * 8] = "", results[MAX_ARGS * 24] = "";
            size_t n = (size_t)op->nargs - 1, nl = 0, rl = 0;
            for (size_t j = 0; j < n; j++) {
                futs[j] = handles[op->args[j + 1]];
                nl += (size_t)snprintf(names + nl, sizeof names - nl, "%st%d",
                                       j ? "," : "", op->args[j + 1]);
            }
            int rc = evl_gather(futs, n, a ? EVL_GATHER_COLLECT : 0, res);
            if (rc == 0)
                for (size_t j = 0; j < n; j++)
                    rl += (size_t)snprintf(results + rl, sizeof results - rl, "%s%s",
                                           j ? " " : "", str_of(res[j], b1, sizeof b1));
            else
                snprintf(results, sizeof results, "%s", str_of(rc, b1, sizeof b1));
            say("t%d gather%d %s -> %s", k, a, names, results);
            break;
        }
        case OP_WAITFOR: {
            intptr_t r = evl_wait_for(handles[a], EVL_MS(op->args[1]));
            say("t%d waitfor t%d %d -> %s", k, a, op->args[1], str_of(r, b1, sizeof b1));
            break;
        }
        case OP_JOIN: {
            evl_task *t = handles[a];
            if (!t) /* never spawned: this task is exiting early */
                break;
            while (!evl_future_done(t))
                evl_await(t);
            say("t%d join t%d -> %s", k, a, str_of(evl_future_result(t), b2, sizeof b2));
            evl_future_unref(t);
            handles[a] = NULL;
            break;
        }
        case OP_FSET:
            say("t%d fset f%d %d -> %s", k, a, op->args[1],
                evl_future_set_result(futures[a], op->args[1]) == 0 ? "ok" : "done");
            break;
        case OP_FFAIL:
            say("t%d ffail f%d -> %s", k, a,
                evl_future_set_error(futures[a], -EIO) == 0 ? "ok" : "done");
            break;
        case OP_FCANCEL:
            say("t%d fcancel f%d -> %d", k, a, evl_cancel(futures[a]));
            break;
        case OP_FAWAIT:
            say("t%d fawait f%d -> %s", k, a, str_of(evl_await(futures[a]), b1, sizeof b1));
            break;
        case OP_FCB:
            evl_future_add_done(futures[a], done_cb,
                                (void *)(((intptr_t)a << 16) | (intptr_t)op->args[1]));
            say("t%d fcb f%d cb%d", k, a, op->args[1]);
            break;
        case OP_SOON:
            evl_call_soon(L, soon_cb, (void *)(intptr_t)a);
            say("t%d soon %d", k, a);
            break;
        case OP_LATER:
            evl_call_later(L, EVL_MS(op->args[1]), later_cb, (void *)(intptr_t)a);
            say("t%d later %d %d", k, a, op->args[1]);
            break;
        case OP_CANCELSELF:
            say("t%d cancel self -> %d", k, evl_cancel(evl_current_task()));
            break;
        case OP_RETURN:
            say("t%d return %d", k, a);
            return a;
        case OP_FAIL:
            say("t%d fail", k);
            return -EIO;
        }
    }
    if (exiting) {
        say("t%d exit cancelled", k);
        return EVL_ECANCELED;
    }
    return 0;
}

int main(int argc, char **argv)
{
    const char *file = NULL;
    int virtual_clock = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--virtual") == 0)
            virtual_clock = 1;
        else if (!file && argv[i][0] != '-')
            file = argv[i];
        else
            file = NULL, i = argc;
    }
    if (!file) {
        fprintf(stderr, "usage: %s SPEC_FILE [--virtual]\n", argv[0]);
        return 2;
    }
    if (parse_spec(file) != 0)
        return 2;

    evl_loop_options opts;
    evl_loop_options_init(&opts);
    if (virtual_clock)
        opts.flags |= EVL_LOOP_VIRTUAL_CLOCK;
    L = evl_loop_new(&opts);
    if (!L) {
        perror("evl_loop_new");
        return 2;
    }
    for (int i = 0; i < nfutures; i++)
        if (!(futures[i] = evl_future_new(L))) {
            perror("evl_future_new");
            return 2;
        }
    evl_task *main_task = evl_spawn(L, "t0", run_task, (void *)(intptr_t)0);
    if (!main_task) {
        perror("evl_spawn");
        return 2;
    }
    intptr_t r = evl_run_until_complete(L, main_task);
    evl_future_unref(main_task);
    int status = 0;
    for (int t = 0; t < MAX_TASKS; t++)
        if (handles[t]) {
            fprintf(stderr, "diff_interp: task t%d was never joined\n", t);
            evl_future_unref(handles[t]);
            status = 1;
        }
    for (int i = 0; i < nfutures; i++)
        evl_future_unref(futures[i]);
    int leaked = evl_loop_free(L);
    if (r < 0) {
        fprintf(stderr, "diff_interp: main task ended with %s\n", evl_err_name((int)r));
        status = 1;
    }
    if (leaked != 0) {
        fprintf(stderr, "diff_interp: evl_loop_free reports %d leaked task(s)\n", leaked);
        status = 1;
    }
    for (int t = 0; t < MAX_TASKS; t++)
        free(progs[t].ops);
    return status;
}
