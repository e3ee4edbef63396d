/* test-promtext.c -- viewer/promtext.c (the Prometheus text format reader
 * of `loopscope top --agent`) on well-formed and hostile input: escapes,
 * bounds, broken lines, NUL bytes, huge counts; and the bucket quantile.
 * Pure C: built into evl_unit with viewer/promtext.c (CMakeLists.txt), so
 * it also runs under ASan+UBSan. */
#define _GNU_SOURCE
#include "task.h"

#include "../../viewer/promtext.h"

#include <math.h>
#include <stdlib.h>

#define NKEEP 64

typedef struct got {
    size_t n;
    prom_sample s[NKEEP];
    int stop_after;                 /* 0: never */
} got;

static int keep(const prom_sample *s, void *ctx)
{
    got *g = ctx;
    if (g->n < NKEEP)
        g->s[g->n] = *s;
    g->n++;
    return g->stop_after && (int)g->n >= g->stop_after;
}

static got *parse(const char *text, size_t len, size_t max, prom_stats *st)
{
    static got g;
    memset(&g, 0, sizeof g);
    prom_parse(text, len, max, keep, &g, st);
    return &g;
}

#define PARSE(lit, st) parse(lit, sizeof(lit) - 1, 1000, st)

TEST_IMPL(promtext_basic)
{
    prom_stats st;
    got *g = PARSE("# HELP loopscope_x A thing.\n"
                   "# TYPE loopscope_x counter\n"
                   "\n"
                   "loopscope_x{pid=\"12\",loop=\"12\",kind=\"off-cpu\"} 3\n"
                   "loopscope_recorder_cpu_seconds_total 0.541520\n"
                   "loopscope_h_bucket{le=\"+Inf\"} 7 1700000000000\n"
                   "  spaced { a = \"1\" , b=\"2\", } \t -1.5e3\r\n"
                   "nan_and_inf{} NaN\n"
                   "ninf -Inf\n"
                   "last_no_newline 42", &st);
    ASSERT_EQ(g->n, 7);
    ASSERT_EQ(st.samples, 7);
    ASSERT_EQ(st.bad, 0);
    ASSERT_EQ(st.lines, 10);
    ASSERT_STR_EQ(g->s[0].name, "loopscope_x");
    ASSERT_EQ(g->s[0].nlabels, 3);
    ASSERT_STR_EQ(prom_label_value(&g->s[0], "pid"), "12");
    ASSERT_STR_EQ(prom_label_value(&g->s[0], "kind"), "off-cpu");
    ASSERT_NULL(prom_label_value(&g->s[0], "le"));
    ASSERT_TRUE(g->s[0].value == 3);
    ASSERT_EQ(g->s[1].nlabels, 0);
    ASSERT_TRUE(g->s[1].value == 0.541520);
    ASSERT_TRUE(isinf(g->s[2].value) == 0 && g->s[2].value == 7);
    ASSERT_STR_EQ(prom_label_value(&g->s[2], "le"), "+Inf");
    ASSERT_STR_EQ(g->s[3].name, "spaced");
    ASSERT_EQ(g->s[3].nlabels, 2);
    ASSERT_STR_EQ(prom_label_value(&g->s[3], "b"), "2");
    ASSERT_TRUE(g->s[3].value == -1500);
    ASSERT_TRUE(isnan(g->s[4].value));
    ASSERT_TRUE(isinf(g->s[5].value) && g->s[5].value < 0);
    ASSERT_TRUE(g->s[6].value == 42);
    return 0;
}

TEST_IMPL(promtext_escapes)
{
    prom_stats st;
    /* what tracer/metrics.c's put_label writes for a comm 'a"b\c<LF>d<ESC>e':
     * quote, backslash and newline escaped, the control byte as \\x1b */
    got *g = PARSE("t{comm=\"a\\\"b\\\\c\\nd\\\\x1be\",site=\"\"} 1\n"
                   "t{v=\"\xff\xfe\x01\x7f raw bytes \xe2\x80\xae\"} 2\n", &st);
    ASSERT_EQ(st.bad, 0);
    ASSERT_EQ(g->n, 2);
    ASSERT_STR_EQ(prom_label_value(&g->s[0], "comm"), "a\"b\\c\nd\\x1be");
    ASSERT_EQ(g->s[0].label[0].len, 12);
    ASSERT_STR_EQ(prom_label_value(&g->s[0], "site"), "");
    /* raw bytes pass through (the caller escapes them for the terminal) */
    ASSERT_STR_EQ(prom_label_value(&g->s[1], "v"), "\xff\xfe\x01\x7f raw bytes \xe2\x80\xae");
    /* unknown escapes, an escape at the end, an unterminated value: the
     * line is skipped whole */
    g = PARSE("t{a=\"\\x41\"} 1\n"
              "t{a=\"\\t\"} 1\n"
              "t{a=\"abc\\\n"
              "t{a=\"abc} 1\n"
              "t{a=\"ok\"} 5\n", &st);
    ASSERT_EQ(st.bad, 4);
    ASSERT_EQ(g->n, 1);
    ASSERT_TRUE(g->s[0].value == 5);
    return 0;
}

TEST_IMPL(promtext_hostile)
{
    prom_stats st;
    static const char *const bad[] = {
        "{a=\"1\"} 1",                 /* no name */
        "9name 1",                     /* a name starting with a digit */
        "name",                        /* no value */
        "name ",                       /* no value */
        "name{} ",                     /* no value */
        "name{a=\"1\"}1",              /* no blank before the value */
        "name 1 2 3",                  /* two timestamps */
        "name 1 1.5",                  /* a timestamp not an integer */
        "name 0x10",                   /* hex */
        "name nan(123)",               /* strtod's other forms */
        "name infinity",
        "name 1e",
        "name --1",
        "name 12345678901234567890123456789012345678901234567890123456789012345678901234567890",
        "name{a=1} 1",                 /* an unquoted value */
        "name{a=\"1\" b=\"2\"} 1",     /* no comma */
        "name{a=\"1\",,b=\"2\"} 1",    /* two commas */
        "name{a=\"1\",a=\"2\"} 1",     /* a label twice */
        "name{1a=\"1\"} 1",            /* a label name starting with a digit */
        "name{a:b=\"1\"} 1",           /* a colon in a label name */
        "name{a=\"1\"",                /* no closing brace */
        "name{a=\"1\"}} 1",
        "name{a=\"1\"} 1 x",
        "na\x01me 1",                  /* a control byte in the name */
        "name\xff 1",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        got *g = parse(bad[i], strlen(bad[i]), 1000, &st);
        if (g->n != 0 || st.bad != 1)
            FAIL("accepted or miscounted: '%s' (samples %zu, bad %zu)", bad[i], g->n, st.bad);
    }
    /* a NUL byte inside a line: skipped; the lines around it read */
    static const char nul[] = "a 1\nb{v=\"x\0y\"} 2\nc\0 3\nd 4\n";
    got *g = parse(nul, sizeof nul - 1, 1000, &st);
    ASSERT_EQ(g->n, 2);
    ASSERT_EQ(st.bad, 2);
    ASSERT_STR_EQ(g->s[1].name, "d");
    /* the callback stops the reading */
    static const char many[] = "a 1\nb 2\nc 3\nd 4\n";
    static got g2;
    memset(&g2, 0, sizeof g2);
    g2.stop_after = 2;
    ASSERT_EQ(prom_parse(many, sizeof many - 1, 1000, keep, &g2, &st), 2);
    ASSERT_EQ(g2.n, 2);
    /* nothing, a lone newline, only comments, NULL callback */
    ASSERT_EQ(prom_parse("", 0, 1000, keep, &g2, &st), 0);
    ASSERT_EQ(prom_parse("\n\n\n", 3, 1000, NULL, NULL, &st), 0);
    ASSERT_EQ(st.lines, 3);
    ASSERT_EQ(prom_parse("# a\n#b {\"\n", 10, 1000, NULL, NULL, NULL), 0);
    ASSERT_EQ(prom_parse(many, sizeof many - 1, 1000, NULL, NULL, &st), 4);
    /* random bytes: no crash, every line accounted for */
    srand(7);
    char *junk = malloc(1 << 20);
    ASSERT_NOT_NULL(junk);
    for (int round = 0; round < 20; round++) {
        for (int i = 0; i < 1 << 20; i++) {
            static const char alpha[] = "ab_:{}=\",\\ \n\t0123456789.e+-#Inf\x01\xff";
            junk[i] = round & 1 ? (char)(rand() & 0xff) : alpha[rand() % (sizeof alpha - 1)];
        }
        prom_parse(junk, 1 << 20, 1000000, NULL, NULL, &st);
        ASSERT_LE(st.samples + st.bad + st.cut, st.lines);
    }
    free(junk);
    return 0;
}

TEST_IMPL(promtext_bounds)
{
    prom_stats st;
    size_t cap = 3 * PROM_VALUE_MAX + 4 * PROM_NAME_MAX + 1024;
    char *buf = malloc(cap);
    ASSERT_NOT_NULL(buf);
    /* a label value of exactly PROM_VALUE_MAX bytes (unescaped: escapes
     * count once) is read; one more byte and the line is skipped */
    for (int extra = 0; extra < 2; extra++) {
        size_t k = (size_t)snprintf(buf, cap, "t{v=\"");
        for (int i = 0; i < PROM_VALUE_MAX + extra; i++) {
            if (i % 2) {
                buf[k++] = '\\';
                buf[k++] = 'n';
            } else {
                buf[k++] = 'x';
            }
        }
        k += (size_t)snprintf(buf + k, cap - k, "\"} 1\n");
        got *g = parse(buf, k, 1000, &st);
        ASSERT_EQ(g->n, extra ? 0 : 1);
        ASSERT_EQ(st.bad, extra ? 1 : 0);
        if (!extra) {
            ASSERT_EQ(g->s[0].label[0].len, PROM_VALUE_MAX);
            ASSERT_EQ(strlen(g->s[0].label[0].value), PROM_VALUE_MAX);
        }
    }
    /* names: PROM_NAME_MAX bytes read, one more skipped */
    for (int extra = 0; extra < 2; extra++) {
        size_t k = 0;
        for (int i = 0; i < PROM_NAME_MAX + extra; i++)
            buf[k++] = 'n';
        k += (size_t)snprintf(buf + k, cap - k, "{");
        for (int i = 0; i < PROM_NAME_MAX + extra; i++)
            buf[k++] = 'l';
        k += (size_t)snprintf(buf + k, cap - k, "=\"v\"} 1\n");
        got *g = parse(buf, k, 1000, &st);
        ASSERT_EQ(g->n, extra ? 0 : 1);
    }
    /* labels: PROM_LABELS_MAX read, one more skipped */
    for (int extra = 0; extra < 2; extra++) {
        size_t k = (size_t)snprintf(buf, cap, "t{");
        for (int i = 0; i < PROM_LABELS_MAX + extra; i++)
            k += (size_t)snprintf(buf + k, cap - k, "l%d=\"%d\",", i, i);
        k += (size_t)snprintf(buf + k, cap - k, "} 1\n");
        got *g = parse(buf, k, 1000, &st);
        ASSERT_EQ(g->n, extra ? 0 : 1);
        if (!extra)
            ASSERT_STR_EQ(prom_label_value(&g->s[0], "l7"), "7");
    }
    free(buf);
    /* max_samples: the rest counted as cut, comments not */
    static const char five[] = "a 1\n# c\nb 2\nc 3\nd 4\ne 5\n";
    got *g = parse(five, sizeof five - 1, 3, &st);
    ASSERT_EQ(g->n, 3);
    ASSERT_EQ(st.cut, 2);
    ASSERT_STR_EQ(g->s[2].name, "c");
    /* a million one-byte-name samples: counted, bounded */
    size_t n = 1000000, len = n * 4;
    char *many = malloc(len);
    ASSERT_NOT_NULL(many);
    for (size_t i = 0; i < n; i++)
        memcpy(many + 4 * i, "x 1\n", 4);
    ASSERT_EQ(prom_parse(many, len, 1000, NULL, NULL, &st), 1000);
    ASSERT_EQ(st.cut, n - 1000);
    free(many);
    return 0;
}

TEST_IMPL(promtext_quantile)
{
    /* the agent's buckets, cumulative increases over an interval */
    double le[] = { 0.001, 0.002, 0.004, INFINITY };
    double cum[] = { 50, 98, 100, 100 };
    double above;
    ASSERT_TRUE(prom_bucket_quantile(le, cum, 4, 0, 0.5, &above) == 0.001);
    ASSERT_TRUE(prom_bucket_quantile(le, cum, 4, 0, 0.99, &above) == 0.004);
    ASSERT_TRUE(prom_bucket_quantile(le, cum, 4, 0, 0.98, &above) == 0.002);
    ASSERT_TRUE(prom_bucket_quantile(le, cum, 4, 0, 0.0, &above) == 0.001);
    /* the rank in the +Inf bucket: above the highest finite bound */
    double cum2[] = { 1, 1, 1, 10 };
    ASSERT_TRUE(isinf(prom_bucket_quantile(le, cum2, 4, 0, 0.5, &above)));
    ASSERT_TRUE(above == 0.004);
    /* nothing counted, bad q, no buckets */
    double zero[] = { 0, 0, 0, 0 };
    ASSERT_TRUE(prom_bucket_quantile(le, zero, 4, 0, 0.5, &above) == -1);
    ASSERT_TRUE(prom_bucket_quantile(le, cum, 4, 0, 1.5, &above) == -1);
    ASSERT_TRUE(prom_bucket_quantile(le, cum, 4, 0, NAN, &above) == -1);
    ASSERT_TRUE(prom_bucket_quantile(le, cum, 0, 10, 0.5, &above) == -1);
    /* no +Inf bucket: the total given; counts short of it: past the last */
    double le3[] = { 0.001, 0.002 };
    double cum3[] = { 5, 10 };
    ASSERT_TRUE(prom_bucket_quantile(le3, cum3, 2, 10, 0.5, &above) == 0.001);
    ASSERT_TRUE(isinf(prom_bucket_quantile(le3, cum3, 2, 40, 0.99, &above)));
    ASSERT_TRUE(above == 0.002);
    /* hostile: counts going down, NaN and infinite totals */
    double cum4[] = { 10, 3, -5, 2 };
    double q = prom_bucket_quantile(le, cum4, 4, 0, 0.5, &above);
    ASSERT_TRUE(q == 0.001 || isinf(q));
    double le5[] = { 0.001 };
    double cum5[] = { NAN };
    ASSERT_TRUE(prom_bucket_quantile(le5, cum5, 1, NAN, 0.5, &above) == -1);
    ASSERT_TRUE(prom_bucket_quantile(le5, cum5, 1, INFINITY, 0.5, &above) == -1);
    ASSERT_TRUE(prom_bucket_quantile(le5, cum5, 1, 3, 0.5, NULL) > 0);
    return 0;
}
