/*
 * symbols_stack.c -- unwind and symbolize one thread of a live process the
 * way the recorder does (tracer/symbols.c), from a copy of its registers
 * and of 64 KiB of its stack.  For tests/tracer/test_symbols_node.py.
 *
 *     symbols_stack PID [TID]
 *
 * Stops the thread (PTRACE_SEIZE + PTRACE_INTERRUPT), reads its registers
 * (PTRACE_GETREGS) and the stack from rsp up (process_vm_readv), detaches,
 * then calls ls_syms_unwind and ls_syms_lookup.  Output, one frame a line:
 *
 *     frame DEPTH 0xPC FUNCTION|? FILE|? LINE MODULE|?
 *     perfmap yes|no STATUS
 *
 * (inlined callers get their own line, same pc).  Exit 0 when at least
 * one frame was unwound.
 */
#define _GNU_SOURCE
#include "symbols.h"

#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ptrace.h>
#include <sys/uio.h>
#include <sys/user.h>
#include <sys/wait.h>

#define STACK_BYTES 65536
#define MAX_DEPTH 128

static const char *or_q(const char *s)
{
    return s && *s ? s : "?";
}

/* Print a string on one line: spaces and control bytes escaped. */
static void put(const char *s)
{
    s = or_q(s);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c <= ' ' || c == 0x7f || c == '\\')
            printf("\\x%02x", c);
        else
            putchar(c);
    }
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: symbols_stack PID [TID]\n");
        return 2;
    }
    pid_t pid = atoi(argv[1]);
    pid_t tid = argc > 2 ? atoi(argv[2]) : pid;
    if (ptrace(PTRACE_SEIZE, tid, 0, 0) != 0) {
        fprintf(stderr, "PTRACE_SEIZE %d: %s\n", tid, strerror(errno));
        return 1;
    }
    if (ptrace(PTRACE_INTERRUPT, tid, 0, 0) != 0) {
        fprintf(stderr, "PTRACE_INTERRUPT: %s\n", strerror(errno));
        return 1;
    }
    int st;
    if (waitpid(tid, &st, __WALL) != tid || !WIFSTOPPED(st)) {
        fprintf(stderr, "waitpid: not stopped\n");
        return 1;
    }
    struct user_regs_struct u;
    if (ptrace(PTRACE_GETREGS, tid, 0, &u) != 0) {
        fprintf(stderr, "PTRACE_GETREGS: %s\n", strerror(errno));
        return 1;
    }
    /* DWARF x86-64 order: rax rdx rcx rbx rsi rdi rbp rsp r8..r15 rip */
    uint64_t regs[17] = { u.rax, u.rdx, u.rcx, u.rbx, u.rsi, u.rdi, u.rbp, u.rsp,
                          u.r8, u.r9, u.r10, u.r11, u.r12, u.r13, u.r14, u.r15, u.rip };
    static uint8_t stack[STACK_BYTES];
    ssize_t got = 0;
    /* The stack may end (top of mapping) before 64 KiB: read page by page
     * until the first failure, as bpf_probe_read_user would stop. */
    for (size_t off = 0; off < STACK_BYTES; off += 4096) {
        struct iovec l = { stack + off, 4096 };
        struct iovec r = { (void *)(uintptr_t)(u.rsp + off), 4096 };
        ssize_t n = process_vm_readv(pid, &l, 1, &r, 1, 0);
        if (n <= 0)
            break;
        got += n;
        if (n < 4096)
            break;
    }
    ptrace(PTRACE_DETACH, tid, 0, 0);
    printf("regs rip=0x%llx rsp=0x%llx rbp=0x%llx stack=%zd\n", (unsigned long long)u.rip,
           (unsigned long long)u.rsp, (unsigned long long)u.rbp, got);

    ls_syms *s = ls_syms_new(pid);
    if (!s) {
        fprintf(stderr, "ls_syms_new failed\n");
        return 1;
    }
    uint64_t pcs[MAX_DEPTH];
    int n = ls_syms_unwind(s, tid, regs, stack, got > 0 ? (size_t)got : 0, pcs, MAX_DEPTH);
    int depth = 0;
    for (int i = 0; i < n; i++) {
        for (const ls_sym *f = ls_syms_lookup(s, pcs[i]); f; f = f->inlined_into) {
            printf("frame %d 0x%llx ", depth++, (unsigned long long)pcs[i]);
            put(f->function);
            putchar(' ');
            put(f->file);
            printf(" %d ", f->line);
            put(f->module);
            putchar('\n');
        }
    }
    uint64_t unnamed, js = ls_syms_jit_frames(s, &unnamed);
    printf("jsframes %llu unnamed %llu\n", (unsigned long long)js, (unsigned long long)unnamed);
    printf("perfmap %s %s\n", ls_syms_has_perfmap(s) ? "yes" : "no", ls_syms_perfmap_status(s));
    ls_syms_free(s);
    return n > 0 ? 0 : 1;
}
