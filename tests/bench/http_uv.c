/*
 * http_uv.c -- examples/http_server's keep-alive HTTP/1.1 serving, written
 * on libuv: the peer of http_peers.py (the end-to-end benchmark).
 *
 *   http_uv [--port P] [--seconds S]
 *
 * Same output as examples/http_server: "pid N" and "port P" (--port 0 picks
 * a free port) on stdout, then it serves 127.0.0.1:P until S seconds passed
 * (0, the default: forever) or SIGINT/SIGTERM.  Same bytes on the wire for
 * the route the benchmark uses: GET / answers
 *
 *   HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 18\r\n\r\nhello from libevl\n
 *
 * anything else 404 "not found\n"; "Connection: close" or HTTP/1.0 in a
 * request adds "Connection: close" and closes after the answer.  The
 * server's other routes (/block, /offload, /leak) exist to show bugs and are
 * not part of the benchmark.
 *
 * The libuv way, as fast as libuv allows (issue 36): one uv_tcp_t per
 * connection and its buffers in one allocation (none per request); libuv
 * reads into the connection's buffer until a read comes back short (on a
 * stream socket the same as reading until EAGAIN, without the read that
 * fails); every complete request head in the buffer is answered into the
 * connection's output buffer, and the batch of answers goes out in one
 * uv_try_write once the buffer is parsed (requests pipelined in one read
 * get one write, answered in order).  What the kernel does not take at
 * once goes out with uv_write from that same buffer while reading is
 * stopped (no copy, no allocation), and parsing resumes when it is done.
 * The request parsing and the answer's bytes are examples/http_req.h's,
 * the libevl server's own code.
 */
#define _GNU_SOURCE
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <uv.h>

#include "../../examples/http_req.h"

#define BUF 8192
#define OUT (16 * 1024)

typedef struct conn {
    uv_tcp_t tcp;
    uv_write_t wreq;
    size_t have;                      /* bytes in buf */
    size_t scanned;                   /* http_head_end's progress in buf */
    size_t olen;                      /* answers in out, not yet written */
    bool writing;                     /* wreq holds out: reading stopped */
    bool closing;
    bool close_after;                 /* answered "Connection: close" */
    bool eof;                         /* the client sent everything */
    char buf[BUF];
    char out[OUT];
} conn;

static uv_loop_t *loop;
static long served;

static void die_uv(const char *what, int rc)
{
    fprintf(stderr, "http_uv: %s: %s\n", what, uv_strerror(rc));
    exit(1);
}

static void on_close(uv_handle_t *h)
{
    free(h->data);
}

static void conn_close(conn *c)
{
    if (c->closing)
        return;
    c->closing = true;
    uv_close((uv_handle_t *)&c->tcp, on_close);
}

static void on_alloc(uv_handle_t *h, size_t hint, uv_buf_t *buf)
{
    (void)hint;
    conn *c = h->data;
    *buf = uv_buf_init(c->buf + c->have, (unsigned)(BUF - c->have));
}

static void serve(conn *c);
static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf);

static void on_written(uv_write_t *req, int status)
{
    conn *c = req->data;
    c->writing = false;
    c->olen = 0;
    if (status < 0 || c->closing) {
        conn_close(c);
        return;
    }
    serve(c);                         /* what was left parsed, or the close */
    if (!c->closing && !c->writing && !c->eof)
        uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read);
}

/* Write the answers in out: uv_try_write, then uv_write for the rest (from
 * out itself; reading stops until it is written).  Returns false if out is
 * still in use (or the connection failed). */
static bool flush(conn *c)
{
    uv_buf_t b = uv_buf_init(c->out, (unsigned)c->olen);
    int n = uv_try_write((uv_stream_t *)&c->tcp, &b, 1);
    if (n == UV_EAGAIN)
        n = 0;
    if (n < 0) {
        conn_close(c);
        return false;
    }
    if ((size_t)n == c->olen) {
        c->olen = 0;
        return true;
    }
    b = uv_buf_init(c->out + n, (unsigned)(c->olen - (size_t)n));
    c->wreq.data = c;
    if (uv_write(&c->wreq, (uv_stream_t *)&c->tcp, &b, 1, on_written) < 0) {
        conn_close(c);
        return false;
    }
    c->writing = true;
    uv_read_stop((uv_stream_t *)&c->tcp);
    return false;
}

static const char *route(const char *path, int *status)
{
    *status = 200;
    if (!strcmp(path, "/"))
        return "hello from libevl\n";
    *status = 404;
    return "not found\n";
}

/* Answer every complete request head in buf (in order, into out), then
 * write the batch; close when a "Connection: close" answer, or the last
 * answer after the client's end, is written. */
static void serve(conn *c)
{
    size_t off = 0;
    while (!c->closing && !c->writing && !c->close_after) {
        size_t hl = http_head_end(c->buf + off, c->have - off, &c->scanned);
        if (!hl)
            break;
        if (c->olen + HTTP_ANSWER_MAX > OUT && !flush(c))
            break;                    /* on_written calls serve again */
        char path[HTTP_PATH_MAX + 1];
        bool close_after;
        http_parse(c->buf + off, hl, path, &close_after);
        int status;
        const char *body = route(path, &status);
        c->olen += http_answer(c->out + c->olen, status, body, close_after);
        c->close_after = close_after;
        off += hl;
    }
    if (off) {
        memmove(c->buf, c->buf + off, c->have - off);
        c->have -= off;
    }
    if (c->closing || c->writing)
        return;
    if (c->olen && !flush(c))
        return;
    if (c->close_after || c->eof || c->have == BUF)
        conn_close(c);                /* (a full buffer: headers too large) */
}

static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
    (void)buf;
    conn *c = s->data;
    if (nread < 0) {
        uv_read_stop(s);
        c->eof = true;                /* answer what came, then close */
        serve(c);
        return;
    }
    c->have += (size_t)nread;
    serve(c);
}

static void on_connection(uv_stream_t *server, int status)
{
    if (status < 0)
        return;
    conn *c = malloc(sizeof(*c));
    if (!c)
        return;
    c->have = c->scanned = c->olen = 0;
    c->writing = c->closing = c->close_after = c->eof = false;
    uv_tcp_init(loop, &c->tcp);
    c->tcp.data = c;
    if (uv_accept(server, (uv_stream_t *)&c->tcp) < 0) {
        conn_close(c);
        return;
    }
    served++;
    uv_tcp_nodelay(&c->tcp, 1);
    uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read);
}

static void on_signal(uv_signal_t *h, int sig)
{
    (void)sig;
    uv_stop(h->loop);
}

static void on_timeout(uv_timer_t *t)
{
    uv_stop(t->loop);
}

static void close_any(uv_handle_t *h, void *arg)
{
    (void)arg;
    if (!uv_is_closing(h))
        uv_close(h, h->data ? on_close : NULL);
}

int main(int argc, char **argv)
{
    int port = 8080;
    double seconds = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--port") && i + 1 < argc)
            port = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--seconds") && i + 1 < argc)
            seconds = atof(argv[++i]);
        else {
            fprintf(stderr, "usage: http_uv [--port P] [--seconds S]\n");
            return 2;
        }
    }
    loop = uv_default_loop();
    uv_tcp_t server;
    struct sockaddr_in sa;
    uv_ip4_addr("127.0.0.1", port, &sa);
    uv_tcp_init(loop, &server);
    server.data = NULL;
    int rc = uv_tcp_bind(&server, (const struct sockaddr *)&sa, 0);
    if (rc < 0)
        die_uv("bind", rc);
    if ((rc = uv_listen((uv_stream_t *)&server, 1024, on_connection)) < 0)
        die_uv("listen", rc);
    int len = sizeof(sa);
    uv_tcp_getsockname(&server, (struct sockaddr *)&sa, &len);
    printf("pid %d\nport %d\n", (int)getpid(), ntohs(sa.sin_port));
    fflush(stdout);

    uv_signal_t sigint, sigterm;
    uv_signal_init(loop, &sigint);
    uv_signal_init(loop, &sigterm);
    sigint.data = sigterm.data = NULL;
    uv_signal_start(&sigint, on_signal, SIGINT);
    uv_signal_start(&sigterm, on_signal, SIGTERM);
    uv_timer_t timer;
    uv_timer_init(loop, &timer);
    timer.data = NULL;
    if (seconds > 0)
        uv_timer_start(&timer, on_timeout, (uint64_t)(seconds * 1e3), 0);
    uv_run(loop, UV_RUN_DEFAULT);

    uv_walk(loop, close_any, NULL);
    uv_run(loop, UV_RUN_DEFAULT);
    uv_loop_close(loop);
    printf("served %ld connections\n", served);
    return 0;
}
