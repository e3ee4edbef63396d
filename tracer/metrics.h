/*
 * metrics.h -- the recorder's Prometheus endpoint (metrics.c): a sink that
 * keeps running totals, served over HTTP by the recorder's own thread
 * (record --metrics [HOST:]PORT).  Depends on recorder.h.
 */
#ifndef LOOPSCOPE_METRICS_H
#define LOOPSCOPE_METRICS_H

#include <poll.h>
#include <stdint.h>

struct recorder;
struct ls_metrics;

/* Checks spec ([HOST:]PORT) into host and port; non-zero after an error line. */
int ls_metrics_parse(const char *spec, char host[256], char port[16]);

/* Listens on spec ([HOST:]PORT, HOST 127.0.0.1 by default, PORT 0: any)
 * and adds the sink; 0, or an error said in one line. */
int ls_metrics_start(struct recorder *r, const char *spec);

/* Says where it listens (after the recording's first line). */
void ls_metrics_announce(struct recorder *r);

/* The descriptors to poll (at most 9: the listener and the clients) into
 * p[0..max); how many. */
int ls_metrics_pollfds(struct recorder *r, struct pollfd *p, int max);

/* Accepts, reads, answers and closes what is ready (never blocks). */
void ls_metrics_io(struct recorder *r, int64_t now);

#endif
