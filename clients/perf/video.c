/* video_download: the paper's non-adaptive video test. It reads the DASH manifest, picks one
 * video rendition and the audio, and fetches both streams in parallel, segment by segment,
 * paced like a player's playout: a segment is requested once it lies less than --buffer
 * seconds of media ahead of the playout position, and playout (which renders nothing) starts
 * when the first media segment of both streams is in, and waits (a stall) whenever the next
 * segment of either stream is not. Over TCP each stream has its own TLS connection (HTTP/2);
 * over QUIC both are streams of one connection (HTTP/3). libcurl throughout: one multi
 * handle per connection, each allowed one connection, so the connection count is the
 * design's and is checked. One row per session (repetition). */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "mpd.h"
#include "perf.h"
#include "perf_curl.h"

#define MAX_MANIFEST (1 << 20)

enum { VIDEO, AUDIO, LANES };
static const char *const LANE_NAME[LANES] = {"video", "audio"};

/* One stream: its Representation, its connection's multi handle and the transfer in flight. */
struct lane {
    const struct mpd_rep *rep;
    CURLM *multi;
    CURL *easy;
    struct perf_opts o;           /* the session's options with this transfer's URL, timeout */
    char url[2048];
    struct perf_xfer x;
    struct perf_row r;            /* the transfer in flight (its own timings, bytes, error) */
    char errbuf[CURL_ERROR_SIZE];
    int next;                     /* segment to fetch next: -1 init, then media 0.. */
    int busy;
    int64_t sid;                  /* ngtcp2: the request's stream */
    int ended;                    /* ngtcp2: its response ended, not yet accounted */
    int have;                     /* media segments in */
    uint64_t bytes;
    double busy_s;                /* request to last byte, summed over the segments */
};

/* The playout clock (wall seconds, CLOCK_REALTIME like the row's times). */
struct playout {
    double t0;                    /* playout start; NaN before */
    double pos, t_last;           /* media position at t_last */
    int stalled;
    double stall_start;
};

struct session {
    const struct perf_opts *o;
    struct perf_row *row;
    struct mpd mpd;
    struct lane lane[LANES];
    CURLM *multi[LANES];          /* TCP: one per stream; QUIC: multi[0] for both */
    int n_multi;
    struct curl_slist *resolve;
#ifdef HAVE_NGTCP2
    struct nq *quic;              /* --backend ngtcp2: the one QUIC connection */
    struct perf_quic_hooks hooks;
#endif
    void *quic_state;             /* the ngtcp2 backend's trust anchors and priorities */
    double t_done;                /* the last segment's last byte */
    int n_seg;                    /* media segments per stream */
    double seg_s, deadline;
    struct playout play;
    int connections;
    char *manifest;
    size_t manifest_len;
};

/* ---- the manifest ---- */

static size_t keep_body(char *data, size_t size, size_t n, void *arg)
{
    struct session *s = arg;
    size_t len = size * n;
    if (s->manifest_len + len > MAX_MANIFEST)
        return 0;
    char *m = realloc(s->manifest, s->manifest_len + len + 1);
    if (!m)
        return 0;
    memcpy(m + s->manifest_len, data, len);
    s->manifest = m;
    s->manifest_len += len;
    m[s->manifest_len] = '\0';
    s->row->bytes += len;
    return len;
}

static int manifest_error(struct session *s, const char *what)
{
    snprintf(s->row->error, sizeof(s->row->error), "manifest: %.200s", what);
    return -1;
}

/* The two Representations and the number of segments --duration asks for. */
static int read_manifest(struct session *s)
{
    char err[200];
    if (!s->manifest || mpd_parse(s->manifest, &s->mpd, err, sizeof(err)) < 0)
        return manifest_error(s, s->manifest ? err : "empty");
    const struct mpd_rep *v = mpd_pick(&s->mpd, MPD_VIDEO, s->o->rendition);
    const struct mpd_rep *a = mpd_pick(&s->mpd, MPD_AUDIO, NULL);
    if (!v)
        return manifest_error(s, s->o->rendition ? "no video rendition of that name"
                                                 : "no video Representation");
    if (!a)
        return manifest_error(s, "no audio Representation");
    if (fabs(mpd_segment_s(v) - mpd_segment_s(a)) > 1e-6)
        return manifest_error(s, "audio and video segments differ in length");
    s->lane[VIDEO].rep = v;
    s->lane[AUDIO].rep = a;
    s->seg_s = mpd_segment_s(v);
    double want = s->o->duration_s > 0 && s->o->duration_s < s->mpd.total_s ? s->o->duration_s
                                                                            : s->mpd.total_s;
    s->n_seg = (int)ceil(want / s->seg_s - 1e-9);
    mpd_label(v, s->row->video.rendition, sizeof(s->row->video.rendition));
    return 0;
}

/* ---- transfers ---- */

static double remaining_s(const struct session *s)
{
    return s->deadline - perf_now_realtime();
}

/* The lane's next request on its libcurl multi handle (the manifest if it has no
 * Representation yet). */
static int curl_start(struct session *s, struct lane *l)
{
    int manifest = !l->rep;
    l->o = *s->o;
    l->o.url = l->url;
    l->o.timeout_s = remaining_s(s);
    if (l->o.timeout_s < 0.001)
        l->o.timeout_s = 0.001;
    /* the manifest's transfer fills the session's row: its connection is the first one */
    struct perf_row *row = manifest ? s->row : &l->r;
    l->x = (struct perf_xfer){.o = &l->o, .row = row, .easy = l->easy};
    l->errbuf[0] = '\0';
    if (perf_curl_prepare(&l->x, s->resolve, NULL, l->errbuf) < 0)
        return -1;
    /* connections are kept for the next segment; each multi handle allows one */
    curl_easy_setopt(l->easy, CURLOPT_FRESH_CONNECT, 0L);
    curl_easy_setopt(l->easy, CURLOPT_FORBID_REUSE, 0L);
    curl_easy_setopt(l->easy, CURLOPT_PIPEWAIT, 1L);
    if (manifest) {
        curl_easy_setopt(l->easy, CURLOPT_WRITEFUNCTION, keep_body);
        curl_easy_setopt(l->easy, CURLOPT_WRITEDATA, s);
    }
    perf_curl_start(&l->x);
    if (curl_multi_add_handle(l->multi, l->easy) != CURLM_OK) {
        snprintf(row->error, sizeof(row->error), "internal: curl_multi_add_handle failed");
        return -1;
    }
    return 0;
}

#ifdef HAVE_NGTCP2
/* The lane's next segment as a new stream of the QUIC connection. */
static int quic_start(struct session *s, struct lane *l)
{
    l->r.t_start = perf_now_realtime();
    return perf_quic_get(s->quic, l->url, &l->sid);
}
#endif

/* Starts the lane's next request. */
static int start(struct session *s, struct lane *l)
{
    if (!l->rep)
        snprintf(l->url, sizeof(l->url), "%s", s->o->url);
    else if (mpd_segment_url(l->rep, l->next, s->o->url, l->url, sizeof(l->url)) < 0)
        return manifest_error(s, "a segment URL cannot be made from the template");
    perf_row_free(&l->r);
    perf_row_init(&l->r, 0);
#ifdef HAVE_NGTCP2
    if (s->quic) {
        if (quic_start(s, l) < 0)
            return -1;
        l->busy = 1;
        return 0;
    }
#endif
    if (curl_start(s, l) < 0)
        return -1;
    l->busy = 1;
    return 0;
}

/* The error of a segment's transfer, with the file it was for. */
static void segment_error(struct session *s, struct lane *l)
{
    const char *file = strrchr(l->url, '/');
    snprintf(s->row->error, sizeof(s->row->error), "%.180s [%s %.60s]", l->r.error,
             LANE_NAME[l - s->lane], file ? file + 1 : l->url);
}

/* ---- playout ---- */

/* Media both streams have, in seconds. */
static double buffered_s(const struct session *s)
{
    int have = s->lane[VIDEO].have < s->lane[AUDIO].have ? s->lane[VIDEO].have
                                                          : s->lane[AUDIO].have;
    return have * s->seg_s;
}

/* The playout position now; a stall starts when it reaches the end of what is buffered. */
static void advance(struct session *s, double now)
{
    struct playout *p = &s->play;
    if (isnan(p->t0) || p->stalled)
        return;
    double limit = buffered_s(s), pos = p->pos + (now - p->t_last);
    if (pos >= limit && s->lane[VIDEO].have + s->lane[AUDIO].have < 2 * s->n_seg) {
        p->stalled = 1;
        p->stall_start = p->t_last + (limit - p->pos);
        s->row->video.stalls++;
        pos = limit;
    }
    p->pos = pos;
    p->t_last = now;
}

static void media_arrived(struct session *s, struct lane *l, double now)
{
    struct playout *p = &s->play;
    struct perf_video *v = &s->row->video;
    advance(s, now);
    if (!isnan(p->t0) && p->pos >= l->have * s->seg_s - 1e-9)
        v->late_segments++;  /* playout had reached its start: it waited for it */
    l->have++;
    v->segments++;
    if (p->stalled && buffered_s(s) > p->pos) {
        p->stalled = 0;
        v->stall_ms = (isnan(v->stall_ms) ? 0 : v->stall_ms) + (now - p->stall_start) * 1e3;
        p->t_last = now;
    }
    if (isnan(p->t0) && s->lane[VIDEO].have > 0 && s->lane[AUDIO].have > 0) {
        p->t0 = p->t_last = now;  /* startup_ms: from t_start, known once the row is done */
    }
}

/* Wall time at which the lane's next segment is due (now if it already is): while its start
 * lies less than the buffer ahead of playout, and at once if playout waits at it (or is yet
 * to start there). */
static double due_at(const struct session *s, const struct lane *l, double now)
{
    const struct playout *p = &s->play;
    if (l->next < 0)
        return now;  /* the init segment */
    double start = l->next * s->seg_s;
    double pos = isnan(p->t0) ? 0.0 : p->stalled ? p->pos : p->pos + (now - p->t_last);
    if (start - s->o->buffer_s < pos || start <= pos + 1e-9)
        return now;
    if (isnan(p->t0) || p->stalled)
        return INFINITY;  /* the position moves only once playout runs */
    return now + (start - s->o->buffer_s - pos);
}

/* A segment's transfer is over (its row filled): bytes and busy time to its stream, the
 * segment to playout. `connects`: connections the transfer opened. */
static int segment_done(struct session *s, struct lane *l, long connects)
{
    double now = perf_now_realtime();
    if (l->r.error[0])
        return segment_error(s, l), -1;
    /* a transfer that opened a connection: its handshake is not download time */
    double handshake_ms = connects > 0 && isfinite(l->r.connection_time_ms)
                              ? l->r.connection_time_ms : 0.0;
    if (connects > 0 && isnan(s->row->video.second_connection_time_ms))
        s->row->video.second_connection_time_ms = l->r.connection_time_ms;
    l->busy_s += (l->r.download_time_ms - handshake_ms) / 1e3;
    l->bytes += l->r.bytes;
    s->row->bytes += l->r.bytes;
    s->t_done = l->r.t_done;
    if (l->next++ >= 0)
        media_arrived(s, l, now);
    return 0;
}

/* A finished libcurl transfer: the manifest's filled the session's row; a connection it
 * opened is counted. */
static int curl_finished(struct session *s, struct lane *l, CURLcode rc)
{
    long connects = 0;
    curl_multi_remove_handle(l->multi, l->easy);
    l->busy = 0;
    curl_easy_getinfo(l->easy, CURLINFO_NUM_CONNECTS, &connects);
    s->connections += (int)connects;
    perf_curl_finish(&l->x, rc, l->errbuf);
    if (!l->rep)
        return s->row->error[0] ? -1 : read_manifest(s);
    return segment_done(s, l, connects);
}

/* ---- the loop ---- */

static int perform_all(struct session *s)
{
    for (int i = 0; i < s->n_multi; i++) {
        int running = 0, left = 0;
        curl_multi_perform(s->multi[i], &running);
        CURLMsg *msg;
        while ((msg = curl_multi_info_read(s->multi[i], &left))) {
            if (msg->msg != CURLMSG_DONE)
                continue;
            for (int k = 0; k < LANES; k++)
                if (s->lane[k].busy && s->lane[k].easy == msg->easy_handle &&
                    curl_finished(s, &s->lane[k], msg->data.result) < 0)
                    return -1;
        }
    }
    return 0;
}

/* Sleeps until a socket is ready, curl's next timer, or next_s (wall time). */
static void wait_all(struct session *s, double next_s)
{
    struct curl_waitfd extra[16];
    unsigned int n = 0;
    double wait = next_s - perf_now_realtime();
    long ms = wait > 3600 ? 3600000L : wait > 0 ? (long)ceil(wait * 1e3) : 0;
    if (s->n_multi > 1) {
        long t = -1;
        curl_multi_timeout(s->multi[1], &t);
        if (t >= 0 && t < ms)
            ms = t;
        if (curl_multi_waitfds(s->multi[1], extra, 16, &n) != CURLM_OK)
            n = 0;
    }
    curl_multi_poll(s->multi[0], extra, n, (int)ms, NULL);
}

#ifdef HAVE_NGTCP2
static struct lane *lane_of(struct session *s, int64_t sid)
{
    for (int k = 0; k < LANES; k++)
        if (s->lane[k].busy && s->lane[k].sid == sid)
            return &s->lane[k];
    return NULL;
}

/* Before the streams start, every response byte is the manifest's. */
static int quic_data(void *ud, int64_t sid, const uint8_t *data, size_t len)
{
    struct lane *l = lane_of(ud, sid);
    if (l) {
        l->r.bytes += len;
        return 0;
    }
    return keep_body((char *)data, 1, len, ud) == len ? 0 : -1;
}

static void quic_status(void *ud, int64_t sid, long status)
{
    struct lane *l = lane_of(ud, sid);
    if (l)
        l->r.http_status = status;
}

/* Accounted after the I/O round (segment_done may end the session). */
static void quic_end(void *ud, int64_t sid)
{
    struct lane *l = lane_of(ud, sid);
    if (!l)
        return;
    l->ended = 1;
    l->r.t_done = perf_now_realtime();
    l->r.download_time_ms = (l->r.t_done - l->r.t_start) * 1e3;
    if (l->r.http_status < 200 || l->r.http_status >= 300)
        snprintf(l->r.error, sizeof(l->r.error), "http: status %ld", l->r.http_status);
}
#endif

/* One round of I/O on the session's connections, waiting at most until `until`. */
static int pump(struct session *s, double until)
{
#ifdef HAVE_NGTCP2
    if (s->quic) {
        if (perf_quic_step(s->quic, until) < 0)
            return -1;
        for (int k = 0; k < LANES; k++) {
            struct lane *l = &s->lane[k];
            if (l->ended) {
                l->ended = l->busy = 0;
                if (segment_done(s, l, 0) < 0)
                    return -1;
            }
        }
        return 0;
    }
#endif
    wait_all(s, until);
    return perform_all(s);
}

static int lanes_done(const struct session *s)
{
    for (int k = 0; k < LANES; k++)
        if (s->lane[k].busy || s->lane[k].have < s->n_seg)
            return 0;
    return 1;
}

/* Starts what is due; returns the earliest time something else becomes due. */
static double start_due(struct session *s, double now)
{
    double next = s->deadline;
    for (int k = 0; k < LANES && !s->row->error[0]; k++) {
        struct lane *l = &s->lane[k];
        if (l->busy || l->next >= s->n_seg)
            continue;
        double due = due_at(s, l, now);
        if (due <= now && start(s, l) < 0)
            return now;
        if (due > now && due < next)
            next = due;
    }
    return next;
}

static int run_lanes(struct session *s)
{
    while (!lanes_done(s)) {
        double now = perf_now_realtime();
        advance(s, now);
        double next = start_due(s, now);
        if (s->row->error[0])
            return -1;
        if (now >= s->deadline) {
            snprintf(s->row->error, sizeof(s->row->error),
                     "timeout: %d of %d segments per stream after %.3f s",
                     s->lane[VIDEO].have < s->lane[AUDIO].have ? s->lane[VIDEO].have
                                                                : s->lane[AUDIO].have,
                     s->n_seg, s->o->timeout_s);
            return -1;
        }
        if (pump(s, next) < 0)
            return -1;
    }
    return 0;
}

static int manifest_timeout(struct session *s)
{
    snprintf(s->row->error, sizeof(s->row->error), "timeout: no manifest after %.3f s",
             s->o->timeout_s);
    return -1;
}

#ifdef HAVE_NGTCP2
/* The manifest as the QUIC connection's first request (timed as quic_perf --backend ngtcp2
 * times its one request). */
static int quic_manifest(struct session *s)
{
    s->hooks = (struct perf_quic_hooks){.ud = s, .data = quic_data, .status = quic_status,
                                        .end = quic_end};
    if (!(s->quic = perf_quic_open(s->o, s->quic_state, s->row, &s->hooks)))
        return snprintf(s->row->error, sizeof(s->row->error), "internal: no memory"), -1;
    while (perf_quic_first(s->quic) < 0) {
        if (s->row->error[0] || pump(s, s->deadline) < 0)
            return -1;
        if (remaining_s(s) <= 0)
            return manifest_timeout(s);
    }
    s->connections = 1;
    if (s->row->http_status < 200 || s->row->http_status >= 300)
        return snprintf(s->row->error, sizeof(s->row->error), "http: status %ld",
                        s->row->http_status), -1;
    return read_manifest(s);
}
#endif

/* The manifest on the video stream's connection (the first one: the row's handshake). */
static int fetch_manifest(struct session *s)
{
#ifdef HAVE_NGTCP2
    if (s->quic_state)
        return quic_manifest(s);
#endif
    struct lane *l = &s->lane[VIDEO];
    if (start(s, l) < 0)
        return -1;
    while (l->busy) {
        if (remaining_s(s) <= 0)
            return manifest_timeout(s);
        if (pump(s, s->deadline) < 0)
            return -1;
    }
    return 0;
}

/* ---- the row ---- */

static double rate_mbps(uint64_t bytes, double s)
{
    return s > 0 ? (double)bytes * 8.0 / s / 1e6 : NAN;
}

static void finish_row(struct session *s)
{
    struct perf_row *row = s->row;
    struct perf_video *v = &row->video;
    int expected = s->o->proto == PROTO_QUIC ? 1 : LANES;
    if (!row->error[0] && s->connections != expected)
        snprintf(row->error, sizeof(row->error), "transfer: %d connections, expected %d",
                 s->connections, expected);
    v->video_bytes = s->lane[VIDEO].bytes;
    v->audio_bytes = s->lane[AUDIO].bytes;
    v->media_s = (s->lane[VIDEO].have < s->lane[AUDIO].have ? s->lane[VIDEO].have
                                                              : s->lane[AUDIO].have) * s->seg_s;
    if (!isnan(s->play.t0)) {
        v->startup_ms = (s->play.t0 - row->t_start) * 1e3;
        if (isnan(v->stall_ms))
            v->stall_ms = 0;
    }
    if (row->error[0] || !isfinite(row->t_start))
        return;
    v->video_rate_mbps = rate_mbps(v->video_bytes, s->lane[VIDEO].busy_s);
    v->audio_rate_mbps = rate_mbps(v->audio_bytes, s->lane[AUDIO].busy_s);
    row->t_done = s->t_done;
    row->download_time_ms = (row->t_done - row->t_start) * 1e3;
    row->throughput_mbps = rate_mbps(row->bytes, row->t_done - row->t_start);
}

/* ---- the backend ---- */

static int open_session(struct session *s)
{
    s->n_multi = s->o->proto == PROTO_QUIC ? 1 : LANES;
    for (int i = 0; i < s->n_multi; i++) {
        if (!(s->multi[i] = curl_multi_init()))
            return -1;
        curl_multi_setopt(s->multi[i], CURLMOPT_MAX_HOST_CONNECTIONS, 1L);
    }
    for (int k = 0; k < LANES; k++) {
        s->lane[k].next = -1;
        s->lane[k].multi = s->multi[s->n_multi > 1 ? k : 0];
        if (!(s->lane[k].easy = curl_easy_init()))
            return -1;
    }
    s->resolve = perf_curl_resolve(s->o);
    return 0;
}

static void close_session(struct session *s)
{
    for (int k = 0; k < LANES; k++) {
        struct lane *l = &s->lane[k];
        if (l->busy) {
            curl_multi_remove_handle(l->multi, l->easy);
            perf_sink_close(&l->x.sink, l->x.row);
        }
        curl_easy_cleanup(l->easy);
        perf_row_free(&l->r);
    }
    for (int i = 0; i < s->n_multi; i++)
        curl_multi_cleanup(s->multi[i]);
    curl_slist_free_all(s->resolve);
    free(s->manifest);
}

/* ngtcp2: the connection's end also finishes the first request's row (its timings, TLS), so
 * it comes before the session's row is finished. */
static void close_quic(struct session *s)
{
#ifdef HAVE_NGTCP2
    perf_quic_close(s->quic);
    s->quic = NULL;
#else
    (void)s;
#endif
}

static int video_fetch(const struct perf_opts *o, void *state, struct perf_row *row)
{
    struct session *s = calloc(1, sizeof(*s));  /* the manifest's Representations: ~20 KB */
    if (!s)
        return -1;
    s->o = o;
    s->row = row;
    s->quic_state = state;
    s->play.t0 = NAN;
    s->deadline = perf_now_realtime() + o->timeout_s;
    snprintf(row->library, sizeof(row->library), "%s", curl_version());
    if (open_session(s) < 0)
        snprintf(row->error, sizeof(row->error), "internal: libcurl set-up failed");
    else if (fetch_manifest(s) == 0)
        run_lanes(s);
    close_quic(s);
    finish_row(s);
    close_session(s);
    free(s);
    return row->error[0] ? -1 : 0;
}

/* What a video session cannot do: one body, one hash, one resumed connection. */
static int video_setup(const struct perf_opts *o, void **state)
{
    *state = NULL;
    int ngtcp2 = strcmp(o->backend, "ngtcp2") == 0;
    const char *no = o->resume ? "--resume" : o->sha256 ? "--sha256"
                   : o->output_body ? "--output-body" : o->curl_timers ? "--curl-timers"
                   : ngtcp2 && o->proto != PROTO_QUIC ? "--backend ngtcp2 over TCP"
                   : o->cc && o->proto == PROTO_QUIC && !ngtcp2 ? "--cc with QUIC (libcurl)"
                   : NULL;
    if (no) {
        fprintf(stderr, "%s: %s is not supported\n", o->tool, no);
        return -2;
    }
    return 0;
}

static void video_teardown(void *state)
{
    (void)state;
}

const struct perf_backend perf_backend_video = {
    .name = "libcurl",
    .setup = video_setup,
    .fetch = video_fetch,
    .teardown = video_teardown,
};

#ifdef HAVE_NGTCP2
/* The ngtcp2 backend's per-process TLS objects (trust anchors, priorities) serve the one
 * QUIC connection; video_fetch picks the transport by the state it gets. */
static int video_ng_setup(const struct perf_opts *o, void **state)
{
    int rc = video_setup(o, state);
    return rc != 0 ? rc : perf_backend_ngtcp2.setup(o, state);
}

static void video_ng_teardown(void *state)
{
    perf_backend_ngtcp2.teardown(state);
}

const struct perf_backend perf_backend_video_ngtcp2 = {
    .name = "ngtcp2",
    .setup = video_ng_setup,
    .fetch = video_fetch,
    .teardown = video_ng_teardown,
};
#endif

static const struct perf_backend *const backends[] = {
    &perf_backend_video,
#ifdef HAVE_NGTCP2
    &perf_backend_video_ngtcp2,
#endif
    NULL,
};

static const struct perf_tool tool = {
    .name = "video_download",
    .default_proto = PROTO_QUIC,
    .default_http = HTTP_3,
    .is_video = 1,
    .backends = backends,
};

int main(int argc, char **argv)
{
    return perf_main(&tool, argc, argv);
}
