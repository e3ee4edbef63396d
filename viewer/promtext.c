/*
 * promtext.c -- Prometheus's text exposition format, read as untrusted
 * input (promtext.h).  One pass over the bytes, one line at a time; a
 * line is delivered whole or not at all.
 */
#include "promtext.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static bool name_start(unsigned char c, bool colon)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || (colon && c == ':');
}

static bool name_char(unsigned char c, bool colon)
{
    return name_start(c, colon) || (c >= '0' && c <= '9');
}

static const char *blanks(const char *p, const char *e)
{
    while (p < e && (*p == ' ' || *p == '\t'))
        p++;
    return p;
}

/* A name at *pp into out (at most PROM_NAME_MAX bytes): false if none or
 * too long. */
static bool read_name(const char **pp, const char *e, char *out, bool colon)
{
    const char *p = *pp;
    size_t n = 0;
    if (p >= e || !name_start((unsigned char)*p, colon))
        return false;
    while (p < e && name_char((unsigned char)*p, colon)) {
        if (n == PROM_NAME_MAX)
            return false;
        out[n++] = *p++;
    }
    out[n] = 0;
    *pp = p;
    return true;
}

/* A quoted label value at *pp (after the opening quote): unescaped into
 * l->value; false for an unknown escape, a NUL, no closing quote on the
 * line, or more than PROM_VALUE_MAX bytes. */
static bool read_value(const char **pp, const char *e, prom_label *l)
{
    const char *p = *pp;
    size_t n = 0;
    for (;;) {
        if (p >= e)
            return false;
        char c = *p++;
        if (c == '"')
            break;
        if (c == 0)
            return false;
        if (c == '\\') {
            if (p >= e)
                return false;
            char x = *p++;
            if (x == 'n')
                c = '\n';
            else if (x == '\\' || x == '"')
                c = x;
            else
                return false;
        }
        if (n == PROM_VALUE_MAX)
            return false;
        l->value[n++] = c;
    }
    l->value[n] = 0;
    l->len = n;
    *pp = p;
    return true;
}

/* A number token [p, q): Prometheus's forms only (no hex, no "nan(...)"). */
static bool read_number(const char *p, const char *q, double *v)
{
    char tok[64];
    size_t n = (size_t)(q - p);
    if (!n || n >= sizeof tok)
        return false;
    memcpy(tok, p, n);
    tok[n] = 0;
    if (!strcmp(tok, "+Inf") || !strcmp(tok, "Inf")) {
        *v = INFINITY;
        return true;
    }
    if (!strcmp(tok, "-Inf")) {
        *v = -INFINITY;
        return true;
    }
    if (!strcmp(tok, "NaN")) {
        *v = NAN;
        return true;
    }
    for (size_t i = 0; i < n; i++)
        if (!strchr("0123456789.eE+-", tok[i]))
            return false;
    char *end;
    *v = strtod(tok, &end);
    return end == tok + n;
}

static bool read_int(const char *p, const char *q)
{
    if (p < q && *p == '-')
        p++;
    if (p == q || q - p > 20)
        return false;
    for (; p < q; p++)
        if (*p < '0' || *p > '9')
            return false;
    return true;
}

/* One sample line [p, e) into s. */
static bool parse_line(const char *p, const char *e, prom_sample *s)
{
    s->nlabels = 0;
    if (!read_name(&p, e, s->name, true))
        return false;
    const char *b = blanks(p, e);
    if (b < e && *b == '{') {
        p = blanks(b + 1, e);
        while (p < e && *p != '}') {
            if (s->nlabels == PROM_LABELS_MAX)
                return false;
            prom_label *l = &s->label[s->nlabels];
            if (!read_name(&p, e, l->name, false))
                return false;
            p = blanks(p, e);
            if (p >= e || *p != '=')
                return false;
            p = blanks(p + 1, e);
            if (p >= e || *p != '"')
                return false;
            p++;
            if (!read_value(&p, e, l))
                return false;
            for (int i = 0; i < s->nlabels; i++)
                if (!strcmp(s->label[i].name, l->name))
                    return false;            /* a label twice */
            s->nlabels++;
            p = blanks(p, e);
            if (p < e && *p == ',')
                p = blanks(p + 1, e);
            else if (p < e && *p != '}')
                return false;
        }
        if (p >= e)
            return false;
        p++;                                  /* the '}' */
    }
    const char *q = blanks(p, e);
    if (q == p || q >= e)                     /* a blank, then the value */
        return false;
    p = q;
    while (q < e && *q != ' ' && *q != '\t')
        q++;
    if (!read_number(p, q, &s->value))
        return false;
    p = blanks(q, e);
    if (p < e) {                              /* a timestamp (ms), ignored */
        q = p;
        while (q < e && *q != ' ' && *q != '\t')
            q++;
        if (!read_int(p, q) || blanks(q, e) != e)
            return false;
    }
    return true;
}

size_t prom_parse(const char *buf, size_t len, size_t max_samples,
                  int (*fn)(const prom_sample *s, void *ctx), void *ctx, prom_stats *st)
{
    prom_stats local;
    if (!st)
        st = &local;
    memset(st, 0, sizeof *st);
    static __thread prom_sample s;            /* 17 KiB: not on the stack */
    const char *p = buf, *end = buf + len;
    bool stop = false;
    while (p < end && !stop) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        const char *e = nl ? nl : end;
        const char *next = nl ? nl + 1 : end;
        st->lines++;
        if (e > p && e[-1] == '\r')
            e--;
        const char *b = blanks(p, e);
        if (b == e || *b == '#') {
            p = next;
            continue;
        }
        if (st->samples >= max_samples) {
            st->cut++;
        } else if (memchr(b, 0, (size_t)(e - b)) || !parse_line(b, e, &s)) {
            st->bad++;
        } else {
            st->samples++;
            if (fn && fn(&s, ctx))
                stop = true;
        }
        p = next;
    }
    return st->samples;
}

const char *prom_label_value(const prom_sample *s, const char *name)
{
    for (int i = 0; i < s->nlabels && i < PROM_LABELS_MAX; i++)
        if (!strcmp(s->label[i].name, name))
            return s->label[i].value;
    return NULL;
}

double prom_bucket_quantile(const double *le, const double *cum, int n, double total, double q,
                            double *above)
{
    if (above)
        *above = -1;
    if (n <= 0 || !(q >= 0 && q <= 1))
        return -1;
    if (isinf(le[n - 1]) && le[n - 1] > 0)
        total = cum[n - 1];
    if (!(total > 0) || !isfinite(total))
        return -1;
    double rank = q * total;
    for (int i = 0; i < n; i++) {
        if (cum[i] >= rank && cum[i] > 0) {
            if (isinf(le[i])) {
                if (above)
                    for (int k = i - 1; k >= 0; k--)
                        if (isfinite(le[k])) {
                            *above = le[k];
                            break;
                        }
                return INFINITY;
            }
            return le[i];
        }
    }
    /* the buckets never reach the rank (counts not cumulative, or a total
     * above them): past the last bound */
    if (above && isfinite(le[n - 1]))
        *above = le[n - 1];
    return INFINITY;
}
