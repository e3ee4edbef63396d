/*
 * hostile_target -- a process that carries libevl's probes and semaphores
 * (provider "evl", every probe of EVL_PROBE_LIST) but fires them with
 * whatever it likes, to test that `loopscope record` treats a target as
 * untrusted input (tracer/README.md, "Trust boundary").
 *
 *   hostile_target MODE [SECONDS]
 *
 * Prints "pid N", waits (up to 10 s) until a tracer raised a semaphore, then
 * runs MODE for SECONDS (default 1) and exits 0.  Deterministic: one fixed
 * seed.  Modes:
 *
 *   random    batches of random bytes, random len and nrec
 *   lengths   batch lengths 0, 1, 0xffffffff, just over the buffer, with
 *             NULL, kernel, unaligned and unmapped addresses
 *   records   well-framed records with unknown kinds, out-of-range states,
 *             reasons and leak kinds, task id 0 and 2^64-1, timestamps going
 *             backwards, 0 and near 2^64, sizes 0, unaligned, and past the
 *             batch, name lengths past the record
 *   names     tasks named with quotes, NUL, 0xff, invalid UTF-8, %n,
 *             terminal escapes, newlines, markup; function addresses all
 *             distinct (more than the symbol cache holds), and blocking
 *             episodes (off- and on-CPU) inside those tasks
 *   tasks     a million distinct task ids: half finished, half left live
 *   loops     thousands of loop ids
 *   flood     valid records as fast as possible (the ring buffer overflows)
 *   pub       hostile evl_loop_pub addresses and contents: NULL, kernel,
 *             unaligned, read-only; a step start (since) of 0, in the future
 *             and near 2^64; blocking episodes under each
 *   unbatched the per-event probes (record --no-batch) with NULL, kernel
 *             and unterminated name pointers and out-of-range arguments
 *   kept      batches the loop keeps (a sixth argument, seq) with lying
 *             seqs, lengths, addresses and pubs, one unmapped before the
 *             recorder can read it, loop_start with lying pub sizes; then
 *             waits for the recorder to release the last good one; at
 *             exit prints "released N reader R last S": its
 *             evl_loop_pub's words, and the last good seq
 */
#define _GNU_SOURCE
#define _SDT_HAS_SEMAPHORES 1
#define SDT_USE_VARIADIC 1
#include <sys/sdt.h>

#include "evl-probes.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#define SEM_DEF(name, nargs, doc)                                             \
    __extension__ volatile unsigned short evl_##name##_semaphore              \
        __attribute__((unused, section(".probes")));
EVL_PROBE_LIST(SEM_DEF)
#undef SEM_DEF

#define FIRE(name, ...) STAP_PROBEV(evl, name, __VA_ARGS__)

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static uint64_t rnd(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static _Alignas(4096) uint8_t buf[EVL_BATCH_BYTES + 4096];
static size_t len;
static uint32_t nrec;
static struct evl_loop_pub pub;

static void fire_batch(uint64_t loop, const void *addr, uint32_t n, const void *p, uint32_t nr)
{
    FIRE(batch, loop, (uintptr_t)addr, n, (uintptr_t)p, nr);
}

static void flush(uint64_t loop)
{
    fire_batch(loop, buf, (uint32_t)len, &pub, nrec);
    len = 0;
    nrec = 0;
}

/* Append a record (name bytes follow when given); flushes when full. */
static struct evl_rec *rec(uint64_t loop, uint16_t kind, uint64_t ts, uint64_t task, uint32_t a32,
                           uint64_t a0, uint64_t a1, const void *name, size_t nlen)
{
    size_t size = sizeof(struct evl_rec) + ((nlen + 7) & ~(size_t)7);
    if (len + size > EVL_BATCH_BYTES)
        flush(loop);
    struct evl_rec *r = (struct evl_rec *)(void *)(buf + len);
    memset(r, 0, size);
    *r = (struct evl_rec){ .ts = ts, .task = task, .a0 = a0, .a1 = a1, .a32 = a32, .kind = kind,
                           .size = (uint16_t)size };
    if (nlen)
        memcpy(r + 1, name, nlen);
    len += size;
    nrec++;
    return r;
}

static void create(uint64_t loop, uint64_t task, const char *name, size_t n, uint64_t fn)
{
    rec(loop, EVL_PROBE_ID_task_create, now_ns(), task, (uint32_t)n, 0, fn, name, n);
}

/* A short lifecycle for task: run, suspend, wake, run, finish. */
static void life(uint64_t loop, uint64_t task, int finish)
{
    uint64_t t = now_ns();
    rec(loop, EVL_PROBE_ID_task_run, t, task, 0, 0, 0, NULL, 0);
    rec(loop, EVL_PROBE_ID_task_suspend, t, task, EVL_SUSPEND_SLEEP, t + 1000, 1000, NULL, 0);
    rec(loop, EVL_PROBE_ID_task_wake, t, task, EVL_WAKER_TIMER, 0, 0, NULL, 0);
    rec(loop, EVL_PROBE_ID_task_run, t, task, 0, 0, 0, NULL, 0);
    if (finish)
        rec(loop, EVL_PROBE_ID_task_finish, t, task, EVL_FINAL_FINISHED, 0, 0, NULL, 0);
}

static void sleep_ms(int ms)
{
    struct timespec ts = { 0, ms * 1000000L };
    nanosleep(&ts, NULL);
}

static void spin_ms(int ms)
{
    struct timespec a, b;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &a);
    do
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &b);
    while ((b.tv_sec - a.tv_sec) * 1000000000L + (b.tv_nsec - a.tv_nsec) < ms * 1000000L);
}

/* ------------------------------------------------------------ the modes */

static void mode_random(void)
{
    for (size_t i = 0; i < sizeof(buf); i++)
        buf[i] = (uint8_t)rnd();
    fire_batch(1, buf, (uint32_t)(rnd() % (EVL_BATCH_BYTES + 1)), &pub, (uint32_t)rnd());
    /* random bytes that look a little like records: sizes of 40 */
    for (size_t off = 0; off + 40 <= EVL_BATCH_BYTES; off += 40)
        ((struct evl_rec *)(void *)(buf + off))->size = 40;
    fire_batch(1, buf, EVL_BATCH_BYTES, &pub, (uint32_t)rnd());
}

static void mode_lengths(void)
{
    static const uint32_t lens[] = { 0, 1, 7, 39, 40, 41, EVL_BATCH_BYTES, EVL_BATCH_BYTES + 1,
                                     EVL_BATCH_BYTES + 8, 0x7fffffff, 0xffffffff };
    const void *addrs[] = { buf, NULL, (void *)0xffffffff81000000ull, buf + 3,
                            (void *)0x10, (void *)(uintptr_t)-8 };
    memset(buf, 0, sizeof(buf));
    for (size_t off = 0; off + 40 <= EVL_BATCH_BYTES; off += 40) {
        struct evl_rec *r = (struct evl_rec *)(void *)(buf + off);
        *r = (struct evl_rec){ .ts = now_ns(), .task = 7, .kind = EVL_PROBE_ID_task_run, .size = 40 };
    }
    for (size_t a = 0; a < sizeof(addrs) / sizeof(addrs[0]); a++)
        for (size_t l = 0; l < sizeof(lens) / sizeof(lens[0]); l++)
            fire_batch(1, addrs[a], lens[l], &pub, lens[l]);
}

static void mode_records(void)
{
    uint64_t t = now_ns();
    static const uint16_t kinds[] = { 0, EVL_PROBE_ID_loop_start, EVL_PROBE_ID_loop_stop,
                                      EVL_PROBE_ID_batch, EVL_PROBE_ID_COUNT, 999, 65535 };
    for (size_t i = 0; i < sizeof(kinds) / sizeof(kinds[0]); i++)
        rec(1, kinds[i], t, 5, 0, 0, 0, NULL, 0);
    /* out-of-range enums and task ids */
    rec(1, EVL_PROBE_ID_task_create, t, 0, 3, 0, 0, "abc", 3);
    rec(1, EVL_PROBE_ID_task_create, t, UINT64_MAX, 3, UINT64_MAX, UINT64_MAX, "max", 3);
    rec(1, EVL_PROBE_ID_task_suspend, t, 5, 0xffffffff, 0, 0, NULL, 0);
    rec(1, EVL_PROBE_ID_task_suspend, t, 5, 99, 0, 0, NULL, 0);
    rec(1, EVL_PROBE_ID_task_wake, t, 5, 0, 0, 0, NULL, 0);
    rec(1, EVL_PROBE_ID_task_finish, t, 5, EVL_FINAL_RUNNING, 0, 0, NULL, 0);
    rec(1, EVL_PROBE_ID_task_finish, t, 6, 0x80000004u, (uint64_t)INT64_MIN, 0, NULL, 0);
    rec(1, EVL_PROBE_ID_task_leak, t, 5, 77, 0, 0, NULL, 0);
    rec(1, EVL_PROBE_ID_task_run, t, 0, 0, 0, 0, NULL, 0);
    /* a name length past the record, with the pre-existing flag */
    struct evl_rec *r = rec(1, EVL_PROBE_ID_task_create, t, 8, 0, 0, 0, "xxxxxxxx", 8);
    r->a32 = 0xffffffffu;
    /* timestamps: backwards, 0, near 2^64, in the future */
    rec(1, EVL_PROBE_ID_task_run, t + 1000, 9, 0, 0, 0, NULL, 0);
    rec(1, EVL_PROBE_ID_task_run, t - 1000000000ull, 9, 0, 0, 0, NULL, 0);
    rec(1, EVL_PROBE_ID_task_run, 0, 9, 0, 0, 0, NULL, 0);
    rec(1, EVL_PROBE_ID_task_run, UINT64_MAX - 5, 9, 0, 0, 0, NULL, 0);
    rec(1, EVL_PROBE_ID_task_run, (uint64_t)INT64_MAX + 1, 9, 0, 0, 0, NULL, 0);
    rec(1, EVL_PROBE_ID_task_run, t + 3600000000000ull, 9, 0, 0, 0, NULL, 0);
    flush(1);
    /* framing: size 0, unaligned sizes, a size past the batch */
    static const uint16_t sizes[] = { 0, 1, 41, 44, 48, 65535 };
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        rec(1, EVL_PROBE_ID_task_run, now_ns(), 10, 0, 0, 0, NULL, 0);
        r = rec(1, EVL_PROBE_ID_task_run, now_ns(), 10, 0, 0, 0, NULL, 0);
        r->size = sizes[i];
        rec(1, EVL_PROBE_ID_task_run, now_ns(), 10, 0, 0, 0, NULL, 0);
        flush(1);
        fire_batch(1, buf, 44, &pub, 1);      /* unaligned length */
    }
}

static void mode_names(void)
{
    static const char *const names[] = {
        "quote\"d", "back\\slash", "nul\0inside", "\xff\xfe bytes", "bad \xc3\x28 utf8",
        "overlong \xc0\xaf", "surrogate \xed\xa0\x80", "%n%n%s%s%x", "\x1b[31mred\x1b[0m\x1b]0;title\x07",
        "new\nline", "cr\rreturn", "tab\there", "<script>alert(1)</script>", "a&b;c", "}{][",
        "\"},{\"x\":\"", "label=\"x\"];a->b;//", "0123456789012345678901234567890123456789012345678",
        "\xe2\x80\xae rtl", "",
    };
    uintptr_t base = (uintptr_t)&mode_names;
    uint64_t id = 100;
    /* Tasks with hostile names, each a short life; one stays live. */
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++, id++) {
        size_t n = i == 2 ? 10 : strlen(names[i]);
        create(1, id, names[i], n, base + i);
        life(1, id, i % 4 != 3);
    }
    /* 5000 tasks with distinct function addresses: more than the symbol
     * cache holds (4096), so it is emptied, then stacks are symbolized. */
    for (int i = 0; i < 5000; i++, id++) {
        create(1, id, "fn", 2, base + 64 + (uint64_t)i * 16);
        life(1, id, 1);
    }
    flush(1);
    /* Blocking episodes inside a hostile-named task: off-CPU and on-CPU. */
    pub.task = 100;
    pub.phase = EVL_PHASE_TASK;
    for (int k = 0; k < 3; k++) {
        pub.steps++;
        pub.since = now_ns();
        rec(1, EVL_PROBE_ID_task_run, pub.since, 100 + (uint64_t)k, 0, 0, 0, NULL, 0);
        sleep_ms(30);
        pub.steps++;
        pub.since = now_ns();
        spin_ms(40);
        pub.phase = EVL_PHASE_OTHER;
        rec(1, EVL_PROBE_ID_task_suspend, now_ns(), 100 + (uint64_t)k, EVL_SUSPEND_YIELD, 0, 0,
            NULL, 0);
        pub.phase = EVL_PHASE_POLL;
        flush(1);
        pub.phase = EVL_PHASE_TASK;
    }
    pub.phase = EVL_PHASE_POLL;
    flush(1);
}

/* A fixed number of ids, whatever the time it takes: 68 MB of records, so
 * a 128 MiB ring buffer holds them all even if the recorder never drained
 * it (the test's outcome does not depend on the machine's speed). */
#define HOSTILE_TASK_IDS 1000000
static void mode_tasks(void)
{
    for (uint64_t id = 1; id <= HOSTILE_TASK_IDS; id++) {
        uint64_t task = id * 2654435761u + 1;
        rec(1, EVL_PROBE_ID_task_create, now_ns(), task, 1, 0, 0, "t", 1);
        if (id & 1)
            rec(1, EVL_PROBE_ID_task_finish, now_ns(), task, EVL_FINAL_FINISHED, 0, 0, NULL, 0);
    }
    flush(1);
}

static void mode_loops(void)
{
    for (uint64_t loop = 1; loop <= 5000; loop++) {
        rec(loop * 7919, EVL_PROBE_ID_task_create, now_ns(), loop, 4, 0, 0, "loop", 4);
        flush(loop * 7919);
        if (loop % 500 == 0)
            FIRE(loop_start, loop + 1000000, (uint32_t)getpid(), (uintptr_t)&pub);
    }
}

static void mode_flood(double secs)
{
    uint64_t end = now_ns() + (uint64_t)(secs * 1e9), id = 1;
    while (now_ns() < end) {
        for (int i = 0; i < 1500; i++) {
            uint64_t t = now_ns();
            rec(1, EVL_PROBE_ID_task_run, t, id, 0, 0, 0, NULL, 0);
            rec(1, EVL_PROBE_ID_task_suspend, t, id, EVL_SUSPEND_YIELD, 0, 0, NULL, 0);
            id = id % 1000 + 1;
        }
        flush(1);
    }
}

static void mode_pub(void)
{
    void *ro = mmap(NULL, 4096, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    const void *pubs[] = { NULL, (void *)0xffffffff81000000ull, (const uint8_t *)&pub + 1, ro,
                           (void *)(uintptr_t)-32 };
    for (size_t i = 0; i < sizeof(pubs) / sizeof(pubs[0]); i++) {
        rec(2 + i, EVL_PROBE_ID_task_create, now_ns(), 500 + i, 1, 0, 0, "p", 1);
        fire_batch(2 + i, buf, (uint32_t)len, pubs[i], nrec);
        len = 0;
        nrec = 0;
        sleep_ms(20);
    }
    /* A valid pub with a lying step start: 0, the future, near 2^64. */
    static const uint64_t since[] = { 0, 1, UINT64_MAX - 1000, (uint64_t)INT64_MAX + 7 };
    pub.phase = EVL_PHASE_POLL;
    flush(1);
    for (size_t i = 0; i < sizeof(since) / sizeof(since[0]); i++) {
        pub.task = 600 + i;
        pub.steps++;
        pub.phase = EVL_PHASE_TASK;
        pub.since = since[i] == 1 ? now_ns() + 3600000000000ull : since[i];
        spin_ms(30);
        sleep_ms(25);
        pub.phase = EVL_PHASE_POLL;
        flush(1);
    }
    pub.phase = 77;                   /* an unknown phase */
    sleep_ms(25);
    pub.phase = EVL_PHASE_POLL;
    flush(1);
}

/* Out of line so that every probe operand is a register (libbpf reads
 * register, constant and base+offset operands only). */
static __attribute__((noinline)) void fire_kept(uint64_t loop, const void *addr, uint32_t n,
                                                const void *p, uint32_t nr, uint32_t seq)
{
    FIRE(batch, loop, (uintptr_t)addr, n, (uintptr_t)p, nr, seq);
}

static __attribute__((noinline)) void fire_start(uint64_t loop, const void *p, uint32_t size)
{
    FIRE(loop_start, loop, (uint32_t)gettid(), (uintptr_t)p, size);
}

static uint32_t kept_seq;             /* the last good kept batch's */

static void mode_kept(void)
{
    void *ro = mmap(NULL, 4096, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    const void *pubs[] = { &pub, NULL, (void *)0xffffffff81000000ull, (const uint8_t *)&pub + 1,
                           ro, (void *)(uintptr_t)-48 };
    const size_t npubs = sizeof(pubs) / sizeof(pubs[0]);
    static const uint32_t sizes[] = { 0, 1, 44, sizeof(struct evl_loop_pub), 0xffffffffu };
    for (size_t i = 0; i < npubs; i++)
        for (size_t j = 0; j < sizeof(sizes) / sizeof(sizes[0]); j++)
            fire_start(i ? 10 + i : 1, pubs[i], sizes[j]);
    /* good records, kept (each in a buffer of its own, left alone as a
     * loop would), under seqs that wrap, repeat and go back */
    static const uint32_t seqs[] = { 1, 0, 0xffffffffu, 7, 7, 3 };
    static _Alignas(8) uint8_t kbuf[sizeof(seqs) / sizeof(seqs[0]) + 1][256];
    for (size_t i = 0; i < sizeof(seqs) / sizeof(seqs[0]); i++) {
        rec(1, EVL_PROBE_ID_task_create, now_ns(), 800 + i, 4, 0, 0, "kept", 4);
        memcpy(kbuf[i], buf, len);
        fire_kept(1, kbuf[i], (uint32_t)len, &pub, nrec, seqs[i]);
        len = 0;
        nrec = 0;
    }
    /* where they are, and how long, lied about */
    const void *addrs[] = { NULL, (void *)0xffffffff81000000ull, buf + 1, (void *)(uintptr_t)-4096,
                            ro };
    static const uint32_t lens[] = { 0, 1, 44, EVL_BATCH_BYTES, EVL_BATCH_BYTES + 1, 0xffffffffu };
    for (size_t a = 0; a < sizeof(addrs) / sizeof(addrs[0]); a++)
        for (size_t l = 0; l < sizeof(lens) / sizeof(lens[0]); l++)
            fire_kept(2, addrs[a], lens[l], pubs[(a + l) % npubs], lens[l], (uint32_t)rnd());
    /* gone before the recorder reads it */
    uint8_t *gone = mmap(NULL, EVL_BATCH_BYTES, PROT_READ | PROT_WRITE,
                         MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    rec(1, EVL_PROBE_ID_task_create, now_ns(), 900, 4, 0, 0, "gone", 4);
    memcpy(gone, buf, len);
    fire_kept(1, gone, (uint32_t)len, &pub, nrec, 8);
    munmap(gone, EVL_BATCH_BYTES);
    len = 0;
    nrec = 0;
    /* the last good one, a new seq each round: the recorder frees it, as
     * libevl waits for */
    rec(1, EVL_PROBE_ID_task_create, now_ns(), 901, 4, 0, 0, "last", 4);
    size_t last = sizeof(kbuf) / sizeof(kbuf[0]) - 1;
    memcpy(kbuf[last], buf, len);
    kept_seq = kept_seq < 4242 ? 4242 : kept_seq + 1;
    fire_kept(1, kbuf[last], (uint32_t)len, &pub, nrec, kept_seq);
    len = 0;
    nrec = 0;
    for (int i = 0; i < 2000 && *(volatile uint32_t *)&pub.released != kept_seq; i++)
        sleep_ms(1);
    munmap(ro, 4096);
}
static __attribute__((noinline)) void fire_create(uint64_t loop, uint64_t task, const char *name,
                                                  uintptr_t fn)
{
    FIRE(task_create, loop, task, 0, name, fn);
}

static void mode_unbatched(void)
{
    static const char unterminated[8] = { 'a', 'b', 'c', 'd', 'e', 'f', 'g', 'h' };
    const char *names[] = { NULL, (const char *)0xffffffff81000000ull, unterminated,
                            "ok\x1b[2J\xff", (const char *)(uintptr_t)1 };
    for (uint64_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        fire_create(1, 700 + i, names[i], (uintptr_t)&mode_unbatched);
        FIRE(task_run, 1, 700 + i);
        FIRE(task_suspend, 1, 700 + i, 0xffffffffu, UINT64_MAX, UINT64_MAX);
        FIRE(task_wake, 1, 700 + i, 12345u, UINT64_MAX);
        FIRE(task_cancel, 1, 700 + i, 0);
        FIRE(task_leak, 1, 700 + i, 0u);
        FIRE(task_finish, 1, 700 + i, 0xffffffffu, INT64_MIN);
    }
    FIRE(task_run, 1, 0);
    FIRE(task_run, 0, UINT64_MAX);
    FIRE(poll_enter, 1, INT64_MIN);
    FIRE(poll_exit, 1, 0xffffffffu);
    FIRE(callback_begin, 1, 0);
    FIRE(callback_end, 1, UINT64_MAX);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: hostile_target MODE [SECONDS]\n");
        return 2;
    }
    const char *mode = argv[1];
    double secs = argc > 2 ? atof(argv[2]) : 1.0;
    setvbuf(stdout, NULL, _IOLBF, 0);
    printf("pid %d\n", (int)getpid());
    for (int i = 0; i < 10000; i++) {
        unsigned sum = 0;
#define SEM_SUM(name, nargs, doc) sum += evl_##name##_semaphore;
        EVL_PROBE_LIST(SEM_SUM)
#undef SEM_SUM
        if (sum)
            break;
        sleep_ms(1);
    }
    pub.phase = EVL_PHASE_POLL;
    FIRE(loop_start, 1, (uint32_t)gettid(), (uintptr_t)&pub);
    uint64_t end = now_ns() + (uint64_t)(secs * 1e9);
    do {
        if (!strcmp(mode, "random"))
            mode_random();
        else if (!strcmp(mode, "lengths"))
            mode_lengths();
        else if (!strcmp(mode, "records"))
            mode_records();
        else if (!strcmp(mode, "names"))
            mode_names();
        else if (!strcmp(mode, "tasks"))
            mode_tasks();
        else if (!strcmp(mode, "loops"))
            mode_loops();
        else if (!strcmp(mode, "flood"))
            mode_flood(secs);
        else if (!strcmp(mode, "pub"))
            mode_pub();
        else if (!strcmp(mode, "unbatched"))
            mode_unbatched();
        else if (!strcmp(mode, "kept"))
            mode_kept();
        else {
            fprintf(stderr, "hostile_target: unknown mode '%s'\n", mode);
            return 2;
        }
        sleep_ms(5);
    } while (now_ns() < end);
    if (!strcmp(mode, "kept"))
        printf("released %u reader %u last %u\n", *(volatile uint32_t *)&pub.released,
               *(volatile uint32_t *)&pub.reader, kept_seq);
    FIRE(loop_stop, 1, (uint32_t)gettid());
    return 0;
}
