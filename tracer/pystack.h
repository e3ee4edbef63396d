/*
 * pystack.h -- the CPython stack of a loop thread at a blocking point, as
 * captured by BPF (pystack.bpf.h) and resolved to function, file:line and
 * asyncio task name in user space (pystack.c).  Shared by BPF and user
 * space: fixed-width types only, explicit padding, sizes asserted.  How the
 * stack is found in each CPython version: PYTHON.md.
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

#define LS_PY_NONE 0xffffffffu  /* an offset that does not exist in this version */

/* Where things are in one CPython version's structures: filled by
 * pystack_detect.c (ls_py_detect) before the BPF object is loaded.  Offsets are
 * in bytes; LS_PY_NONE = the field does not exist in this version. */
struct ls_py_cfg {
    __u64 runtime;              /* address of _PyRuntime in the target (0: not CPython) */
    __u32 version;              /* PY_VERSION_HEX >> 16, e.g. 0x030b */
    __u32 kind;                 /* LS_PY_KIND_* */
    /* type objects in the target (exact type checks) */
    __u64 code_type;            /* PyCode_Type */
    __u64 unicode_type;         /* PyUnicode_Type */
    __u64 long_type;            /* PyLong_Type */
    __u64 cfunction_type;       /* PyCFunction_Type (a bound C method: task_wakeup) */
    __u64 cmethod_type;         /* PyCMethod_Type, 0 if none */
    __u64 method_type;          /* PyMethod_Type (a bound Python method) */
    __u64 handle_run_code;      /* 0, or the code object of asyncio.events.Handle._run */
    /* _PyRuntime -> interpreters -> thread states */
    __u32 runtime_interp_head;  /* _PyRuntimeState.interpreters.head */
    __u32 interp_threads_head;  /* PyInterpreterState.threads.head (3.10: tstate_head) */
    __u32 interp_next;          /* PyInterpreterState.next */
    __u32 tstate_next;          /* PyThreadState.next */
    __u32 tstate_interp;        /* PyThreadState.interp (detection checks it) */
    __u32 tstate_tid;           /* 3.11+: native_thread_id; 3.10: thread_id (a pthread_t) */
    __u32 pthread_tid;          /* 3.10: offset of the kernel tid in glibc's struct pthread; else LS_PY_NONE */
    __u32 tstate_frame;         /* 3.10: frame; 3.11/3.12: cframe; 3.13: current_frame */
    __u32 cframe_current;       /* _PyCFrame.current_frame (3.11/3.12), else LS_PY_NONE */
    /* _PyInterpreterFrame (3.11+) or PyFrameObject (3.10) */
    __u32 frame_code;           /* f_code / f_executable */
    __u32 frame_previous;       /* previous / f_back */
    __u32 frame_instr;          /* prev_instr / instr_ptr (pointers) / f_lasti (int, code units) */
    __u32 frame_owner;          /* owner (a byte), LS_PY_NONE in 3.10 */
    __u32 frame_is_entry;       /* is_entry (a byte, 3.11), else LS_PY_NONE */
    __u32 frame_localsplus;     /* localsplus[0] / f_localsplus[0] (the first argument: self) */
    __u32 owner_cstack;         /* owner value of the C-stack shim frames (3.12+), else LS_PY_NONE */
    /* code objects */
    __u32 code_adaptive;        /* co_code_adaptive (3.11+), else LS_PY_NONE */
    __u32 code_code;            /* co_code (3.10, a bytes object), else LS_PY_NONE */
    __u32 code_name;            /* co_name */
    __u32 code_qualname;        /* co_qualname (3.11+), else LS_PY_NONE */
    __u32 code_filename;        /* co_filename */
    __u32 code_linetable;       /* co_linetable (a bytes object) */
    __u32 code_firstlineno;     /* co_firstlineno (an int) */
    __u32 bytes_size;           /* PyBytesObject.ob_size */
    __u32 bytes_sval;           /* PyBytesObject.ob_sval */
    /* asyncio: Handle._run(self) -> self._callback -> the Task -> its name */
    __u32 handle_callback;      /* offset of the Handle._callback slot in a Handle */
    __u32 callback_task;        /* TaskStepMethWrapper.sw_task */
    __u32 cfunc_self;           /* PyCFunctionObject.m_self == PyMethodObject.im_self */
    __u32 task_name;            /* TaskObj.task_name (a str, or an int: lazy "Task-N", 3.12+) */
    __u32 type_basicsize;       /* PyTypeObject.tp_basicsize */
    __u32 unicode_len;          /* PyASCIIObject.length */
    __u32 unicode_state;        /* PyASCIIObject.state */
    __u32 unicode_data;         /* data of a compact ASCII string: sizeof(PyASCIIObject) */
    __u32 unicode_cdata;        /* data of a compact non-ASCII string: sizeof(PyCompactUnicodeObject) */
    __u32 long_kind;            /* LS_PY_LONG_* */
    __u32 long_digit;           /* ob_digit */
    __u32 frame_read;           /* bytes of a frame the walker reads at once (<= LS_PYW_WIN) */
    __u32 dict_keys311;         /* dict keys layout: 0 for 3.10, 1 for 3.11+ */
    __u32 tstate_running_task;  /* 3.14+: _PyThreadStateImpl.asyncio_running_task (the
                                 * running task of a thread, whichever loop), else LS_PY_NONE */
    /* asyncio's current-task dict {loop: task} (0: not known yet), set
     * while the walk runs once a census (pystack_tasks.c) has found it:
     * the task of a stack without Handle._run (uvloop runs steps from
     * Cython, not from a Python Handle._run) */
    __u64 current_tasks;
};

/* unicode state bits, the same in 3.10-3.13 (default builds) */
#define LS_PYW_U_KIND(st) (((st) >> 2) & 7)
#define LS_PYW_U_COMPACT 0x20u
#define LS_PYW_U_ASCII 0x40u

enum {
    LS_PY_KIND_FRAMEOBJ = 1,    /* 3.10: tstate->frame, PyFrameObject chain, f_lasti */
    LS_PY_KIND_IFRAME = 2,      /* 3.11+: _PyInterpreterFrame chain, instruction pointer */
};

enum {
    LS_PY_LONG_SIZE = 0,        /* ob_size at 16 = number of 30-bit digits, sign in its sign (3.10/3.11) */
    LS_PY_LONG_TAG = 1,         /* lv_tag at 16: ndigits << 3 | sign (3.12+) */
};

/* One Python frame: its code object and the offset of the instruction it
 * is at, in bytes from the start of co_code_adaptive (3.11+) or co_code
 * (3.10: f_lasti * 2); -1 if it has not started. */
struct ls_py_frame {
    __u64 code;
    __s32 instr;
    __u32 flags;                /* LS_PYF_* */
};

enum {
    /* The first frame of a C-level _PyEval_EvalFrameDefault call, seen from
     * the innermost frame: 3.10 every frame; 3.11 is_entry; 3.12+ the frame
     * whose previous is a C-stack shim frame.  The native stack's k-th
     * _PyEval_EvalFrameDefault (innermost first) runs the Python frames
     * after the (k-1)-th ENTRY frame up to and including the k-th. */
    LS_PYF_ENTRY = 1,
    LS_PYF_HANDLE_RUN = 2,      /* asyncio's Handle._run (co_name "_run" in ".../asyncio/events.py") */
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
    /* how task_name is encoded (none of these: ASCII bytes) */
    LS_PYS_NAME_LATIN1 = 8,     /* one byte per character, Latin-1 */
    LS_PYS_NAME_UCS2 = 16,      /* two bytes per character, little endian */
    LS_PYS_NAME_UCS4 = 32,      /* four bytes per character, little endian */
    LS_PYS_NAME_COUNTER = 64,   /* a __u64 counter N (little endian): the name is "Task-N" */
    LS_PYS_NAME_CUT = 128,      /* the name was longer than task_name */
};

#ifndef __bpf__
#include <stddef.h>
#include <sys/types.h>

/* User space (pystack.c, pystack_detect.c). */
typedef struct ls_py ls_py;

/* Detects a supported CPython in process pid and fills *cfg (for the BPF
 * object, before it is loaded).  NULL when it is not one; *why then says
 * why in a few words ("not CPython", "CPython 3.9: unsupported", ...).
 * desc (may be NULL) gets e.g. "CPython 3.11.2". */
ls_py *ls_py_detect(pid_t pid, struct ls_py_cfg *cfg, char *desc, size_t desc_len,
                    const char **why);

/* Function (co_qualname, else co_name), file (co_filename) and line of a
 * captured frame, read from the target now.  The strings are valid UTF-8,
 * NUL-terminated, at most 4095 bytes, and valid until the next call on py;
 * "?" and line 0 when the code object is gone or is not one.  Returns 0 when
 * resolved, -1 when not. */
int ls_py_frame(ls_py *py, const struct ls_py_frame *f, const char **function,
                const char **file, int *line);

/* The task name as it should be shown: valid UTF-8 ("Task-N" for a lazy
 * counter), NULL when the stack has no task.  Valid until the next call. */
const char *ls_py_task_name(ls_py *py, const struct ls_pystack *s);

/* The same walk as ls_py_capture in BPF, run from user space through
 * process_vm_readv on thread tid of the detected process (for tests and
 * for a thread that is stopped).  Returns 0, or -1 (out->flags says why). */
int ls_py_capture_user(ls_py *py, __u32 tid, struct ls_pystack *out);

void ls_py_free(ls_py *py);

/* Tests only (pystack_walk --cfg-at): replaces the cfg the walk uses. */
int ls_py_set_cfg_for_test(ls_py *py, const struct ls_py_cfg *cfg);
#endif

#endif /* LOOPSCOPE_PYSTACK_H */
