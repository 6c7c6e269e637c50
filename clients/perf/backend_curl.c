/* The libcurl backend: one measurement = one easy handle = one fresh connection.
 * Used by tls_perf (TCP + TLS 1.2/1.3, HTTP/1.1 or 2) and quic_perf (HTTP/3 only). */
#define _DEFAULT_SOURCE  /* TCP_CONGESTION */
#include <curl/curl.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <openssl/ssl.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "perf.h"
#include "perf_curl.h"

/* One easy handle for all repetitions, so that libcurl loads the CA store once and caches it
 * (CURLOPT_CA_CACHE_TIMEOUT), as a client application does; connections and TLS sessions are
 * still fresh (FRESH_CONNECT, FORBID_REUSE, no session cache unless --resume). */
struct curl_state {
    CURL *easy;
    CURLSH *share;                /* --resume only: the warm-up connection's session */
};

static size_t on_body(char *data, size_t size, size_t n, void *arg)
{
    struct perf_xfer *x = arg;
    size_t len = size * n;
    /* returning less makes curl fail with CURLE_WRITE_ERROR rather than lose data quietly */
    return perf_sink_write(&x->sink, x->row, data, len) == 0 ? len : 0;
}

/* The TLS object is only guaranteed to be alive during the transfer (FORBID_REUSE closes
 * the connection inside curl_easy_perform), so the negotiated parameters are read in the
 * pre-request callback: the handshake is complete, the request not yet sent. */
static void read_tls(struct perf_xfer *x)
{
    struct curl_tlssessioninfo *ti = NULL;
    if (curl_easy_getinfo(x->easy, CURLINFO_TLS_SSL_PTR, &ti) != CURLE_OK || !ti ||
        ti->backend != CURLSSLBACKEND_OPENSSL || !ti->internals)
        return;
    SSL *ssl = ti->internals;
    const SSL_CIPHER *c = SSL_get_current_cipher(ssl);
    perf_set_group(x->row, x->o->groups, SSL_group_to_name(ssl, SSL_get_negotiated_group(ssl)));
    snprintf(x->row->tls_version, sizeof(x->row->tls_version), "%s", SSL_get_version(ssl));
    snprintf(x->row->cipher, sizeof(x->row->cipher), "%s", c ? SSL_CIPHER_get_name(c) : "");
    x->row->resumed = SSL_session_reused(ssl) ? 1 : 0;
    x->tls_seen = 1;
}

/* With TLS 1.3 early data (--resume) libcurl sends the request before the handshake has
 * finished, so the pre-request callback sees an unfinished handshake; the first response
 * header line is read after it has finished, so the TLS parameters are read again there. */
static size_t on_header(char *data, size_t size, size_t n, void *arg)
{
    struct perf_xfer *x = arg;
    (void)data;
    if (!x->headers_seen) {
        x->headers_seen = 1;
        read_tls(x);
    }
    return size * n;
}

static int on_prereq(void *arg, char *remote_ip, char *local_ip, int remote_port,
                     int local_port)
{
    struct perf_xfer *x = arg;
    (void)remote_ip; (void)local_ip; (void)remote_port; (void)local_port;
    x->t_prereq = perf_now_realtime();
    x->cpu_prereq = perf_now_thread_cpu();
    read_tls(x);
    return CURL_PREREQFUNC_OK;
}

/* --cc: the TCP congestion control of this one connection, set before connect(). */
static int on_sockopt(void *arg, curl_socket_t fd, curlsocktype purpose)
{
    struct perf_xfer *x = arg;
    if (purpose != CURLSOCKTYPE_IPCXN || !x->o->cc)
        return CURL_SOCKOPT_OK;
    if (setsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, x->o->cc, (socklen_t)strlen(x->o->cc)) == 0)
        return CURL_SOCKOPT_OK;
    snprintf(x->row->error, sizeof(x->row->error), "cc: cannot use '%.40s': %s", x->o->cc,
             strerror(errno));
    return CURL_SOCKOPT_ERROR;
}

static long curl_sslversion(enum perf_proto p)
{
    /* Both minimum and maximum, so that the server cannot negotiate anything else. */
    if (p == PROTO_TLS12)
        return CURL_SSLVERSION_TLSv1_2 | CURL_SSLVERSION_MAX_TLSv1_2;
    return CURL_SSLVERSION_TLSv1_3 | CURL_SSLVERSION_MAX_TLSv1_3;
}

static long curl_httpversion(enum perf_http h)
{
    switch (h) {
    case HTTP_11: return CURL_HTTP_VERSION_1_1;
    case HTTP_2: return CURL_HTTP_VERSION_2TLS;
    default: return CURL_HTTP_VERSION_3ONLY;
    }
}

static void set_tls_opts(CURL *e, const struct perf_opts *o, CURLSH *share)
{
    curl_easy_setopt(e, CURLOPT_SSLVERSION, curl_sslversion(o->proto));
    curl_easy_setopt(e, CURLOPT_SSL_EC_CURVES, o->groups);
    if (o->cacert) {
        /* exactly this trust anchor: no system CA directory lookups inside the handshake */
        curl_easy_setopt(e, CURLOPT_CAINFO, o->cacert);
        curl_easy_setopt(e, CURLOPT_CAPATH, NULL);
    }
    if (o->insecure) {
        curl_easy_setopt(e, CURLOPT_SSL_VERIFYPEER, 0L);
        curl_easy_setopt(e, CURLOPT_SSL_VERIFYHOST, 0L);
    }
    if (share) {
        curl_easy_setopt(e, CURLOPT_SHARE, share);
        /* ask for 0-RTT too; whether any was sent is reported as early_data_bytes */
        curl_easy_setopt(e, CURLOPT_SSL_OPTIONS, (long)CURLSSLOPT_EARLYDATA);
    } else {
        /* paper: every connection is a first-time connection, no resumption, no 0-RTT */
        curl_easy_setopt(e, CURLOPT_SSL_SESSIONID_CACHE, 0L);
    }
}

static void set_callbacks(CURL *e, struct perf_xfer *x, char *errbuf)
{
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, x);
    curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(e, CURLOPT_HEADERDATA, x);
    curl_easy_setopt(e, CURLOPT_PREREQFUNCTION, on_prereq);
    curl_easy_setopt(e, CURLOPT_PREREQDATA, x);
    curl_easy_setopt(e, CURLOPT_ERRORBUFFER, errbuf);
    if (x->o->cc) {
        curl_easy_setopt(e, CURLOPT_SOCKOPTFUNCTION, on_sockopt);
        curl_easy_setopt(e, CURLOPT_SOCKOPTDATA, x);
    }
}

static int set_opts(CURL *e, const struct perf_opts *o, struct curl_slist *resolve,
                    CURLSH *share)
{
    if (curl_easy_setopt(e, CURLOPT_URL, o->url) != CURLE_OK)
        return -1;
    curl_easy_setopt(e, CURLOPT_RESOLVE, resolve);
    curl_easy_setopt(e, CURLOPT_HTTP_VERSION, curl_httpversion(o->http));
    curl_easy_setopt(e, CURLOPT_FRESH_CONNECT, 1L);
    curl_easy_setopt(e, CURLOPT_FORBID_REUSE, 1L);
    curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, (long)(o->timeout_s * 1000.0));
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_FOLLOWLOCATION, 0L);
    curl_easy_setopt(e, CURLOPT_USERAGENT, "quicbed-perf/" PERF_TOOL_VERSION);
    curl_easy_setopt(e, CURLOPT_VERBOSE, (long)o->verbose);
    /* only https: a typo'd scheme must not measure cleartext HTTP */
    curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "https");
    set_tls_opts(e, o, share);
    return 0;
}

/* "category: detail (curl N)" so that scripts can group on the prefix. */
static const char *error_category(CURLcode rc)
{
    switch (rc) {
    case CURLE_UNSUPPORTED_PROTOCOL:
    case CURLE_URL_MALFORMAT: return "url";
    case CURLE_COULDNT_RESOLVE_HOST: return "resolve";
    case CURLE_COULDNT_CONNECT: return "connect";
    case CURLE_OPERATION_TIMEDOUT: return "timeout";
    case CURLE_SSL_CONNECT_ERROR:
    case CURLE_PEER_FAILED_VERIFICATION:
    case CURLE_SSL_CACERT_BADFILE: return "tls";
    case CURLE_HTTP3:
    case CURLE_QUIC_CONNECT_ERROR: return "quic";
    case CURLE_WRITE_ERROR: return "output";
    default: return "transfer";
    }
}

static void set_error(struct perf_row *row, CURLcode rc, const char *errbuf)
{
    if (row->error[0])
        return;  /* a callback already said what went wrong */
    snprintf(row->error, sizeof(row->error), "%s: %.200s (curl %d)", error_category(rc),
             errbuf[0] ? errbuf : curl_easy_strerror(rc), (int)rc);
}

enum { T_LOOKUP, T_CONNECT, T_APPCONNECT, T_PRETRANSFER, T_START, T_TOTAL, T_PREREQ };

static void read_timers(struct perf_xfer *x, double t_before)
{
    static const CURLINFO what[] = {CURLINFO_NAMELOOKUP_TIME_T, CURLINFO_CONNECT_TIME_T,
                                    CURLINFO_APPCONNECT_TIME_T, CURLINFO_PRETRANSFER_TIME_T,
                                    CURLINFO_STARTTRANSFER_TIME_T, CURLINFO_TOTAL_TIME_T};
    for (int i = 0; i < T_PREREQ; i++) {
        curl_off_t us = 0;
        curl_easy_getinfo(x->easy, what[i], &us);
        x->row->curl_us[i] = (long long)us;
    }
    x->row->curl_us[T_PREREQ] =
        x->t_prereq > 0 ? (long long)((x->t_prereq - t_before) * 1e6 + 0.5) : 0;
}

static const char *http_version_name(long v)
{
    switch (v) {
    case CURL_HTTP_VERSION_1_0: return "1.0";
    case CURL_HTTP_VERSION_1_1: return "1.1";
    case CURL_HTTP_VERSION_2_0: return "2";
    case CURL_HTTP_VERSION_3: return "3";
    default: return "";
    }
}

static void read_endpoints(CURL *e, struct perf_row *row)
{
    char *s = NULL;
    if (curl_easy_getinfo(e, CURLINFO_LOCAL_IP, &s) == CURLE_OK && s)
        snprintf(row->local_ip, sizeof(row->local_ip), "%s", s);
    s = NULL;
    if (curl_easy_getinfo(e, CURLINFO_PRIMARY_IP, &s) == CURLE_OK && s)
        snprintf(row->remote_ip, sizeof(row->remote_ip), "%s", s);
    curl_easy_getinfo(e, CURLINFO_LOCAL_PORT, &row->local_port);
    curl_easy_getinfo(e, CURLINFO_PRIMARY_PORT, &row->remote_port);
}

static double us_to_s(long long us)
{
    return (double)us / 1e6;
}

/* libcurl's offsets -> row timings. For QUIC, libcurl 8.14's OpenSSL-QUIC backend does not
 * time the handshake reliably (CONNECT_TIME is often 0 and APPCONNECT then falls on the start
 * of the transfer, see README.md), so quic_perf takes handshake completion from the
 * pre-request callback, the first moment libcurl hands over an established connection;
 * there is no separate transport connect in QUIC, so connect = handshake. */
static void set_timings(struct perf_xfer *x, double t_before)
{
    const long long *us = x->row->curl_us;
    double lookup = us_to_s(us[T_LOOKUP]);
    double conn = us_to_s(us[T_CONNECT]), app = us_to_s(us[T_APPCONNECT]);
    if (x->o->proto == PROTO_QUIC) {
        app = us[T_PREREQ] > 0 ? us_to_s(us[T_PREREQ]) : 0.0;
        conn = app;
    }
    perf_row_timings(x->row, t_before, lookup, conn, app, us_to_s(us[T_START]),
                     us_to_s(us[T_TOTAL]));
}

static void read_info(struct perf_xfer *x, double t_before)
{
    CURL *e = x->easy;
    struct perf_row *row = x->row;
    long hv = 0;
    curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &row->http_status);
    curl_easy_getinfo(e, CURLINFO_HTTP_VERSION, &hv);
    snprintf(row->http_version, sizeof(row->http_version), "%s", http_version_name(hv));
    read_endpoints(e, row);
    curl_off_t early = 0;
    curl_easy_getinfo(e, CURLINFO_EARLYDATA_SENT_T, &early);
    row->early_data_bytes = (long long)early;
    read_timers(x, t_before);
    set_timings(x, t_before);
    /* the pre-request callback follows handshake completion (TCP and QUIC) within µs */
    if (isfinite(row->t_handshake) && x->t_prereq > 0)
        row->client_cpu_ms = (x->cpu_prereq - x->cpu_start) * 1e3;
    if (!x->tls_seen && x->o->proto == PROTO_QUIC && isfinite(row->t_handshake)) {
        /* QUIC mandates TLS 1.3 (RFC 9001 4.2); libcurl does not expose the QUIC TLS object,
         * so neither the cipher nor session reuse can be read */
        snprintf(row->tls_version, sizeof(row->tls_version), "TLSv1.3");
        if (!strchr(x->o->groups, ':'))  /* one group offered: the handshake used it */
            perf_set_group(row, x->o->groups, x->o->groups);
        if (x->o->resume)
            row->resumed = -1;
    }
}

/* A transfer can succeed at the curl level and still not be the measurement that was asked
 * for: an HTTP error page, or a silently negotiated-down HTTP version. */
static void check_negotiated(const struct perf_opts *o, struct perf_row *row)
{
    static const char *const want_http[] = {"1.1", "2", "3"};
    const char *want = want_http[o->http];
    if (row->http_status < 200 || row->http_status >= 300)
        snprintf(row->error, sizeof(row->error), "http: status %ld", row->http_status);
    else if (strcmp(row->http_version, want) != 0)
        snprintf(row->error, sizeof(row->error), "http: negotiated HTTP/%s, requested HTTP/%s",
                 row->http_version, want);
    else if (o->proto != PROTO_QUIC &&
             strcmp(row->tls_version, o->proto == PROTO_TLS12 ? "TLSv1.2" : "TLSv1.3") != 0)
        snprintf(row->error, sizeof(row->error), "tls: negotiated '%s', requested %s",
                 row->tls_version, perf_proto_name(o->proto));
}

struct curl_slist *perf_curl_resolve(const struct perf_opts *o)
{
    struct curl_slist *l = NULL;
    for (int i = 0; i < o->n_resolve; i++) {
        struct curl_slist *n = curl_slist_append(l, o->resolve[i]);
        if (!n)
            break;
        l = n;
    }
    return l;
}

int perf_curl_prepare(struct perf_xfer *x, struct curl_slist *resolve, CURLSH *share,
                      char *errbuf)
{
    snprintf(x->row->library, sizeof(x->row->library), "%s", curl_version());
    if (set_opts(x->easy, x->o, resolve, share) < 0) {
        snprintf(x->row->error, sizeof(x->row->error), "url: cannot set URL (curl %d)",
                 (int)CURLE_URL_MALFORMAT);
        return -1;
    }
    if (perf_sink_open(&x->sink, x->o, x->row) < 0)
        return -1;
    set_callbacks(x->easy, x, errbuf);
    return 0;
}

void perf_curl_start(struct perf_xfer *x)
{
    x->cpu_start = perf_now_thread_cpu();
    x->t_before = perf_now_realtime();  /* see perf_row_timings */
}

void perf_curl_finish(struct perf_xfer *x, CURLcode rc, const char *errbuf)
{
    read_info(x, x->t_before);
    if (rc != CURLE_OK)
        set_error(x->row, rc, errbuf);
    else
        check_negotiated(x->o, x->row);
    perf_sink_close(&x->sink, x->row);
}

static int curl_fetch(const struct perf_opts *o, void *state, struct perf_row *row)
{
    struct curl_state *st = state;
    struct perf_xfer x = {.o = o, .row = row, .easy = st->easy};
    char errbuf[CURL_ERROR_SIZE] = "";
    /* per call: the warm-up (warmup.c) points the name elsewhere than the measurements */
    struct curl_slist *resolve = perf_curl_resolve(o);

    if (perf_curl_prepare(&x, resolve, st->share, errbuf) == 0) {
        perf_curl_start(&x);
        CURLcode rc = curl_easy_perform(x.easy);
        perf_curl_finish(&x, rc, errbuf);
    } else {
        perf_sink_close(&x.sink, row);
    }
    curl_easy_setopt(x.easy, CURLOPT_RESOLVE, NULL);
    curl_slist_free_all(resolve);
    return row->error[0] ? -1 : 0;
}

static void curl_teardown(void *state)
{
    struct curl_state *st = state;
    if (!st)
        return;
    curl_easy_cleanup(st->easy);
    curl_share_cleanup(st->share);
    free(st);
}

/* --resume: the measured connections resume the session of a warm-up connection made here.
 * The warm-up row is not printed; its failure is reported on stderr. */
static int curl_setup(const struct perf_opts *o, void **state)
{
    *state = NULL;
    if (o->cc && o->proto == PROTO_QUIC) {
        fprintf(stderr, "%s: libcurl's QUIC (OpenSSL) has no congestion control choice; "
                        "use --backend ngtcp2\n", o->tool);
        return -2;
    }
    struct curl_state *st = calloc(1, sizeof(*st));
    if (!st)
        return -1;
    *state = st;
    if (!(st->easy = curl_easy_init()) || (o->resume && !(st->share = curl_share_init()))) {
        curl_teardown(st);
        *state = NULL;
        return -1;
    }
    if (!o->resume)
        return 0;
    curl_share_setopt(st->share, CURLSHOPT_SHARE, CURL_LOCK_DATA_SSL_SESSION);
    struct perf_opts warm = *o;
    warm.cpu = 0;
    warm.output_body = NULL;
    struct perf_row row;
    perf_row_init(&row, -1);
    if (curl_fetch(&warm, st, &row) < 0)
        fprintf(stderr, "%s: warm-up connection failed: %s\n", o->tool, row.error);
    perf_row_free(&row);
    return 0;
}

const struct perf_backend perf_backend_libcurl = {
    .name = "libcurl",
    .setup = curl_setup,
    .fetch = curl_fetch,
    .teardown = curl_teardown,
};
