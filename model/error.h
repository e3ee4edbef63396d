/*
 * error.h -- the one error line of loopscope, for the recorder (tracer/)
 * and the viewer (viewer/) alike, and the UTF-8 decoder it escapes with
 * (also the viewer's escapers', viewer/output.c).  Depends on nothing.
 */
#ifndef LOOPSCOPE_ERROR_H
#define LOOPSCOPE_ERROR_H

#include <stdint.h>

/* Prints "error: ..." on stderr (one line, lowercase, no final period) and
 * returns 1.  The message may quote a trace, a path or SQLite's words:
 * C0 controls and DEL become '?', C1 controls and bytes that are not
 * UTF-8 become \xNN, bidirectional overrides \uNNNN; at most 1023 bytes of
 * the formatted message are kept. */
int ls_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* The UTF-8 character at p: its length (1-4) and code point, or 0 when the
 * bytes there are not valid UTF-8 (stray continuation, overlong form,
 * surrogate, beyond U+10FFFF, cut short; a NUL ends the string). */
int ls_utf8_decode(const char *p, uint32_t *cp);

#endif /* LOOPSCOPE_ERROR_H */
