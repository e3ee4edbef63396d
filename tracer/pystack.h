/*
 * pystack.h -- the CPython stack of a loop thread at a blocking point, as
 * captured by BPF (pystack.bpf.h) and resolved to function, file:line and
 * asyncio task name in user space (pystack.c).  Shared by BPF and user
 * space: fixed-width types only, explicit padding, sizes asserted.
 *
 * Everything here was read from the target's memory: an address, an
 * offset, a name is the target's word until pystack.c has checked it.
 */
#ifndef LOOPSCOPE_PYSTACK_H
#define LOOPSCOPE_PYSTACK_H

#ifndef __bpf__
#include <linux/types.h>
#endif

#define LS_PY_MAX_FRAMES 32     /* innermost frames kept */
#define LS_PY_TASK_NAME 48      /* bytes of the asyncio task's name kept */

/* Where things are in one CPython version's structures: filled by
 * pystack.c (ls_py_detect) before the BPF object is loaded, 0 = unused. */
struct ls_py_cfg {
    __u64 runtime;              /* address of _PyRuntime in the target (0: not CPython) */
    __u32 version;              /* PY_VERSION_HEX >> 16, e.g. 0x030b */
    __u32 pad0;
    /* _PyRuntime -> interpreters -> thread states */
    __u32 runtime_interp_head;  /* _PyRuntimeState.interpreters.head */
    __u32 interp_threads_head;  /* PyInterpreterState.threads.head */
    __u32 interp_next;          /* PyInterpreterState.next */
    __u32 tstate_next;          /* PyThreadState.next */
    __u32 tstate_native_tid;    /* PyThreadState.native_thread_id */
    __u32 tstate_frame;         /* PyThreadState -> current frame (3.11: cframe) */
    __u32 cframe_current;       /* _PyCFrame.current_frame (3.11/3.12), ~0 if none */
    /* _PyInterpreterFrame (3.11+) or PyFrameObject (3.10) */
    __u32 frame_code;           /* f_code / f_executable */
    __u32 frame_previous;       /* previous / f_back */
    __u32 frame_instr;          /* prev_instr / instr_ptr / f_lasti */
    __u32 frame_owner;          /* owner, ~0 if none */
    __u32 frame_is_entry;       /* is_entry (3.11), ~0 if none */
    __u32 frame_localsplus;     /* localsplus[0] (the first argument: self) */
    __u32 code_adaptive;        /* PyCodeObject.co_code_adaptive */
    /* asyncio: Handle._run(self) -> self._callback -> the Task -> its name */
    __u32 handle_callback;      /* offset of Handle._callback in a Handle */
    __u32 callback_task;        /* offset of the Task in the step callback */
    __u32 task_name;            /* offset of the name in a Task */
    __u32 unicode_len;          /* PyASCIIObject.length */
    __u32 unicode_state;        /* PyASCIIObject.state */
    __u32 unicode_data;         /* first byte of a compact ASCII string */
    __u32 pad1;
    __u64 handle_run_code;      /* 0, or a code address known to be Handle._run */
};

/* One Python frame: its code object and the offset of the instruction it
 * is at, in bytes from the start of co_code_adaptive (or f_lasti). */
struct ls_py_frame {
    __u64 code;
    __s32 instr;
    __u32 flags;                /* LS_PYF_* */
};

enum {
    LS_PYF_ENTRY = 1,           /* first frame of a C-level eval call (is_entry) */
    LS_PYF_HANDLE_RUN = 2,      /* looked like asyncio's Handle._run */
};

struct ls_pystack {
    __u32 nframes;              /* frames filled, innermost first */
    __u32 flags;                /* LS_PYS_* */
    __u64 task;                 /* address of the asyncio Task, 0 if none */
    __u32 task_name_len;        /* bytes in task_name */
    __u32 pad;
    char task_name[LS_PY_TASK_NAME];
    struct ls_py_frame f[LS_PY_MAX_FRAMES];
};
_Static_assert(sizeof(struct ls_pystack) == 72 + 16 * LS_PY_MAX_FRAMES, "ls_pystack layout");

enum {
    LS_PYS_TRUNCATED = 1,       /* more frames than LS_PY_MAX_FRAMES */
    LS_PYS_NO_THREAD = 2,       /* no thread state for this thread */
    LS_PYS_READ_ERROR = 4,      /* some memory could not be read */
};

#endif /* LOOPSCOPE_PYSTACK_H */
