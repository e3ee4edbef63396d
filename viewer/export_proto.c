/*
 * export_proto.c -- `loopscope export --format perfetto`: the writer of
 * export.h for Perfetto's protobuf trace format (the messages and field
 * numbers of viewer/perfetto_trace.proto, Perfetto's own; C from protoc-c).
 *
 * The file is one Trace message written as a stream: every TracePacket is
 * packed on its own as field 1 (length-delimited) of Trace into a chunk;
 * each chunk of at least CHUNK bytes is deflated (zlib format, level 1) and
 * written as one TracePacket whose only field is compressed_packets -- what
 * Perfetto's service writes with compression on, and what its trace
 * processor (and so ui.perfetto.dev) inflates back into the packets, in
 * order, before reading them.  The packets are about 21 bytes each and
 * alike, so this makes the file about 4 x smaller (0.08 x the Chrome JSON);
 * memory stays bounded (one chunk) whatever the trace's size.  Needs zlib.
 * One packet sequence
 * (trusted_packet_sequence_id 1): the first packet clears its incremental
 * state, and event names, categories, argument names and the few argument
 * values that repeat (LS_XA_NAME) are interned in it (InternedData, sent
 * with the first packet that uses them; those packets say so with
 * SEQ_NEEDS_INCREMENTAL_STATE).
 *
 * Tracks: a loop is a process track (ProcessDescriptor); its thread, its
 * tasks and its counters are named child tracks under it, in the model's
 * order (child_ordering EXPLICIT, sibling_order_rank).  A slice is a
 * SLICE_BEGIN and a SLICE_END; the END is held back until the next thing
 * on its track starts at or after it, so that, after Perfetto sorts the
 * packets by timestamp (stably), an end at the same instant as the next
 * begin comes first and nested slices close innermost first.  Flows are
 * flow_ids on an instant on the waker's track and terminating_flow_ids on
 * the slice they end at.  Timestamps are ns from the recording start.
 *
 * Strings from the trace are made valid UTF-8 (U+FFFD for bad bytes), as
 * proto string fields must be.
 */
#define _GNU_SOURCE
#include "export.h"
#include "output.h"
#include "perfetto_trace.pb-c.h"

#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#define SEQ_ID 1
#define CHUNK (256 * 1024)    /* packets deflated together, at least (bytes) */
#define ZLEVEL 1              /* fastest: already 4x smaller than the packets */

/* ----------------------------------------------------------- interning */

#define ICACHE 64             /* by the caller's pointer: most names are constants */

typedef struct intern {
    char **key;               /* open addressing; NULL = free */
    uint64_t *iid;
    size_t cap, n;
    const char *cptr[ICACHE];
    uint64_t ciid[ICACHE];
} intern;

static uint64_t str_hash(const char *s)
{
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

static uint64_t intern_lookup(intern *t, const char *s, bool *fresh);

/* The iid of s (1, 2, ...); *fresh when new.  0 when out of memory.
 * With stable, s is a constant (a literal, a name table's entry): its
 * pointer is remembered, as a pointer never names two strings. */
static uint64_t intern_get(intern *t, const char *s, bool *fresh, bool stable)
{
    *fresh = false;
    size_t c = ((uintptr_t)s >> 3) % ICACHE;
    if (stable && t->cptr[c] == s)
        return t->ciid[c];
    uint64_t id = intern_lookup(t, s, fresh);
    if (stable && id) {
        t->cptr[c] = s;
        t->ciid[c] = id;
    }
    return id;
}

static uint64_t intern_lookup(intern *t, const char *s, bool *fresh)
{
    if ((t->n + 1) * 2 > t->cap) {
        size_t cap = t->cap ? t->cap * 2 : 64;
        char **k = calloc(cap, sizeof(*k));
        uint64_t *v = calloc(cap, sizeof(*v));
        if (!k || !v) {
            free(k);
            free(v);
            return 0;
        }
        for (size_t i = 0; i < t->cap; i++) {
            if (!t->key[i])
                continue;
            size_t j = str_hash(t->key[i]) & (cap - 1);
            while (k[j])
                j = (j + 1) & (cap - 1);
            k[j] = t->key[i];
            v[j] = t->iid[i];
        }
        free(t->key);
        free(t->iid);
        t->key = k;
        t->iid = v;
        t->cap = cap;
    }
    size_t j = str_hash(s) & (t->cap - 1);
    for (; t->key[j]; j = (j + 1) & (t->cap - 1))
        if (!strcmp(t->key[j], s))
            return t->iid[j];
    if (!(t->key[j] = strdup(s)))
        return 0;
    t->iid[j] = ++t->n;
    *fresh = true;
    return t->n;
}

static void intern_free(intern *t)
{
    for (size_t i = 0; i < t->cap; i++)
        free(t->key[i]);
    free(t->key);
    free(t->iid);
}

/* ------------------------------------------------------------- writer */

#define MAX_ARGS 16
#define MAX_NEW 24            /* interned entries one packet can add */

typedef struct pwriter {
    ls_xwriter w;
    intern names, cats, keys, values;
    bool started;             /* the first packet is written */
    bool failed;
    uint8_t *chunk, *zbuf;    /* framed packets not yet deflated; deflated */
    size_t nchunk, cap, zcap;
    /* The packet being built: its new interned entries and fixed strings. */
    Perfetto__Protos__InternedData idata;
    Perfetto__Protos__EventName new_names[MAX_NEW], *pnames[MAX_NEW];
    Perfetto__Protos__EventCategory new_cats[MAX_NEW], *pcats[MAX_NEW];
    Perfetto__Protos__DebugAnnotationName new_keys[MAX_NEW], *pkeys[MAX_NEW];
    Perfetto__Protos__InternedString new_vals[MAX_NEW], *pvals[MAX_NEW];
    char *owned[MAX_ARGS + 4];
    int nowned;
} pwriter;

/* s as valid UTF-8: s itself when it is, else a fixed copy freed after
 * the packet. */
static const char *utf8(pwriter *p, const char *s)
{
    if (!s)
        return "";
    const char *q = s;
    uint32_t cp;
    for (; *q; q++) {
        if ((unsigned char)*q < 0x80)
            continue;
        int n = ls_utf8_decode(q, &cp);
        if (!n)
            break;
        q += n - 1;
    }
    if (!*q || p->nowned >= (int)(sizeof(p->owned) / sizeof(p->owned[0])))
        return *q ? "?" : s;
    size_t len = strlen(s);
    char *o = malloc(len * 3 + 1), *d = o;
    if (!o)
        return "?";
    for (q = s; *q;) {
        int n = (unsigned char)*q < 0x80 ? 1 : ls_utf8_decode(q, &cp);
        if (n) {
            memcpy(d, q, (size_t)n);
            d += n;
            q += n;
        } else {
            memcpy(d, "\xEF\xBF\xBD", 3);
            d += 3;
            q++;
        }
    }
    *d = 0;
    p->owned[p->nowned++] = o;
    return o;
}

static void packet_init(pwriter *p, Perfetto__Protos__TracePacket *pk, int64_t ts, bool timed)
{
    perfetto__protos__trace_packet__init(pk);
    perfetto__protos__interned_data__init(&p->idata);
    pk->optional_trusted_packet_sequence_id_case =
        PERFETTO__PROTOS__TRACE_PACKET__OPTIONAL_TRUSTED_PACKET_SEQUENCE_ID_TRUSTED_PACKET_SEQUENCE_ID;
    pk->trusted_packet_sequence_id = SEQ_ID;
    if (timed) {
        int64_t rel = ts - p->w.base;
        pk->has_timestamp = true;
        pk->timestamp = rel > 0 ? (uint64_t)rel : 0;
    }
}

static int varint(uint8_t *b, uint64_t v)
{
    int n = 0;
    do {
        b[n++] = (uint8_t)((v & 0x7f) | (v > 0x7f ? 0x80 : 0));
        v >>= 7;
    } while (v);
    return n;
}

/* Deflate the packets of the chunk (zlib format, as Perfetto's service
 * writes them) into one TracePacket { compressed_packets } written to the
 * file as Trace.packet. */
static void flush_chunk(pwriter *p)
{
    if (!p->nchunk || p->failed)
        return;
    uLongf zn = compressBound((uLong)p->nchunk);
    if (zn > p->zcap) {
        uint8_t *b = realloc(p->zbuf, zn);
        if (!b) {
            p->failed = true;
            return;
        }
        p->zbuf = b;
        p->zcap = zn;
    }
    if (compress2(p->zbuf, &zn, p->chunk, (uLong)p->nchunk, ZLEVEL) != Z_OK) {
        p->failed = true;
        return;
    }
    uint8_t hd[24];
    int h = 0, in;
    uint8_t inner[12];
    inner[0] = 0x92;                      /* TracePacket.compressed_packets: field 50, */
    inner[1] = 0x03;                      /* wire type 2 (varint 402) */
    in = 2 + varint(inner + 2, zn);
    hd[h++] = 0x0A;                       /* Trace.packet: field 1, wire type 2 */
    h += varint(hd + h, (uint64_t)in + zn);
    memcpy(hd + h, inner, (size_t)in);
    h += in;
    fwrite_unlocked(hd, 1, (size_t)h, p->w.f);
    fwrite_unlocked(p->zbuf, 1, zn, p->w.f);
    p->nchunk = 0;
}

/* Pack pk as Trace.packet (field 1, length-delimited) into the chunk. */
static void emit(pwriter *p, Perfetto__Protos__TracePacket *pk, bool interned)
{
    if (!p->started) {
        p->started = true;
        pk->has_sequence_flags = true;
        pk->sequence_flags = PERFETTO__PROTOS__TRACE_PACKET__SEQUENCE_FLAGS__SEQ_INCREMENTAL_STATE_CLEARED;
    }
    if (interned) {
        pk->has_sequence_flags = true;
        pk->sequence_flags |= PERFETTO__PROTOS__TRACE_PACKET__SEQUENCE_FLAGS__SEQ_NEEDS_INCREMENTAL_STATE;
    }
    if (p->idata.n_event_names || p->idata.n_event_categories ||
        p->idata.n_debug_annotation_names || p->idata.n_debug_annotation_string_values)
        pk->interned_data = &p->idata;
    size_t n = perfetto__protos__trace_packet__get_packed_size(pk);
    if (p->nchunk + n + 11 > p->cap) {
        size_t cap = p->nchunk + n + 11 > CHUNK ? (p->nchunk + n + 11) * 2 : CHUNK + CHUNK / 4;
        uint8_t *b = realloc(p->chunk, cap);
        if (!b) {
            p->failed = true;              /* out of memory: the file is incomplete */
            goto out;
        }
        p->chunk = b;
        p->cap = cap;
    }
    p->chunk[p->nchunk++] = 0x0A;         /* Trace.packet: field 1, wire type 2 */
    p->nchunk += (size_t)varint(p->chunk + p->nchunk, n);
    perfetto__protos__trace_packet__pack(pk, p->chunk + p->nchunk);
    p->nchunk += n;
    if (p->nchunk >= CHUNK)
        flush_chunk(p);
out:
    for (int i = 0; i < p->nowned; i++)
        free(p->owned[i]);
    p->nowned = 0;
}

/* Interned ids, adding new entries to the packet being built. */
static uint64_t iid_name(pwriter *p, const char *s, bool tmp)
{
    bool fresh;
    const char *u = utf8(p, s);
    uint64_t id = intern_get(&p->names, u, &fresh, !tmp && u == s);
    if (fresh && p->idata.n_event_names < MAX_NEW) {
        size_t i = p->idata.n_event_names++;
        perfetto__protos__event_name__init(&p->new_names[i]);
        p->new_names[i].has_iid = true;
        p->new_names[i].iid = id;
        p->new_names[i].name = (char *)utf8(p, s);
        p->pnames[i] = &p->new_names[i];
        p->idata.event_names = p->pnames;
    }
    return id;
}

static uint64_t iid_cat(pwriter *p, const char *s)
{
    bool fresh;
    uint64_t id = intern_get(&p->cats, s, &fresh, true);     /* literals */
    if (fresh && p->idata.n_event_categories < MAX_NEW) {
        size_t i = p->idata.n_event_categories++;
        perfetto__protos__event_category__init(&p->new_cats[i]);
        p->new_cats[i].has_iid = true;
        p->new_cats[i].iid = id;
        p->new_cats[i].name = (char *)s;
        p->pcats[i] = &p->new_cats[i];
        p->idata.event_categories = p->pcats;
    }
    return id;
}

static uint64_t iid_key(pwriter *p, const char *s)
{
    bool fresh;
    uint64_t id = intern_get(&p->keys, s, &fresh, true);     /* literals */
    if (fresh && p->idata.n_debug_annotation_names < MAX_NEW) {
        size_t i = p->idata.n_debug_annotation_names++;
        perfetto__protos__debug_annotation_name__init(&p->new_keys[i]);
        p->new_keys[i].has_iid = true;
        p->new_keys[i].iid = id;
        p->new_keys[i].name = (char *)s;
        p->pkeys[i] = &p->new_keys[i];
        p->idata.debug_annotation_names = p->pkeys;
    }
    return id;
}

static uint64_t iid_value(pwriter *p, const char *s)
{
    bool fresh;
    s = utf8(p, s);
    uint64_t id = intern_get(&p->values, s, &fresh, false);
    if (fresh && p->idata.n_debug_annotation_string_values < MAX_NEW) {
        size_t i = p->idata.n_debug_annotation_string_values++;
        perfetto__protos__interned_string__init(&p->new_vals[i]);
        p->new_vals[i].has_iid = true;
        p->new_vals[i].iid = id;
        p->new_vals[i].has_str = true;
        p->new_vals[i].str.data = (uint8_t *)s;
        p->new_vals[i].str.len = strlen(s);
        p->pvals[i] = &p->new_vals[i];
        p->idata.debug_annotation_string_values = p->pvals;
    }
    return id;
}

/* Write the innermost SLICE_END held back on t. */
static void end_top(pwriter *p, ls_xtrack *t)
{
    Perfetto__Protos__TracePacket pk;
    Perfetto__Protos__TrackEvent te;
    packet_init(p, &pk, t->open_end[--t->nopen], true);
    perfetto__protos__track_event__init(&te);
    te.has_type = true;
    te.type = PERFETTO__PROTOS__TRACK_EVENT__TYPE__TYPE_SLICE_END;
    te.has_track_uuid = true;
    te.track_uuid = t->uuid;
    pk.data_case = PERFETTO__PROTOS__TRACE_PACKET__DATA_TRACK_EVENT;
    pk.track_event = &te;
    emit(p, &pk, false);
}

/* The SLICE_ENDs held back on t that are due at ts (<= ts; < ts with
 * strict, so an instant at a slice's last instant stays inside it). */
static void flush_ends(pwriter *p, ls_xtrack *t, int64_t ts, bool strict)
{
    while (t->nopen > 0 && (strict ? t->open_end[t->nopen - 1] < ts
                                   : t->open_end[t->nopen - 1] <= ts))
        end_top(p, t);
}

/* A TrackEvent of type `type` on t with e's name, category and args. */
static void track_event(pwriter *p, ls_xtrack *t, int64_t ts, int type, const ls_xev *e,
                        uint64_t flow_out)
{
    Perfetto__Protos__TracePacket pk;
    Perfetto__Protos__TrackEvent te;
    Perfetto__Protos__DebugAnnotation da[MAX_ARGS], *pda[MAX_ARGS];
    uint64_t cat, flow_in = e->flow_in;
    packet_init(p, &pk, ts, true);
    perfetto__protos__track_event__init(&te);
    te.has_type = true;
    te.type = type;
    te.has_track_uuid = true;
    te.track_uuid = t->uuid;
    te.name_field_case = PERFETTO__PROTOS__TRACK_EVENT__NAME_FIELD_NAME_IID;
    te.name_iid = iid_name(p, e->name, e->name_tmp);
    if (e->cat) {
        cat = iid_cat(p, e->cat);
        te.n_category_iids = 1;
        te.category_iids = &cat;
    }
    int n = e->nargs < MAX_ARGS ? e->nargs : MAX_ARGS;
    for (int i = 0; i < n; i++) {
        const ls_xarg *a = &e->args[i];
        Perfetto__Protos__DebugAnnotation *d = &da[i];
        perfetto__protos__debug_annotation__init(d);
        d->name_field_case = PERFETTO__PROTOS__DEBUG_ANNOTATION__NAME_FIELD_NAME_IID;
        d->name_iid = iid_key(p, a->key);
        switch (a->type) {
        case LS_XA_INT:
            d->value_case = PERFETTO__PROTOS__DEBUG_ANNOTATION__VALUE_INT_VALUE;
            d->int_value = a->i;
            break;
        case LS_XA_STR:
            d->value_case = PERFETTO__PROTOS__DEBUG_ANNOTATION__VALUE_STRING_VALUE;
            d->string_value = (char *)utf8(p, a->s);
            break;
        case LS_XA_NAME:
            d->value_case = PERFETTO__PROTOS__DEBUG_ANNOTATION__VALUE_STRING_VALUE_IID;
            d->string_value_iid = iid_value(p, a->s ? a->s : "");
            break;
        case LS_XA_MS:
            d->value_case = PERFETTO__PROTOS__DEBUG_ANNOTATION__VALUE_DOUBLE_VALUE;
            d->double_value = (double)a->i / 1e6;
            break;
        case LS_XA_HEX:
            d->value_case = PERFETTO__PROTOS__DEBUG_ANNOTATION__VALUE_POINTER_VALUE;
            d->pointer_value = (uint64_t)a->i;
            break;
        case LS_XA_NUM:
            d->value_case = PERFETTO__PROTOS__DEBUG_ANNOTATION__VALUE_DOUBLE_VALUE;
            d->double_value = a->d;
            break;
        }
        pda[i] = d;
    }
    te.n_debug_annotations = (size_t)n;
    te.debug_annotations = pda;
    if (flow_in) {
        te.n_terminating_flow_ids = 1;
        te.terminating_flow_ids = &flow_in;
    }
    if (flow_out) {
        te.n_flow_ids = 1;
        te.flow_ids = &flow_out;
    }
    pk.data_case = PERFETTO__PROTOS__TRACE_PACKET__DATA_TRACK_EVENT;
    pk.track_event = &te;
    emit(p, &pk, true);
}

static void p_begin(ls_xwriter *w, const ls_xmeta *meta, int nmeta)
{
    (void)w;
    (void)meta;
    (void)nmeta;
}

static void p_track(ls_xwriter *w, ls_xtrack *t, const char *name)
{
    pwriter *p = (pwriter *)w;
    Perfetto__Protos__TracePacket pk;
    Perfetto__Protos__TrackDescriptor td;
    Perfetto__Protos__ProcessDescriptor pd;
    Perfetto__Protos__CounterDescriptor cd;
    packet_init(p, &pk, 0, false);
    perfetto__protos__track_descriptor__init(&td);
    td.has_uuid = true;
    td.uuid = t->uuid;
    td.static_or_dynamic_name_case = PERFETTO__PROTOS__TRACK_DESCRIPTOR__STATIC_OR_DYNAMIC_NAME_NAME;
    td.name = (char *)utf8(p, name);
    if (t->kind == LS_XT_LOOP) {
        perfetto__protos__process_descriptor__init(&pd);
        pd.has_pid = true;           /* Perfetto's pids are 32-bit: a loop id may not be */
        pd.pid = t->pid > 0 && t->pid <= INT32_MAX ? (int32_t)t->pid
                                                   : (int32_t)(t->uuid & 0x3fffffff) + 1;
        pd.process_name = td.name;
        td.process = &pd;
        td.has_child_ordering = true;
        td.child_ordering = PERFETTO__PROTOS__TRACK_DESCRIPTOR__CHILD_TRACKS_ORDERING__EXPLICIT;
    } else {
        td.has_parent_uuid = true;
        td.parent_uuid = t->parent;
        td.has_sibling_order_rank = true;
        td.sibling_order_rank = t->sort < INT32_MIN ? INT32_MIN
                                : t->sort > INT32_MAX ? INT32_MAX : (int32_t)t->sort;
    }
    if (t->kind == LS_XT_COUNTER) {
        perfetto__protos__counter_descriptor__init(&cd);
        td.counter = &cd;
    }
    pk.data_case = PERFETTO__PROTOS__TRACE_PACKET__DATA_TRACK_DESCRIPTOR;
    pk.track_descriptor = &td;
    emit(p, &pk, false);
}

static void p_slice(ls_xwriter *w, ls_xtrack *t, int64_t a, int64_t b, const ls_xev *e)
{
    pwriter *p = (pwriter *)w;
    flush_ends(p, t, a, false);
    track_event(p, t, a, PERFETTO__PROTOS__TRACK_EVENT__TYPE__TYPE_SLICE_BEGIN, e, 0);
    if (t->nopen == LS_XT_DEPTH)         /* deeper than the model nests */
        end_top(p, t);
    /* Kept latest first, so the innermost (earliest) end is on top. */
    int i = t->nopen++;
    for (; i > 0 && t->open_end[i - 1] < b; i--)
        t->open_end[i] = t->open_end[i - 1];
    t->open_end[i] = b;
}

static void p_instant(ls_xwriter *w, ls_xtrack *t, int64_t ts, const ls_xev *e)
{
    pwriter *p = (pwriter *)w;
    flush_ends(p, t, ts, true);
    track_event(p, t, ts, PERFETTO__PROTOS__TRACK_EVENT__TYPE__TYPE_INSTANT, e, 0);
}

static void p_flow_start(ls_xwriter *w, ls_xtrack *t, int64_t ts, uint64_t id, const char *via)
{
    pwriter *p = (pwriter *)w;
    ls_xarg a = { "via", LS_XA_NAME, .s = via };
    ls_xev e = { .name = "wake", .cat = "wake", .args = &a, .nargs = 1 };
    flush_ends(p, t, ts, true);
    track_event(p, t, ts, PERFETTO__PROTOS__TRACK_EVENT__TYPE__TYPE_INSTANT, &e, id);
}

/* One TrackEvent for the n series: the first as the event's own counter
 * value, the others as its extra counter values. */
static void p_counters(ls_xwriter *w, ls_xtrack *const *t, const char *group,
                       const char *const *series, const double *v, int n, int64_t ts)
{
    pwriter *p = (pwriter *)w;
    Perfetto__Protos__TracePacket pk;
    Perfetto__Protos__TrackEvent te;
    uint64_t extra[8];
    (void)group;
    (void)series;
    if (n < 1)
        return;
    if (n > 9)
        n = 9;
    packet_init(p, &pk, ts, true);
    perfetto__protos__track_event__init(&te);
    te.has_type = true;
    te.type = PERFETTO__PROTOS__TRACK_EVENT__TYPE__TYPE_COUNTER;
    te.has_track_uuid = true;
    te.track_uuid = t[0]->uuid;
    te.counter_value_field_case =
        PERFETTO__PROTOS__TRACK_EVENT__COUNTER_VALUE_FIELD_DOUBLE_COUNTER_VALUE;
    te.double_counter_value = v[0];
    for (int i = 1; i < n; i++)
        extra[i - 1] = t[i]->uuid;
    te.n_extra_double_counter_track_uuids = te.n_extra_double_counter_values = (size_t)n - 1;
    te.extra_double_counter_track_uuids = extra;
    te.extra_double_counter_values = (double *)&v[1];
    pk.data_case = PERFETTO__PROTOS__TRACE_PACKET__DATA_TRACK_EVENT;
    pk.track_event = &te;
    emit(p, &pk, false);
}

static void p_track_end(ls_xwriter *w, ls_xtrack *t)
{
    flush_ends((pwriter *)w, t, INT64_MAX, false);
}

static bool p_end(ls_xwriter *w)
{
    flush_chunk((pwriter *)w);
    return !((pwriter *)w)->failed && !ferror(w->f);
}

static void p_free(ls_xwriter *w)
{
    pwriter *p = (pwriter *)w;
    intern_free(&p->names);
    intern_free(&p->cats);
    intern_free(&p->keys);
    intern_free(&p->values);
    free(p->chunk);
    free(p->zbuf);
    free(p);
}

static const ls_xwriter_ops proto_ops = {
    p_begin, p_track, p_slice, p_instant, p_flow_start, p_counters, p_track_end, p_end, p_free,
};

ls_xwriter *ls_export_proto_new(FILE *f, int64_t base)
{
    pwriter *p = calloc(1, sizeof(*p));
    if (!p)
        return NULL;
    p->w = (ls_xwriter){ &proto_ops, f, base };
    return &p->w;
}
