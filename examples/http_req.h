/*
 * http_req.h -- the HTTP/1.1 request handling of examples/http_server.c,
 * shared with its libuv peer tests/bench/http_uv.c (tests/bench/http_peers.py
 * compares the two loops doing the same work; with the application's part
 * the same code, what differs is the loop's).
 *
 * Only what these servers need, in a few memchr/memcmp calls (a profile of
 * the server put sscanf, snprintf and memmem at 70 % of its user-space
 * instructions per request):
 *
 *   http_head_end   where a request head ends ("\r\n\r\n"), searching from
 *                   where the last search stopped
 *   http_parse      the path (the request line's second word, at most
 *                   HTTP_PATH_MAX bytes) and whether the answer closes the
 *                   connection ("Connection: close" or "HTTP/1.0" anywhere
 *                   in the head, case as written)
 *   http_answer     the response: status line, Content-Type: text/plain,
 *                   Content-Length, "Connection: close" when asked, body
 */
#ifndef HTTP_REQ_H
#define HTTP_REQ_H

#include <stdbool.h>
#include <stddef.h>
#include <string.h>

#define HTTP_PATH_MAX 255
/* An answer's size at most: the fixed parts and a body of at most this. */
#define HTTP_BODY_MAX 256
#define HTTP_ANSWER_MAX (160 + HTTP_BODY_MAX)

/* The end of the first request head in buf[0, len): the length of the head
 * with its blank line, or 0 if it is not complete.  *scanned (0 at first)
 * keeps how far an incomplete head was searched, so a head arriving in
 * pieces is not searched again from its start. */
static inline size_t http_head_end(const char *buf, size_t len, size_t *scanned)
{
    size_t i = *scanned > 3 ? *scanned - 3 : 0;
    while (i < len) {
        const char *nl = memchr(buf + i, '\n', len - i);
        if (!nl)
            break;
        size_t at = (size_t)(nl - buf);
        if (at >= 3 && nl[-1] == '\r' && nl[-2] == '\n' && nl[-3] == '\r') {
            *scanned = 0;
            return at + 1;
        }
        i = at + 1;
    }
    *scanned = len;
    return 0;
}

/* Does needle[0, m) occur in h[0, n)? */
static inline bool http_contains(const char *h, size_t n, const char *needle, size_t m)
{
    const char *p = h, *end = h + n;
    while ((size_t)(end - p) >= m && (p = memchr(p, needle[0], (size_t)(end - p) - m + 1))) {
        if (!memcmp(p + 1, needle + 1, m - 1))
            return true;
        p++;
    }
    return false;
}

static inline bool http_space(char c)
{
    return c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == '\v' || c == '\f';
}

/* The head head[0, len) (as http_head_end delimits it): its path, copied
 * into path (HTTP_PATH_MAX + 1 bytes, NUL-terminated, cut at HTTP_PATH_MAX;
 * empty if the request line has no second word), and whether the answer
 * closes the connection. */
static inline void http_parse(const char *head, size_t len, char *path, bool *close_after)
{
    size_t i = 0, n = 0;
    while (i < len && http_space(head[i]))
        i++;
    while (i < len && !http_space(head[i]))
        i++;                          /* the method */
    while (i < len && http_space(head[i]))
        i++;
    while (i < len && !http_space(head[i]) && n < HTTP_PATH_MAX)
        path[n++] = head[i++];
    path[n] = '\0';
    *close_after = http_contains(head, len, "Connection: close", 17) ||
                   http_contains(head, len, "HTTP/1.0", 8);
}

/* Write the answer into out (HTTP_ANSWER_MAX bytes at least); returns its
 * length.  status is 200 or 404; body at most HTTP_BODY_MAX bytes. */
static inline size_t http_answer(char *out, int status, const char *body, bool close_after)
{
    static const char ok[] = "HTTP/1.1 200 OK\r\n";
    static const char nf[] = "HTTP/1.1 404 Not Found\r\n";
    static const char ct[] = "Content-Type: text/plain\r\nContent-Length: ";
    static const char cl[] = "\r\nConnection: close";
    char *p = out;
    if (status == 200) {
        memcpy(p, ok, sizeof(ok) - 1);
        p += sizeof(ok) - 1;
    } else {
        memcpy(p, nf, sizeof(nf) - 1);
        p += sizeof(nf) - 1;
    }
    memcpy(p, ct, sizeof(ct) - 1);
    p += sizeof(ct) - 1;
    size_t blen = strlen(body);
    char digits[20];
    int nd = 0;
    do
        digits[nd++] = (char)('0' + blen % 10);
    while ((blen /= 10));
    while (nd)
        *p++ = digits[--nd];
    if (close_after) {
        memcpy(p, cl, sizeof(cl) - 1);
        p += sizeof(cl) - 1;
    }
    memcpy(p, "\r\n\r\n", 4);
    p += 4;
    blen = strlen(body);
    memcpy(p, body, blen);
    return (size_t)(p + blen - out);
}

#endif
