/*
 * promtext.h -- a reader of Prometheus's text exposition format (0.0.4),
 * for `loopscope top --agent` (cmd_top_agent.c): the answer of an agent's
 * /metrics, read as untrusted input.
 *
 * Each sample line becomes one prom_sample handed to a callback: its
 * metric name, its labels (names and unescaped values: \\ \" \n), its
 * value.  Comment lines (# HELP, # TYPE, any #) and blank lines are
 * skipped; a line that does not follow the grammar, or exceeds a bound
 * (a name or label name longer than PROM_NAME_MAX, more than
 * PROM_LABELS_MAX labels, a value longer than PROM_VALUE_MAX bytes, a NUL
 * byte, an unknown escape), is skipped and counted, never partly
 * delivered.  At most max_samples samples are delivered; the rest is
 * counted as cut.  Pure C library code: no allocation, tested on hostile
 * input in tests/unit/test-promtext.c.
 */
#ifndef LOOPSCOPE_PROMTEXT_H
#define LOOPSCOPE_PROMTEXT_H

#include <stdbool.h>
#include <stddef.h>

#define PROM_NAME_MAX 128     /* bytes of a metric or label name */
#define PROM_LABELS_MAX 8     /* labels of one sample */
#define PROM_VALUE_MAX 2048   /* bytes of a label value, unescaped */

typedef struct prom_label {
    char name[PROM_NAME_MAX + 1];
    char value[PROM_VALUE_MAX + 1];   /* NUL-terminated; any other bytes */
    size_t len;
} prom_label;

typedef struct prom_sample {
    char name[PROM_NAME_MAX + 1];
    int nlabels;
    prom_label label[PROM_LABELS_MAX];
    double value;                     /* +-Inf and NaN as written */
} prom_sample;

typedef struct prom_stats {
    size_t lines;                     /* lines read */
    size_t samples;                   /* delivered */
    size_t bad;                       /* skipped: not the grammar, or over a bound */
    size_t cut;                       /* sample lines past max_samples */
} prom_stats;

/* Read len bytes of buf (need not be NUL-terminated); call fn for each
 * sample until it returns non-zero.  Returns the samples delivered. */
size_t prom_parse(const char *buf, size_t len, size_t max_samples,
                  int (*fn)(const prom_sample *s, void *ctx), void *ctx, prom_stats *st);

/* The value of label `name`, or NULL. */
const char *prom_label_value(const prom_sample *s, const char *name);

/* A quantile of a histogram as histogram_quantile reads it, but without
 * interpolation: the upper bound of the first bucket whose cumulative
 * count reaches q of the total (bucket n-1's count when it is +Inf, else
 * `total`).  le ascending, cum the cumulative counts (e.g. the increase
 * over an interval).  Returns -1 when there is nothing to rank (no
 * buckets, a total <= 0, q outside [0, 1]); +Inf when the rank falls in
 * the +Inf bucket (*above then holds the highest finite bound, or -1). */
double prom_bucket_quantile(const double *le, const double *cum, int n, double total, double q,
                            double *above);

#endif
