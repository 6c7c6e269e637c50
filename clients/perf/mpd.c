/* The DASH manifest, as far as video_download needs it: every Representation's kind, rate,
 * height and SegmentTemplate (number-based, no SegmentTimeline), and the presentation's
 * length. A tag scanner, not an XML parser: it reads the layout ffmpeg's DASH muxer writes
 * (workloads/video.py), attributes in double quotes, templates on the AdaptationSet or the
 * Representation. */
#define _POSIX_C_SOURCE 200809L
#include <ctype.h>
#include <curl/curl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mpd.h"

/* The value of attribute `name` inside one tag's text [tag, end), or -1. */
static int attr(const char *tag, const char *end, const char *name, char *out, size_t size)
{
    size_t n = strlen(name);
    for (const char *p = tag + 1; p + n + 2 < end; p++) {
        if (!isspace((unsigned char)p[-1]) || strncmp(p, name, n) != 0 || p[n] != '=' ||
            p[n + 1] != '"')
            continue;
        const char *v = p + n + 2, *q = memchr(v, '"', (size_t)(end - v));
        if (!q || (size_t)(q - v) >= size)
            return -1;
        memcpy(out, v, (size_t)(q - v));
        out[q - v] = '\0';
        return 0;
    }
    return -1;
}

static long attr_long(const char *tag, const char *end, const char *name, long dflt)
{
    char buf[32], *e = NULL;
    if (attr(tag, end, name, buf, sizeof(buf)) < 0)
        return dflt;
    long v = strtol(buf, &e, 10);
    return *e == '\0' ? v : dflt;
}

/* ISO 8601 duration as the MPD writes it: PnDTnHnMn.nS. -1 if it is not one. */
static double iso_duration(const char *s)
{
    double total = 0;
    int in_time = 0;
    if (*s++ != 'P')
        return -1;
    while (*s) {
        if (*s == 'T') {
            in_time = 1;
            s++;
            continue;
        }
        char *e = NULL;
        double v = strtod(s, &e);
        if (e == s)
            return -1;
        switch (*e) {
        case 'D': total += v * 86400; break;
        case 'H': total += v * 3600; break;
        case 'M': total += in_time ? v * 60 : -1e18; break;  /* months: not a length */
        case 'S': total += v; break;
        default: return -1;
        }
        s = e + 1;
    }
    return total >= 0 ? total : -1;
}

/* Scanner state: the open AdaptationSet and Representation. */
struct scan {
    struct mpd *m;
    enum mpd_kind set_kind;
    struct mpd_template set_tpl;
    int rep;                      /* index of the open Representation, -1 if none */
};

static enum mpd_kind kind_of(const char *tag, const char *end, enum mpd_kind dflt)
{
    char v[64];
    if (attr(tag, end, "contentType", v, sizeof(v)) < 0 &&
        attr(tag, end, "mimeType", v, sizeof(v)) < 0)
        return dflt;
    if (strncmp(v, "video", 5) == 0)
        return MPD_VIDEO;
    return strncmp(v, "audio", 5) == 0 ? MPD_AUDIO : MPD_OTHER;
}

static void read_template(const char *tag, const char *end, struct mpd_template *t)
{
    attr(tag, end, "initialization", t->init, sizeof(t->init));
    attr(tag, end, "media", t->media, sizeof(t->media));
    t->timescale = attr_long(tag, end, "timescale", t->timescale ? t->timescale : 1);
    t->duration = attr_long(tag, end, "duration", t->duration);
    t->start_number = attr_long(tag, end, "startNumber", t->start_number ? t->start_number : 1);
}

static int open_rep(struct scan *s, const char *tag, const char *end, char *err, size_t n)
{
    struct mpd *m = s->m;
    if (m->n == MPD_MAX_REPS)
        return snprintf(err, n, "more than %d Representations", MPD_MAX_REPS), -1;
    struct mpd_rep *r = &m->reps[m->n];
    memset(r, 0, sizeof(*r));
    if (attr(tag, end, "id", r->id, sizeof(r->id)) < 0)
        return snprintf(err, n, "a Representation without an id"), -1;
    r->kind = kind_of(tag, end, s->set_kind);
    r->bandwidth = attr_long(tag, end, "bandwidth", 0);
    r->height = attr_long(tag, end, "height", 0);
    r->tpl = s->set_tpl;
    s->rep = m->n++;
    return 0;
}

/* One tag [tag, end) (tag points at '<'). */
static int scan_tag(struct scan *s, const char *tag, const char *end, char *err, size_t n)
{
    int closing = tag[1] == '/', self_closing = end[-1] == '/';
    const char *name = tag + 1 + closing;
#define IS(t) (strncmp(name, t, strlen(t)) == 0 && !isalnum((unsigned char)name[strlen(t)]))
    if (IS("MPD") && !closing) {
        char d[64];
        if (attr(tag, end, "mediaPresentationDuration", d, sizeof(d)) == 0)
            s->m->total_s = iso_duration(d);
    } else if (IS("AdaptationSet")) {
        s->set_kind = closing ? MPD_OTHER : kind_of(tag, end, MPD_OTHER);
        memset(&s->set_tpl, 0, sizeof(s->set_tpl));
    } else if (IS("Representation")) {
        if (closing)
            s->rep = -1;
        else if (open_rep(s, tag, end, err, n) < 0)
            return -1;
        else if (self_closing)
            s->rep = -1;
    } else if (IS("SegmentTemplate") && !closing) {
        read_template(tag, end, s->rep >= 0 ? &s->m->reps[s->rep].tpl : &s->set_tpl);
    }
#undef IS
    return 0;
}

static int check_reps(const struct mpd *m, char *err, size_t n)
{
    if (!(m->total_s > 0))
        return snprintf(err, n, "no mediaPresentationDuration"), -1;
    for (int i = 0; i < m->n; i++) {
        const struct mpd_template *t = &m->reps[i].tpl;
        if (m->reps[i].kind == MPD_OTHER)
            continue;
        if (!t->media[0] || !t->init[0] || t->duration <= 0 || t->timescale <= 0)
            return snprintf(err, n, "Representation %s: no number-based SegmentTemplate with "
                                    "initialization, media and duration", m->reps[i].id), -1;
    }
    return 0;
}

int mpd_parse(const char *xml, struct mpd *m, char *err, size_t n)
{
    struct scan s = {.m = m, .rep = -1};
    memset(m, 0, sizeof(*m));
    for (const char *p = strchr(xml, '<'); p; p = strchr(p, '<')) {
        if (p[1] == '?' || p[1] == '!') {  /* declaration or comment: no Representation */
            const char *e = strstr(p, p[1] == '!' && p[2] == '-' ? "-->" : ">");
            if (!e)
                break;
            p = e + 1;
            continue;
        }
        const char *end = strchr(p, '>');
        if (!end)
            return snprintf(err, n, "a tag is not closed"), -1;
        if (scan_tag(&s, p, end, err, n) < 0)
            return -1;
        p = end + 1;
    }
    return check_reps(m, err, n);
}

double mpd_segment_s(const struct mpd_rep *r)
{
    return (double)r->tpl.duration / (double)r->tpl.timescale;
}

/* $RepresentationID$, $Number$ (with an optional %0Nd width), $Bandwidth$, $$. */
static int expand(const struct mpd_rep *r, const char *tpl, long number, char *out, size_t size)
{
    size_t k = 0;
    for (const char *p = tpl; *p;) {
        char piece[300];
        const char *q = p[0] == '$' ? strchr(p + 1, '$') : NULL;
        int width = 0;
        if (p[0] != '$') {
            snprintf(piece, sizeof(piece), "%c", *p);
            p++;
        } else if (!q) {
            return -1;
        } else {
            size_t len = (size_t)(q - p - 1);
            if (len == 0)
                snprintf(piece, sizeof(piece), "$");
            else if (strncmp(p + 1, "RepresentationID", len) == 0 && len == 16)
                snprintf(piece, sizeof(piece), "%s", r->id);
            else if (strncmp(p + 1, "Bandwidth", len) == 0 && len == 9)
                snprintf(piece, sizeof(piece), "%ld", r->bandwidth);
            else if (strncmp(p + 1, "Number", 6) == 0 &&
                     (len == 6 || sscanf(p + 7, "%%0%dd$", &width) == 1) && width < 20)
                snprintf(piece, sizeof(piece), "%0*ld", width, number);
            else
                return -1;  /* $Time$ and friends: a SegmentTimeline, not supported */
            p = q + 1;
        }
        size_t l = strlen(piece);
        if (k + l >= size)
            return -1;
        memcpy(out + k, piece, l + 1);
        k += l;
    }
    return 0;
}

int mpd_segment_url(const struct mpd_rep *r, int index, const char *manifest_url, char *out,
                    size_t size)
{
    char rel[512];
    const char *tpl = index < 0 ? r->tpl.init : r->tpl.media;
    if (expand(r, tpl, r->tpl.start_number + index, rel, sizeof(rel)) < 0)
        return -1;
    /* relative to the manifest, as a browser resolves it (RFC 3986) */
    CURLU *u = curl_url();
    char *abs = NULL;
    int ok = u && curl_url_set(u, CURLUPART_URL, manifest_url, 0) == CURLUE_OK &&
             curl_url_set(u, CURLUPART_URL, rel, 0) == CURLUE_OK &&
             curl_url_get(u, CURLUPART_URL, &abs, 0) == CURLUE_OK &&
             (size_t)snprintf(out, size, "%s", abs) < size;
    curl_free(abs);
    curl_url_cleanup(u);
    return ok ? 0 : -1;
}

const struct mpd_rep *mpd_pick(const struct mpd *m, enum mpd_kind kind, const char *name)
{
    const struct mpd_rep *best = NULL;
    for (int i = 0; i < m->n; i++) {
        const struct mpd_rep *r = &m->reps[i];
        if (r->kind != kind)
            continue;
        if (name) {
            char label[32];
            mpd_label(r, label, sizeof(label));
            if (strcmp(name, label) == 0 || strcmp(name, r->id) == 0)
                return r;
        } else if (!best || r->bandwidth > best->bandwidth) {
            best = r;
        }
    }
    return best;
}

void mpd_label(const struct mpd_rep *r, char *out, size_t size)
{
    if (r->kind == MPD_VIDEO && r->height > 0)
        snprintf(out, size, "%ldp", r->height);
    else
        snprintf(out, size, "%s", r->id);
}
