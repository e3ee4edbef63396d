/*
 * error.c -- the error line and the UTF-8 decoder (error.h).  Depends on
 * the C library only.
 */
#include "error.h"

#include <stdarg.h>
#include <stdio.h>

int ls_utf8_decode(const char *s, uint32_t *cp)
{
    const unsigned char *p = (const unsigned char *)s;
    unsigned c = p[0];
    if (c < 0x80) {
        *cp = c;
        return c ? 1 : 0;
    }
    int n;
    uint32_t v, min;
    if (c >= 0xc2 && c <= 0xdf)
        n = 2, v = c & 0x1f, min = 0x80;
    else if (c >= 0xe0 && c <= 0xef)
        n = 3, v = c & 0x0f, min = 0x800;
    else if (c >= 0xf0 && c <= 0xf4)
        n = 4, v = c & 0x07, min = 0x10000;
    else
        return 0;                         /* continuation byte, 0xc0/0xc1, 0xf5.. */
    for (int i = 1; i < n; i++) {
        if ((p[i] & 0xc0) != 0x80)        /* also stops at the NUL */
            return 0;
        v = v << 6 | (p[i] & 0x3f);
    }
    if (v < min || v > 0x10ffff || (v >= 0xd800 && v <= 0xdfff))
        return 0;
    *cp = v;
    return n;
}

int ls_error(const char *fmt, ...)
{
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    /* One line whatever the message quotes (SQLite repeats bytes of a
     * damaged schema, names come from the trace), written whole by one
     * fputs. */
    char out[sizeof(buf) * 4 + sizeof("error: \n")] = "error: ";
    size_t len = sizeof("error: ") - 1;
    for (const char *p = buf; *p;) {
        uint32_t cp;
        int n = ls_utf8_decode(p, &cp);
        if (n == 0)                       /* not UTF-8: the byte */
            len += (size_t)sprintf(out + len, "\\x%02x", (unsigned char)*p), n = 1;
        else if (cp < 0x20 || cp == 0x7f)
            out[len++] = '?';
        else if (cp >= 0x80 && cp < 0xa0)
            len += (size_t)sprintf(out + len, "\\x%02x", (unsigned)cp);
        else if ((cp >= 0x202a && cp <= 0x202e) || (cp >= 0x2066 && cp <= 0x2069))
            len += (size_t)sprintf(out + len, "\\u%04x", (unsigned)cp);   /* reorders the line */
        else
            for (int i = 0; i < n; i++)
                out[len++] = p[i];
        p += n;
    }
    out[len++] = '\n';
    out[len] = 0;
    fputs(out, stderr);
    return 1;
}
