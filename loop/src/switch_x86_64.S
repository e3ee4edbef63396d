/*
 * switch_x86_64.S -- the task context switch for x86-64 SysV.
 *
 * evl__ctx_switch(void **from, void *to): push the callee-saved registers,
 * store rsp in *from, load rsp from to, pop them and jump to the saved
 * return address.  pop+jmp instead of ret: the return-stack predictor
 * mispredicts every ret after a stack switch (measured ~15 ns vs ~3 ns).
 * No signal mask, no FPU control words (tasks share the thread's).
 *
 * evl__ctx_trampoline: first "return" of a new stack made by evl__ctx_make
 * (task.c); r12 holds the argument and rbx the entry function.
 */
    .text
    .globl  evl__ctx_switch
    .type   evl__ctx_switch, @function
    .p2align 4
evl__ctx_switch:
    .cfi_startproc
    pushq   %rbp
    pushq   %rbx
    pushq   %r12
    pushq   %r13
    pushq   %r14
    pushq   %r15
    movq    %rsp, (%rdi)
    movq    %rsi, %rsp
    popq    %r15
    popq    %r14
    popq    %r13
    popq    %r12
    popq    %rbx
    popq    %rbp
    popq    %rcx
    jmpq    *%rcx
    .cfi_endproc
    .size   evl__ctx_switch, .-evl__ctx_switch

    .globl  evl__ctx_trampoline
    .type   evl__ctx_trampoline, @function
    .p2align 4
evl__ctx_trampoline:
    .cfi_startproc
    .cfi_undefined rip
    movq    %r12, %rdi
    callq   *%rbx
    ud2
    .cfi_endproc
    .size   evl__ctx_trampoline, .-evl__ctx_trampoline

    .section .note.GNU-stack,"",@progbits
