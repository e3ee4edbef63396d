/*
 * cmd_top.c -- `loopscope top -p PID`: a live view of a running program,
 * like top or tokio-console: a header with the loop's iterations/s, idle
 * share and lag (iteration latency p50/p99 over the last seconds), a table
 * of its tasks, and a feed of blocking episodes as they happen.  The
 * recorder (tracer/live.h: `loopscope record`'s own attach / poll /
 * detach) calls top_data.c's hooks as it ingests, and this file's tick
 * every 100 ms on the same thread: keys are read there without blocking,
 * the screen is drawn once a second or at once after a key or a resize.
 * Not on a terminal, one plain text block a second instead.  Every string
 * of the target goes through ls_term_n.
 */
#define _GNU_SOURCE
#include "codes.h"
#include "commands.h"
#include "output.h"
#include "top.h"

#include <curses.h>
#include <getopt.h>
#include <limits.h>
#include <locale.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <wchar.h>

static const char usage[] =
    "usage: loopscope top -p PID [-o FILE] [-f] [-d SECONDS] [-t MS] [--sort KEY] [--text]\n"
    "                     [--mode auto|libevl|generic]\n"
    "       loopscope top --agent [[HOST:]PORT] [-i SECONDS] [-d SECONDS] [--text]\n"
    "\n"
    "A live view of a running program, refreshed every second: its loop's\n"
    "iterations per second, idle share (time in the poll) and lag (iteration\n"
    "latency p50/p99 over the last 5 s), a table of its tasks (state, busy,\n"
    "scheduled and idle time, resumes, wakes, longest step; finished tasks stay\n"
    "5 s), and blocking episodes as they happen (task, syscall, duration, the\n"
    "application's file:line).  A target without libevl (the generic loop mode)\n"
    "has the loop header and the blocking feed, and a task table only when the\n"
    "recorder reads its asyncio tasks (a census: tracer/README.md).\n"
    "\n"
    "Keys: q quit; sort by b busy, s sched, i idle, l longest, r resumes,\n"
    "w wakes, n name; / then a substring of the task name filters (Enter keeps\n"
    "it, Esc clears it).  Quitting (q, Ctrl-C, SIGTERM, -d, the target's exit)\n"
    "detaches as `loopscope record` does.  When stdout is not a terminal (or with\n"
    "--text), one plain text block per second instead.\n"
    "\n"
    "  -p, --pid PID        the process to watch\n"
    "  -o, --output FILE    also record a full trace into FILE (what\n"
    "                       `loopscope record -o FILE` writes)\n"
    "  -f, --force          replace FILE if it exists\n"
    "  -d, --duration SEC   stop after SEC seconds\n"
    "  -t, --block-threshold MS  report loop stalls of at least MS ms (default 10)\n"
    "      --sort KEY       busy (default), sched, idle, longest, resumes, wakes, name\n"
    "      --text           plain text blocks even on a terminal\n"
    "      --mode MODE      auto (default), libevl or generic, as for record\n"
    "\n"
    "With --agent, what a `loopscope agent` sees instead: its /metrics (default\n"
    "127.0.0.1:9464) fetched every second or -i SECONDS, per process and loop\n"
    "thread (see 'loopscope top --agent --help').\n"
    "\n"
    "example: loopscope top -p $(pidof http_server)\n"
    "         loopscope top --agent 9464\n";

/* ------------------------------------------------------------- cells */

/* The bytes of s (valid UTF-8 without controls: ls_term's output) that
 * fit in maxcols terminal columns, and their width. */
static size_t fit_cols(const char *s, int maxcols, int *cols)
{
    mbstate_t ps;
    memset(&ps, 0, sizeof(ps));
    size_t i = 0, len = strlen(s);
    int c = 0;
    while (i < len) {
        wchar_t wc;
        size_t n = mbrtowc(&wc, s + i, len - i, &ps);
        int w = 1;
        if (n == (size_t)-1 || n == (size_t)-2 || n == 0) {
            n = 1;                    /* not in this locale: a byte a column */
            memset(&ps, 0, sizeof(ps));
        } else if ((w = wcwidth(wc)) < 0) {
            w = 1;
        }
        if (c + w > maxcols)
            break;
        c += w;
        i += n;
    }
    *cols = c;
    return i;
}

/* Draw s in `width` columns at (y, x), padded; right-aligned if asked. */
static void cell(int y, int x, int width, const char *s, bool right)
{
    if (width <= 0 || y >= LINES || x >= COLS)
        return;
    if (x + width > COLS)
        width = COLS - x;
    int cols;
    size_t n = fit_cols(s, width, &cols);
    int pad = width - cols;
    move(y, x);
    if (right)
        for (int i = 0; i < pad; i++)
            addch(' ');
    addnstr(s, (int)n);
    if (!right)
        for (int i = 0; i < pad; i++)
            addch(' ');
}

static void line(int y, const char *s)
{
    cell(y, 0, COLS, s, false);
}

static const char *dur(char *buf, size_t n, int64_t ns)
{
    return ns < 0 ? "-" : ls_fmt_dur(buf, n, ns);
}

static const char *kind_name(int kind)
{
    return kind == LS_BLOCK_ONCPU ? "on-cpu" : kind == LS_BLOCK_OFFCPU ? "off-cpu" : "?";
}

/* A task table: a libevl target's, or a generic target's when the
 * recorder feeds the replay a lifecycle (a census of its asyncio tasks
 * made tasks); the generic loop mode without one has none. */
static bool has_tasks(const top *t)
{
    return !t->st.generic || t->st.tasks_created > 0;
}

/* --------------------------------------------------------- the header */

static void header_lines(top *t, char l[3][512])
{
    const ls_live_status *s = &t->st;
    top_loopstat ls;
    top_loopstats(t, s->now, &ls);
    char a[32], b[32], c[32], idle[32];
    snprintf(l[0], 512, "loopscope top  pid %d (%s)  %s mode  %.1fs%s%s", (int)s->pid,
             ls_term_n(t->comm[0] ? t->comm : "?", 128),
             s->generic ? "generic loop" : "libevl", (s->now - s->start_ns) / 1e9,
             t->out ? "  recording to " : "", t->out ? ls_term_n(t->out, 200) : "");
    if (ls.idle >= 0)
        snprintf(idle, sizeof(idle), "%.1f%%", 100 * ls.idle);
    else
        snprintf(idle, sizeof(idle), "-");
    snprintf(l[1], 512, "loop  iterations/s %.0f  idle %s  lag p50 %s  p99 %s  max %s  (%d s%s)",
             ls.iter_per_s, idle, dur(a, sizeof(a), ls.p50), dur(b, sizeof(b), ls.p99),
             dur(c, sizeof(c), ls.max), TOP_LAG_SECS,
             s->generic ? ", from 20 ms windows: a sleeping loop reports when it wakes" : "");
    if (s->generic && has_tasks(t))
        snprintf(l[2], 512, "loop threads %zu  asyncio tasks %zu live  %llu created  %llu "
                            "finished (seen by a census)  blocking %llu  dropped %llu", s->nloops,
                 t->nlive, (unsigned long long)s->tasks_created,
                 (unsigned long long)s->tasks_finished, (unsigned long long)s->blocks,
                 (unsigned long long)s->dropped);
    else if (s->generic)
        snprintf(l[2], 512, "loop threads %zu  blocking %llu  dropped %llu", s->nloops,
                 (unsigned long long)s->blocks, (unsigned long long)s->dropped);
    else
        snprintf(l[2], 512, "tasks %zu live  %llu created  %llu finished  blocking %llu  "
                            "dropped %llu%s", t->nlive, (unsigned long long)s->tasks_created,
                 (unsigned long long)s->tasks_finished, (unsigned long long)s->blocks,
                 (unsigned long long)s->dropped, s->untracked ? "  (untracked tasks)" : "");
}

/* One episode; when it would be wider than `width` bytes, the site's
 * file without its directory. */
static void feed_line(top *t, top_feed *f, char *buf, size_t n, size_t width)
{
    char d[32];
    if (!f->task_name[0]) {           /* its task_create may come after the episode */
        const char *nm = top_name_of(t, f->task);
        for (size_t k = 0; !nm && k < t->ndone; k++)
            if (t->done[k].id == f->task)
                nm = t->done_names[k];
        if (nm)
            snprintf(f->task_name, sizeof(f->task_name), "%s", nm);
    }
    if (f->pending) {                 /* its step still runs: at least the threshold */
        d[0] = '>';
        d[1] = '=';
        dur(d + 2, sizeof(d) - 2, t->threshold_ns);
    } else {
        dur(d, sizeof(d), f->dur);
    }
    snprintf(buf, n, "%8.3fs  %-24s  %-7s  %-16s  %8s  %s", (f->start - t->start) / 1e9,
             f->task_name[0] ? ls_term_n(f->task_name, 72) : "?", kind_name(f->kind),
             ls_term_n(f->syscall, 31), d, ls_term_n(f->site, 255));
    const char *slash = strrchr(f->site, '/'), *colon = strchr(f->site, ':');
    if (strlen(buf) > width && slash && colon && slash < colon) {
        char *at = strstr(buf, ls_term_n(f->site, 255));
        if (at)
            snprintf(at, n - (size_t)(at - buf), "%s", ls_term_n(slash + 1, 255));
    }
}

/* ----------------------------------------------------------- the screen */

static const int colw[] = { 14, 9, 9, 9, 8, 8, 9 };   /* state .. longest */
static const char *const colh[] = { "STATE", "BUSY", "SCHED", "IDLE", "RESUMES", "WAKES",
                                    "LONGEST" };
static const enum top_sort colsort[] = { TOP_NSORT, TOP_SORT_BUSY, TOP_SORT_SCHED,
                                         TOP_SORT_IDLE, TOP_SORT_RESUMES, TOP_SORT_WAKES,
                                         TOP_SORT_LONGEST };

static void draw(top *t)
{
    char h[3][512], buf[1024];
    erase();
    header_lines(t, h);
    for (int i = 0; i < 3; i++)
        line(i, h[i]);
    int y = 4, footer = LINES - 1;
    int feed_rows = !has_tasks(t) ? footer - y - 2 : (footer - y) / 3;
    if (feed_rows < 3)
        feed_rows = 3;
    int table_end = footer - feed_rows - 1;
    if (!has_tasks(t)) {
        line(y++, "no task table: the target has no libevl probes (generic loop mode: no task "
                  "lifecycle)");
    } else {
        int fixed = 0;
        for (size_t i = 0; i < sizeof(colw) / sizeof(colw[0]); i++)
            fixed += colw[i] + 2;
        int namew = COLS - fixed;
        if (namew < 12)
            namew = 12;
        char hd[32];
        snprintf(hd, sizeof(hd), "NAME%s", t->sort == TOP_SORT_NAME ? "*" : "");
        attron(A_BOLD);
        cell(y, 0, namew, hd, false);
        int x = namew;
        for (size_t i = 0; i < sizeof(colw) / sizeof(colw[0]); i++) {
            snprintf(hd, sizeof(hd), "%s%s", colh[i], colsort[i] == t->sort ? "*" : "");
            cell(y, x + 2, colw[i], hd, i > 0);
            x += colw[i] + 2;
        }
        attroff(A_BOLD);
        y++;
        size_t shown = 0, room = table_end > y ? (size_t)(table_end - y) : 0;
        if (t->nrows > room && room)
            room--;                   /* the last line says how many more */
        for (; shown < t->nrows && shown < room; shown++, y++) {
            const top_row *r = &t->rows[shown];
            char v[7][32];
            top_state_name(r, v[0], sizeof(v[0]));
            dur(v[1], 32, r->busy);
            dur(v[2], 32, r->sched);
            dur(v[3], 32, r->idle);
            snprintf(v[4], 32, "%llu", (unsigned long long)r->resumes);
            snprintf(v[5], 32, "%llu", (unsigned long long)r->wakes);
            dur(v[6], 32, r->longest);
            cell(y, 0, namew, ls_term_n(r->name ? r->name : "?", (size_t)namew * 4), false);
            x = namew;
            for (int i = 0; i < 7; i++) {
                cell(y, x + 2, colw[i], v[i], i > 0);
                x += colw[i] + 2;
            }
        }
        if (shown < t->nrows && y < table_end) {
            snprintf(buf, sizeof(buf), "... %zu more", t->nrows - shown);
            line(y++, buf);
        } else if (!t->nrows && y < table_end) {
            line(y++, t->filter[0] ? "(no task matches the filter)" : "(no tasks yet)");
        }
        y = table_end;
    }
    if (y < footer) {
        snprintf(buf, sizeof(buf), "-- blocking episodes: %llu (newest first; time since start, "
                                   "task, kind, syscall, duration, application site) ",
                 (unsigned long long)t->nfeed);
        line(y++, buf);
    }
    uint64_t kept = t->nfeed < TOP_FEED_MAX ? t->nfeed : TOP_FEED_MAX;
    for (uint64_t k = 0; k < kept && y < footer; k++, y++) {
        feed_line(t, &t->feed[(t->nfeed - 1 - k) % TOP_FEED_MAX], buf, sizeof(buf),
                  (size_t)COLS);
        line(y, buf);
    }
    if (!has_tasks(t))
        snprintf(buf, sizeof(buf), "q quit");
    else if (t->editing)
        snprintf(buf, sizeof(buf), "filter: %s_   (Enter: keep, Esc: clear)",
                 ls_term_n(t->filter, 200));
    else
        snprintf(buf, sizeof(buf), "q quit  b busy  s sched  i idle  l longest  r resumes  "
                                   "w wakes  n name  / filter   sort: %s%s%s",
                 top_sort_names[t->sort], t->filter[0] ? "  filter: " : "",
                 t->filter[0] ? ls_term_n(t->filter, 200) : "");
    attron(A_REVERSE);
    line(footer, buf);
    attroff(A_REVERSE);
    refresh();
}

static bool curses_start(top *t)
{
    setlocale(LC_CTYPE, "");
    SCREEN *sc = newterm(NULL, stdout, stdin);
    if (!sc)
        return false;
    set_term(sc);
    cbreak();
    noecho();
    nonl();
    nodelay(stdscr, TRUE);
    keypad(stdscr, TRUE);
    set_escdelay(25);
    curs_set(0);
    t->curses = true;
    return true;
}

static void curses_end(top *t)
{
    if (!t->curses)
        return;
    endwin();
    t->curses = false;
}

/* A key: returns true to quit. */
static bool key(top *t, int ch)
{
    if (!has_tasks(t))                /* no table to sort or filter */
        return ch == 'q' || ch == 'Q';
    if (t->editing) {
        size_t n = strlen(t->filter);
        if (ch == '\n' || ch == '\r' || ch == KEY_ENTER)
            t->editing = false;
        else if (ch == 27) {
            t->filter[0] = 0;
            t->editing = false;
        } else if (ch == KEY_BACKSPACE || ch == 127 || ch == 8) {
            if (n)
                t->filter[n - 1] = 0;
        } else if (ch >= 32 && ch < 127 && n + 1 < sizeof(t->filter)) {
            t->filter[n] = (char)ch;
            t->filter[n + 1] = 0;
        }
        return false;
    }
    switch (ch) {
    case 'q': case 'Q': return true;
    case 'b': t->sort = TOP_SORT_BUSY; break;
    case 's': t->sort = TOP_SORT_SCHED; break;
    case 'i': t->sort = TOP_SORT_IDLE; break;
    case 'l': t->sort = TOP_SORT_LONGEST; break;
    case 'r': t->sort = TOP_SORT_RESUMES; break;
    case 'w': t->sort = TOP_SORT_WAKES; break;
    case 'n': t->sort = TOP_SORT_NAME; break;
    case '/': t->editing = true; t->filter[0] = 0; break;
    case 27: t->filter[0] = 0; break;
    default: break;                   /* KEY_RESIZE among them: redrawn below */
    }
    return false;
}

/* -------------------------------------------------------- the text mode */

static void text_block(top *t, bool final)
{
    char h[3][512], buf[1024];
    header_lines(t, h);
    printf("top: %s\n", h[0] + strlen("loopscope top  "));
    printf("%s\n%s\n", h[1], h[2]);
    if (!has_tasks(t)) {
        printf("tasks: none (generic loop mode: no task lifecycle)\n");
    } else {
        size_t n = t->nrows < 20 ? t->nrows : 20;
        for (size_t i = 0; i < n; i++) {
            const top_row *r = &t->rows[i];
            char st[32], a[32], b[32], c[32], d[32];
            printf("task: %-24s %-14s busy %s  sched %s  idle %s  resumes %llu  wakes %llu  "
                   "longest %s\n", ls_term_n(r->name ? r->name : "?", 188),
                   top_state_name(r, st, sizeof(st)), dur(a, 32, r->busy), dur(b, 32, r->sched),
                   dur(c, 32, r->idle), (unsigned long long)r->resumes,
                   (unsigned long long)r->wakes, dur(d, 32, r->longest));
        }
        if (t->nrows > n)
            printf("task: ... %zu more\n", t->nrows - n);
    }
    /* Every episode once (at most the feed's size since the last block). */
    uint64_t from = t->feed_printed;
    if (t->nfeed - from > TOP_FEED_MAX) {
        printf("blocking: ... %llu episodes not shown\n",
               (unsigned long long)(t->nfeed - TOP_FEED_MAX - from));
        from = t->nfeed - TOP_FEED_MAX;
    }
    uint64_t k = from;
    for (; k < t->nfeed; k++) {
        top_feed *f = &t->feed[k % TOP_FEED_MAX];
        if (f->pending && !final && t->st.now - f->start < 2000000000ll)
            break;                    /* its step still runs: printed once it ends */
        feed_line(t, f, buf, sizeof(buf), SIZE_MAX);
        printf("blocking: %s\n", buf);
    }
    t->feed_printed = k;
    putchar('\n');
    fflush(stdout);
}

/* ------------------------------------------------------------ the hooks */

static int on_tick(void *ctx, const ls_live_status *s)
{
    top *t = ctx;
    t->st = *s;
    t->st.replay = NULL;              /* valid during this call only */
    t->have_st = true;
    t->generic = t->generic || s->generic;
    if (!t->last_draw)
        t->last_draw = t->text ? s->now : 1;  /* text: the first block after a second */
    bool redraw = s->now - t->last_draw >= 1000000000ll;
    if (t->text) {
        if (redraw) {
            top_collect(t, s->replay, s->now);
            text_block(t, false);
            t->last_draw = s->now;
        }
        return 0;
    }
    if (!t->curses && !curses_start(t)) {
        t->text = true;               /* no usable terminal: the text mode */
        return 0;
    }
    int ch;
    while ((ch = getch()) != ERR) {
        if (key(t, ch))
            return 1;
        redraw = true;
    }
    if (redraw) {
        top_collect(t, s->replay, s->now);
        draw(t);
        t->last_draw = s->now;
    }
    return 0;
}

static void on_stopped(void *ctx, const ls_live_status *s, const char *why)
{
    top *t = ctx;
    t->why = why;
    curses_end(t);
    if (t->text && t->have_st) {      /* the last second's block */
        t->st = *s;
        t->st.replay = NULL;
        top_collect(t, s->replay, s->now);
        text_block(t, true);
    }
}

/* ---------------------------------------------------------- the command */

int cmd_top(int argc, char **argv)
{
    static const struct option opts[] = {
        { "pid", required_argument, NULL, 'p' },
        { "output", required_argument, NULL, 'o' },
        { "force", no_argument, NULL, 'f' },
        { "duration", required_argument, NULL, 'd' },
        { "block-threshold", required_argument, NULL, 't' },
        { "sort", required_argument, NULL, 'S' },
        { "text", no_argument, NULL, 'T' },
        { "mode", required_argument, NULL, 'M' },
        { "help", no_argument, NULL, 'h' },
        { NULL, 0, NULL, 0 },
    };
    for (int i = 1; i < argc && strcmp(argv[i], "--"); i++)
        if (!strcmp(argv[i], "--agent") || !strncmp(argv[i], "--agent=", 8))
            return cmd_top_agent(argc, argv);   /* an agent's view: cmd_top_agent.c */
    static top tt;                    /* large (feeds, buckets): not on the stack */
    top *t = &tt;
    memset(t, 0, sizeof(*t));
    ls_live_opts o = { .argc = argc, .argv = argv };
    char *end;
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "p:o:fd:t:h", opts, NULL)) != -1) {
        switch (c) {
        case 'p': {
            long v = strtol(optarg, &end, 10);
            if (*end || v <= 0 || v > INT_MAX)
                return ls_error("invalid pid '%s'", optarg);
            o.pid = (pid_t)v;
            break;
        }
        case 'o':
            o.out = optarg;
            break;
        case 'f':
            o.force = true;
            break;
        case 'd':
            o.duration = strtod(optarg, &end);
            if (*end || !(o.duration > 0))
                return ls_error("invalid duration '%s' (seconds, > 0)", optarg);
            break;
        case 't':
            o.block_threshold_ms = strtod(optarg, &end);
            if (*end || !(o.block_threshold_ms >= 0.1) || o.block_threshold_ms > 60000)
                return ls_error("invalid --block-threshold '%s' (milliseconds, 0.1..60000)",
                                optarg);
            break;
        case 'S': {
            int k = 0;
            while (k < TOP_SORT_ID && strcmp(optarg, top_sort_names[k]))
                k++;
            if (k == TOP_SORT_ID)
                return ls_error("invalid --sort '%s' (busy, sched, idle, longest, resumes, "
                                "wakes or name)", optarg);
            t->sort = (enum top_sort)k;
            break;
        }
        case 'T':
            t->text = true;
            break;
        case 'M':
            if (!strcmp(optarg, "auto"))
                o.mode = 0;
            else if (!strcmp(optarg, "libevl"))
                o.mode = 1;
            else if (!strcmp(optarg, "generic"))
                o.mode = 2;
            else
                return ls_error("invalid --mode '%s' (auto, libevl or generic)", optarg);
            break;
        case 'h':
            fputs(usage, stdout);
            return 0;
        default:
            fputs(usage, stderr);
            return 2;
        }
    }
    if (optind < argc)
        return ls_error("unexpected argument '%s' (see 'loopscope top --help')", argv[optind]);
    if (!o.pid)
        return ls_error("give -p PID (see 'loopscope top --help')");
    t->pid = o.pid;
    t->threshold_ns = (int64_t)((o.block_threshold_ms > 0 ? o.block_threshold_ms : 10) * 1e6);
    t->out = o.out;
    t->text = t->text || !isatty(1);
    t->start = top_now();
    /* The name the target gave itself (its comm): for the header only. */
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/comm", (int)o.pid);
    FILE *cf = fopen(path, "re");
    if (cf) {
        if (fgets(t->comm, sizeof(t->comm), cf))
            t->comm[strcspn(t->comm, "\n")] = 0;
        fclose(cf);
    }
    ls_live_hooks h = { 0 };
    top_hooks(t, &h);
    h.tick = on_tick;
    h.stopped = on_stopped;
    int rc = ls_live_run(&o, &h);
    curses_end(t);                    /* an error after the screen started */
    /* Episodes still open when it detached come last (blocks.c flushes
     * them after the main loop). */
    for (uint64_t k = t->feed_printed; !rc && t->text && k < t->nfeed; k++) {
        char buf[1024];
        if (t->nfeed - k > TOP_FEED_MAX)
            continue;
        feed_line(t, &t->feed[k % TOP_FEED_MAX], buf, sizeof(buf), SIZE_MAX);
        printf("blocking: %s\n", buf);
    }
    /* Why it stopped, unless the user asked (on the screen: the target's
     * exit or a signal would otherwise just close it). */
    if (!rc && t->why && (t->text || strcmp(t->why, "stopped by the user")))
        printf("top: stopped: %s\n", t->why);
    top_free(t);
    return rc;
}
