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
 * The libuv way: one uv_tcp_t per connection, reads into a per-connection
 * buffer (libuv reads until a short read), each complete request head
 * answered with uv_try_write, uv_write for what did not fit.  Requests
 * pipelined in one read are answered in order.
 */
#define _GNU_SOURCE
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <uv.h>

#define BUF 8192

typedef struct conn {
    uv_tcp_t tcp;
    size_t have;
    bool closing;
    char buf[BUF];
} conn;

typedef struct wreq {
    uv_write_t req;
    char data[];
} wreq;

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

static void on_written(uv_write_t *req, int status)
{
    (void)status;                     /* an error shows up as a read error too */
    free(req);
}

/* Send all of out: uv_try_write, then uv_write (a copy) for the rest. */
static int send_all(conn *c, const char *out, size_t len)
{
    uv_buf_t b = uv_buf_init((char *)out, (unsigned)len);
    int n = uv_try_write((uv_stream_t *)&c->tcp, &b, 1);
    if (n == UV_EAGAIN)
        n = 0;
    if (n < 0)
        return n;
    if ((size_t)n == len)
        return 0;
    wreq *w = malloc(sizeof(*w) + len - (size_t)n);
    if (!w)
        return UV_ENOMEM;
    memcpy(w->data, out + n, len - (size_t)n);
    b = uv_buf_init(w->data, (unsigned)(len - (size_t)n));
    int rc = uv_write(&w->req, (uv_stream_t *)&c->tcp, &b, 1, on_written);
    if (rc < 0)
        free(w);
    return rc;
}

static const char *route(const char *path, int *status)
{
    *status = 200;
    if (!strcmp(path, "/"))
        return "hello from libevl\n";
    *status = 404;
    return "not found\n";
}

static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
    (void)buf;
    conn *c = s->data;
    if (nread < 0) {
        conn_close(c);
        return;
    }
    c->have += (size_t)nread;
    char *end;
    while (!c->closing && (end = memmem(c->buf, c->have, "\r\n\r\n", 4))) {
        size_t reqlen = (size_t)(end - c->buf) + 4;
        char method[8] = "", path[256] = "";
        char save = c->buf[reqlen - 1];
        c->buf[reqlen - 1] = '\0';    /* sscanf stops at the head's end */
        sscanf(c->buf, "%7s %255s", method, path);
        c->buf[reqlen - 1] = save;
        bool close_after = memmem(c->buf, reqlen, "Connection: close", 17) != NULL ||
                           memmem(c->buf, reqlen, "HTTP/1.0", 8) != NULL;
        int status;
        const char *body = route(path, &status);
        char out[512];
        int len = snprintf(out, sizeof(out),
                           "HTTP/1.1 %d %s\r\nContent-Type: text/plain\r\nContent-Length: %zu\r\n"
                           "%s\r\n%s",
                           status, status == 200 ? "OK" : "Not Found", strlen(body),
                           close_after ? "Connection: close\r\n" : "", body);
        if (send_all(c, out, (size_t)len) < 0 || close_after) {
            conn_close(c);
            return;
        }
        memmove(c->buf, c->buf + reqlen, c->have - reqlen);
        c->have -= reqlen;
    }
    if (c->have == BUF)
        conn_close(c);                /* headers too large */
}

static void on_connection(uv_stream_t *server, int status)
{
    if (status < 0)
        return;
    conn *c = malloc(sizeof(*c));
    if (!c)
        return;
    c->have = 0;
    c->closing = false;
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
