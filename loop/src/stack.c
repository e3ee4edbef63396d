/*
 * stack.c -- task stacks: mmap'd with a guard page, pooled per loop, bound
 * to a task lazily at its first step (a task cancelled before it starts
 * never gets one).  Also the stack-overflow report and evl__ctx_make.
 *
 * Each stack is two mappings (guard + usable), so more than ~32k live tasks
 * need vm.max_map_count raised above its default of 65530 (loop/README.md).
 */
#define _GNU_SOURCE
#include "evl-internal.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* Free stacks kept per loop; more are unmapped (a burst of 1e5 sleepers
 * should not pin 1e5 stacks forever). */
#define EVL__STACK_POOL_MAX 256

/* Stack colours.  Every stack's mapping ends on a page boundary, so
 * without them the frames of every task sit at the same offsets within a
 * page: the same sets of a first-level cache (whose sets span 4 KiB), and
 * with a handful of connections' tasks running in turn those sets overflow
 * (under callgrind's cache model, examples/http_server under wrk -c8 took
 * 7 first-level misses a request in the task switch, the poll and the
 * handler's buffers; its libuv peer none).  So each new stack's frames
 * start EVL__STACK_COLOUR_STEP * c bytes below its end, c going through
 * 0 .. EVL__STACK_COLOURS - 1 in strides of 7; the mapping is that much
 * larger, so stack_size stays usable. */
#define EVL__STACK_COLOURS 16
#define EVL__STACK_COLOUR_STEP 64
#define EVL__STACK_COLOUR_MAX ((EVL__STACK_COLOURS - 1) * EVL__STACK_COLOUR_STEP)

__thread evl__task *evl__tls_running_task;
static size_t page_size;

static size_t evl__page(void)
{
    if (!page_size)
        page_size = (size_t)sysconf(_SC_PAGESIZE);
    return page_size;
}

evl__stack *evl__stack_get(evl_loop *loop)
{
    evl__stack *s = loop->stack_pool;
    if (s) {
        loop->stack_pool = s->next;
        loop->stack_pool_n--;
        return s;
    }
    size_t pg = evl__page();
    size_t usable = (loop->stack_size + EVL__STACK_COLOUR_MAX + pg - 1) & ~(pg - 1);
    size_t len = usable + pg;
    void *base = mmap(NULL, len, PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK, -1, 0);
    if (base == MAP_FAILED)
        goto fail;
    if (mprotect(base, pg, PROT_NONE) != 0) {
        munmap(base, len);
        goto fail;
    }
    s = malloc(sizeof(*s));
    if (!s) {
        munmap(base, len);
        errno = ENOMEM;
        return NULL;
    }
    s->next = NULL;
    s->base = base;
    s->map_size = len;
    s->lo = (char *)base + pg;
    s->hi = (char *)base + len;
    s->top = (char *)s->hi -
             (size_t)(loop->stacks_made++ * 7u % EVL__STACK_COLOURS) * EVL__STACK_COLOUR_STEP;
    return s;
fail:
    if (errno == ENOMEM && evl__debug(loop))
        evl__warn(loop, "cannot map a task stack (%zu bytes): out of memory or "
                  "vm.max_map_count reached (each stack is 2 mappings)", len);
    errno = ENOMEM;
    return NULL;
}

static void evl__stack_unmap(evl__stack *s)
{
    munmap(s->base, s->map_size);
    free(s);
}

void evl__stack_put(evl_loop *loop, evl__stack *s)
{
    if (loop->stack_pool_n >= EVL__STACK_POOL_MAX) {
        evl__stack_unmap(s);
        return;
    }
    s->next = loop->stack_pool;
    loop->stack_pool = s;
    loop->stack_pool_n++;
}

void evl__stack_pool_release(evl_loop *loop)
{
    while (loop->stack_pool) {
        evl__stack *s = loop->stack_pool;
        loop->stack_pool = s->next;
        evl__stack_unmap(s);
    }
    loop->stack_pool_n = 0;
}

/* ------------------------------------------------------ overflow report */

static struct sigaction evl__old_segv;

static void evl__put(const char *s)
{
    ssize_t r = write(2, s, strlen(s));
    (void)r;
}

static void evl__put_u64(uint64_t v)
{
    char buf[24];
    int i = sizeof(buf);
    buf[--i] = 0;
    do {
        buf[--i] = (char)('0' + v % 10);
        v /= 10;
    } while (v && i > 0);
    evl__put(buf + i);
}

/* Runs on the alternate signal stack.  Only async-signal-safe calls. */
static void evl__segv_handler(int sig, siginfo_t *si, void *uctx)
{
    evl__task *t = evl__tls_running_task;
    char *addr = si->si_addr;
    if (t && t->stack && addr >= (char *)t->stack->base - 65536 && addr < (char *)t->stack->lo) {
        evl__put("evl: stack overflow in task '");
        evl__put(t->name);
        evl__put("' (id ");
        evl__put_u64(t->id);
        evl__put("): it used more than its ");
        evl__put_u64((uint64_t)t->fut.loop->stack_size); /* (the mapping holds more: colour) */
        evl__put("-byte stack and hit the guard page; raise evl_loop_options.stack_size\n");
    }
    /* Chain to whoever was there before, else die with the default action
     * once the handler returns and the access faults again. */
    if (evl__old_segv.sa_flags & SA_SIGINFO) {
        if (evl__old_segv.sa_sigaction) {
            evl__old_segv.sa_sigaction(sig, si, uctx);
            return;
        }
    } else if (evl__old_segv.sa_handler != SIG_DFL && evl__old_segv.sa_handler != SIG_IGN) {
        evl__old_segv.sa_handler(sig);
        return;
    }
    signal(sig, SIG_DFL);
}

static void evl__stack_install_once(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_sigaction = evl__segv_handler;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGSEGV, &sa, &evl__old_segv);
}

void evl__stack_install_overflow_handler(void)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, evl__stack_install_once);
}

/* ------------------------------------------------------ context creation */

#if defined(__x86_64__)
void evl__ctx_trampoline(void);

void *evl__ctx_make(void *stack_hi, void (*entry)(void *), void *arg)
{
    uintptr_t top = (uintptr_t)stack_hi & ~(uintptr_t)15;
    /* After evl__ctx_switch pops 6 registers and the return address, rsp
     * must be 16-byte aligned at the trampoline's call (SysV ABI). */
    uint64_t *sp = (uint64_t *)(top - 16 - 7 * 8);
    sp[0] = 0;                         /* r15 */
    sp[1] = 0;                         /* r14 */
    sp[2] = 0;                         /* r13 */
    sp[3] = (uint64_t)(uintptr_t)arg;  /* r12 */
    sp[4] = (uint64_t)(uintptr_t)entry;/* rbx */
    sp[5] = 0;                         /* rbp: ends frame-pointer walks */
    sp[6] = (uint64_t)(uintptr_t)evl__ctx_trampoline;
    return sp;
}
#else
/* Portable fallback: ucontext (glibc's swapcontext also saves the signal
 * mask with a syscall, ~20x slower than the x86-64 switch). */
#include <ucontext.h>

struct evl__uctx {
    ucontext_t uc;
    void (*entry)(void *);
    void *arg;
};

static void evl__uctx_start(unsigned hi, unsigned lo)
{
    struct evl__uctx *c = (struct evl__uctx *)(((uintptr_t)hi << 32) | (uintptr_t)lo);
    c->entry(c->arg);
    abort();
}

void *evl__ctx_make(void *stack_hi, void (*entry)(void *), void *arg)
{
    /* Called from a task's first step, on the loop thread: the usable size
     * is the loop's stack size; the context record sits at the top. */
    size_t usable = evl__tls_loop->stack_size;
    uintptr_t top = ((uintptr_t)stack_hi - sizeof(struct evl__uctx)) & ~(uintptr_t)63;
    struct evl__uctx *c = (struct evl__uctx *)top;
    getcontext(&c->uc);
    c->entry = entry;
    c->arg = arg;
    c->uc.uc_stack.ss_sp = (char *)stack_hi - usable;
    c->uc.uc_stack.ss_size = top - (uintptr_t)c->uc.uc_stack.ss_sp;
    c->uc.uc_link = NULL;
    uintptr_t p = (uintptr_t)c;
    makecontext(&c->uc, (void (*)(void))evl__uctx_start, 2, (unsigned)(p >> 32), (unsigned)p);
    return &c->uc;
}

void evl__ctx_switch(void **from, void *to)
{
    ucontext_t self;
    *from = &self;
    swapcontext(&self, (ucontext_t *)to);
}
#endif
