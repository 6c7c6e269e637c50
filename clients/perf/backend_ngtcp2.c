/* Native QUIC backend: ngtcp2 + nghttp3 + GnuTLS (the crypto helper Debian trixie ships).
 * Like the paper's lsquic tool, it takes its timestamps in library callbacks:
 *   t_handshake  = ngtcp2 handshake_completed (client has sent its Finished),
 *   t_first_byte = first request-stream byte handed to the application by ngtcp2,
 *   t_done       = nghttp3 end_stream of the response;
 * t_start is taken right before the connection's QUIC/TLS objects are created, so their set-up
 * counts as connection time, as it does in the libcurl backend; the trust anchors and
 * priorities are made once per process (libcurl caches its CA store too). One connection,
 * one GET; with --resume, a warm-up connection's session ticket and transport parameters are
 * reused and the request is sent as 0-RTT early data. */
#define _POSIX_C_SOURCE 200809L
#include <arpa/inet.h>
#include <curl/curl.h>
#include <errno.h>
#include <gnutls/crypto.h>
#include <gnutls/gnutls.h>
#include <math.h>
#include <netdb.h>
#include <nghttp3/nghttp3.h>
#include <ngtcp2/ngtcp2.h>
#include <ngtcp2/ngtcp2_crypto.h>
#include <ngtcp2/ngtcp2_crypto_gnutls.h>
#include <poll.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "perf.h"

#define NQ_MAX_UDP 1452
#define NQ_PRIORITY                                                                       \
    "NORMAL:-VERS-ALL:+VERS-TLS1.3:-CIPHER-ALL:+AES-128-GCM:+AES-256-GCM:"                \
    "+CHACHA20-POLY1305:+AES-128-CCM:%DISABLE_TLS13_COMPAT_MODE:-GROUP-ALL"

/* --groups (OpenSSL's names) as GnuTLS priority items. */
static const struct { const char *openssl, *gnutls; } GROUP_NAMES[] = {
    {"X25519", "GROUP-X25519"},       {"X448", "GROUP-X448"},
    {"secp256r1", "GROUP-SECP256R1"}, {"prime256v1", "GROUP-SECP256R1"},
    {"P-256", "GROUP-SECP256R1"},     {"secp384r1", "GROUP-SECP384R1"},
    {"P-384", "GROUP-SECP384R1"},     {"secp521r1", "GROUP-SECP521R1"},
    {"P-521", "GROUP-SECP521R1"},     {"X25519MLKEM768", "GROUP-X25519-MLKEM768"},
};

/* What outlives one connection, as an lsquic engine's SSL_CTX does in the paper's tool: the
 * trust anchors and the priorities, made once; with --resume, what the warm-up connection
 * leaves behind. */
struct ng_state {
    gnutls_certificate_credentials_t cred;  /* NULL: the trust anchors could not be loaded */
    gnutls_priority_t priority;             /* NULL: --groups names a group GnuTLS lacks */
    gnutls_datum_t ticket;        /* gnutls_session_get_data2() after NewSessionTicket */
    uint8_t tp[256];              /* server transport parameters remembered for 0-RTT */
    size_t tplen;
};

struct nq {
    const struct perf_opts *o;
    struct ng_state *st;
    struct perf_row *row;
    struct perf_sink sink;
    char host[256], port[8], authority[300], path[2048];
    int fd;
    struct sockaddr_storage local, remote;
    socklen_t locallen, remotelen;
    gnutls_session_t tls;
    ngtcp2_conn *conn;
    ngtcp2_crypto_conn_ref ref;
    nghttp3_conn *h3;
    int64_t req;
    double t_handshake, t_first, t_done;
    double cpu_start, cpu_handshake;  /* the thread's CPU time at t_start and handshake done */
    int done;
    int closed;                   /* the server closed the connection */
    size_t early_bytes;           /* stream bytes sent before the handshake completed */
    const struct perf_quic_hooks *hooks;  /* video_download: every response goes there */
    double t_before;
    FILE *qlog;                   /* --qlog: ngtcp2's qlog callback appends here */
};

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * NGTCP2_SECONDS + (uint64_t)ts.tv_nsec;
}

/* Records the first error only: later ones are usually consequences of it. */
static int fail(struct nq *q, const char *fmt, ...)
{
    if (!q->row->error[0]) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(q->row->error, sizeof(q->row->error), fmt, ap);
        va_end(ap);
    }
    return -1;
}

/* ---- nghttp3 callbacks ---- */

static void extend_flow(struct nq *q, int64_t sid, size_t n)
{
    ngtcp2_conn_extend_max_stream_offset(q->conn, sid, n);
    ngtcp2_conn_extend_max_offset(q->conn, n);
}

static int h3_recv_data(nghttp3_conn *c, int64_t sid, const uint8_t *data, size_t len,
                        void *ud, void *sud)
{
    struct nq *q = ud;
    (void)c; (void)sud;
    if (q->hooks ? q->hooks->data(q->hooks->ud, sid, data, len) < 0
                 : perf_sink_write(&q->sink, q->row, data, len) < 0)
        return fail(q, "output: write failed"), NGHTTP3_ERR_CALLBACK_FAILURE;
    extend_flow(q, sid, len);  /* DATA payload is not part of read_stream's consumed count */
    return 0;
}

static int h3_deferred_consume(nghttp3_conn *c, int64_t sid, size_t n, void *ud, void *sud)
{
    (void)c; (void)sud;
    extend_flow(ud, sid, n);
    return 0;
}

static int h3_recv_header(nghttp3_conn *c, int64_t sid, int32_t token, nghttp3_rcbuf *name,
                          nghttp3_rcbuf *value, uint8_t flags, void *ud, void *sud)
{
    struct nq *q = ud;
    (void)c; (void)name; (void)flags; (void)sud;
    if (token != NGHTTP3_QPACK_TOKEN__STATUS)
        return 0;
    nghttp3_vec v = nghttp3_rcbuf_get_buf(value);
    char s[8] = "";
    memcpy(s, v.base, v.len < 7 ? v.len : 7);
    if (sid == q->req)
        q->row->http_status = strtol(s, NULL, 10);
    if (q->hooks)
        q->hooks->status(q->hooks->ud, sid, strtol(s, NULL, 10));
    return 0;
}

static int h3_end_stream(nghttp3_conn *c, int64_t sid, void *ud, void *sud)
{
    struct nq *q = ud;
    (void)c; (void)sud;
    if (sid == q->req) {
        q->t_done = perf_now_realtime();
        q->done = 1;
    }
    if (q->hooks)
        q->hooks->end(q->hooks->ud, sid);
    return 0;
}

static int h3_stop_sending(nghttp3_conn *c, int64_t sid, uint64_t code, void *ud, void *sud)
{
    struct nq *q = ud;
    (void)c; (void)sud;
    ngtcp2_conn_shutdown_stream_read(q->conn, 0, sid, code);
    return 0;
}

static int h3_reset_stream(nghttp3_conn *c, int64_t sid, uint64_t code, void *ud, void *sud)
{
    struct nq *q = ud;
    (void)c; (void)sud;
    ngtcp2_conn_shutdown_stream_write(q->conn, 0, sid, code);
    return 0;
}

/* A GET of path on a new request stream. */
static int submit_get(struct nq *q, const char *path, int64_t *sid)
{
#define NV(n, v) {(uint8_t *)(n), (uint8_t *)(v), strlen(n), strlen(v), NGHTTP3_NV_FLAG_NONE}
    const nghttp3_nv nva[] = {NV(":method", "GET"), NV(":scheme", "https"),
                              NV(":authority", q->authority), NV(":path", path),
                              NV("user-agent", "quicbed-perf/" PERF_TOOL_VERSION)};
#undef NV
    if (ngtcp2_conn_open_bidi_stream(q->conn, sid, NULL) != 0)
        return fail(q, "quic: cannot open request stream");
    if (nghttp3_conn_submit_request(q->h3, *sid, nva, sizeof(nva) / sizeof(nva[0]), NULL,
                                    NULL) != 0)
        return fail(q, "quic: cannot submit request");
    return 0;
}

static int submit_request(struct nq *q)
{
    return submit_get(q, q->path, &q->req);
}

/* HTTP/3 needs the handshake's transport parameters (stream limits), so it starts here. */
static int setup_h3(struct nq *q)
{
    nghttp3_callbacks cb = {.recv_data = h3_recv_data, .deferred_consume = h3_deferred_consume,
                            .recv_header = h3_recv_header, .end_stream = h3_end_stream,
                            .stop_sending = h3_stop_sending,
                            .reset_stream = h3_reset_stream};
    nghttp3_settings s;
    int64_t ctrl, enc, dec;
    nghttp3_settings_default(&s);
    if (nghttp3_conn_client_new(&q->h3, &cb, &s, nghttp3_mem_default(), q) != 0)
        return fail(q, "quic: nghttp3_conn_client_new failed");
    if (ngtcp2_conn_open_uni_stream(q->conn, &ctrl, NULL) != 0 ||
        ngtcp2_conn_open_uni_stream(q->conn, &enc, NULL) != 0 ||
        ngtcp2_conn_open_uni_stream(q->conn, &dec, NULL) != 0)
        return fail(q, "quic: server allows too few unidirectional streams");
    if (nghttp3_conn_bind_control_stream(q->h3, ctrl) != 0 ||
        nghttp3_conn_bind_qpack_streams(q->h3, enc, dec) != 0)
        return fail(q, "quic: cannot bind HTTP/3 streams");
    return submit_request(q);
}

/* ---- ngtcp2 callbacks ---- */

static int on_handshake_completed(ngtcp2_conn *c, void *ud)
{
    struct nq *q = ud;
    (void)c;
    q->t_handshake = perf_now_realtime();
    q->cpu_handshake = perf_now_thread_cpu();
    if (q->h3)
        return 0;  /* set up before the handshake for 0-RTT */
    return setup_h3(q) == 0 ? 0 : NGTCP2_ERR_CALLBACK_FAILURE;
}

/* The server refused 0-RTT: the streams opened for it are void, HTTP/3 starts again once the
 * handshake completes. */
static int on_early_data_rejected(ngtcp2_conn *c, void *ud)
{
    struct nq *q = ud;
    (void)c;
    nghttp3_conn_del(q->h3);
    q->h3 = NULL;
    q->req = -1;
    q->early_bytes = 0;
    return 0;
}

static int on_recv_stream_data(ngtcp2_conn *c, uint32_t flags, int64_t sid, uint64_t off,
                               const uint8_t *data, size_t len, void *ud, void *sud)
{
    struct nq *q = ud;
    (void)off; (void)sud;
    if (sid == q->req && len > 0 && isnan(q->t_first))
        q->t_first = perf_now_realtime();
    if (!q->h3)
        return NGTCP2_ERR_CALLBACK_FAILURE;  /* stream data before the handshake: protocol bug */
    nghttp3_ssize n = nghttp3_conn_read_stream(q->h3, sid, data, len,
                                               flags & NGTCP2_STREAM_DATA_FLAG_FIN);
    if (n < 0) {
        fail(q, "quic: HTTP/3 error: %s", nghttp3_strerror((int)n));
        return NGTCP2_ERR_CALLBACK_FAILURE;
    }
    ngtcp2_conn_extend_max_stream_offset(c, sid, (uint64_t)n);
    ngtcp2_conn_extend_max_offset(c, (uint64_t)n);
    return 0;
}

static int on_acked_stream_data_offset(ngtcp2_conn *c, int64_t sid, uint64_t off,
                                       uint64_t len, void *ud, void *sud)
{
    struct nq *q = ud;
    (void)c; (void)off; (void)sud;
    return q->h3 && nghttp3_conn_add_ack_offset(q->h3, sid, len) != 0
               ? NGTCP2_ERR_CALLBACK_FAILURE : 0;
}

static int on_stream_close(ngtcp2_conn *c, uint32_t flags, int64_t sid, uint64_t code,
                           void *ud, void *sud)
{
    struct nq *q = ud;
    (void)c; (void)sud;
    if (!(flags & NGTCP2_STREAM_CLOSE_FLAG_APP_ERROR_CODE_SET))
        code = NGHTTP3_H3_NO_ERROR;
    int rv = q->h3 ? nghttp3_conn_close_stream(q->h3, sid, code) : 0;
    return rv != 0 && rv != NGHTTP3_ERR_STREAM_NOT_FOUND ? NGTCP2_ERR_CALLBACK_FAILURE : 0;
}

static int on_stream_reset(ngtcp2_conn *c, int64_t sid, uint64_t size, uint64_t code,
                           void *ud, void *sud)
{
    struct nq *q = ud;
    (void)c; (void)size; (void)code; (void)sud;
    return q->h3 && nghttp3_conn_shutdown_stream_read(q->h3, sid) != 0
               ? NGTCP2_ERR_CALLBACK_FAILURE : 0;
}

static int on_stream_stop_sending(ngtcp2_conn *c, int64_t sid, uint64_t code, void *ud,
                                  void *sud)
{
    return on_stream_reset(c, sid, 0, code, ud, sud);
}

static int on_extend_max_stream_data(ngtcp2_conn *c, int64_t sid, uint64_t max, void *ud,
                                     void *sud)
{
    struct nq *q = ud;
    (void)c; (void)max; (void)sud;
    return q->h3 && nghttp3_conn_unblock_stream(q->h3, sid) != 0
               ? NGTCP2_ERR_CALLBACK_FAILURE : 0;
}

static void on_rand(uint8_t *dest, size_t len, const ngtcp2_rand_ctx *ctx)
{
    (void)ctx;
    gnutls_rnd(GNUTLS_RND_RANDOM, dest, len);
}

static int on_new_cid(ngtcp2_conn *c, ngtcp2_cid *cid, uint8_t *token, size_t len, void *ud)
{
    (void)c; (void)ud;
    if (gnutls_rnd(GNUTLS_RND_RANDOM, cid->data, len) != 0 ||
        gnutls_rnd(GNUTLS_RND_RANDOM, token, NGTCP2_STATELESS_RESET_TOKENLEN) != 0)
        return NGTCP2_ERR_CALLBACK_FAILURE;
    cid->datalen = len;
    return 0;
}

static ngtcp2_conn *get_conn(ngtcp2_crypto_conn_ref *ref)
{
    return ((struct nq *)ref->user_data)->conn;
}

/* ---- set-up ---- */

static int parse_url(struct nq *q)
{
    CURLU *u = curl_url();
    char *scheme = NULL, *host = NULL, *port = NULL, *path = NULL, *query = NULL;
    int rc = -1;
    if (u && curl_url_set(u, CURLUPART_URL, q->o->url, 0) == CURLUE_OK &&
        curl_url_get(u, CURLUPART_SCHEME, &scheme, 0) == CURLUE_OK &&
        curl_url_get(u, CURLUPART_HOST, &host, 0) == CURLUE_OK &&
        curl_url_get(u, CURLUPART_PORT, &port, CURLU_DEFAULT_PORT) == CURLUE_OK &&
        curl_url_get(u, CURLUPART_PATH, &path, 0) == CURLUE_OK && strcmp(scheme, "https") == 0) {
        curl_url_get(u, CURLUPART_QUERY, &query, 0);
        snprintf(q->host, sizeof(q->host), "%s", host);
        snprintf(q->port, sizeof(q->port), "%s", port);
        snprintf(q->authority, sizeof(q->authority), "%s:%s", host, port);
        snprintf(q->path, sizeof(q->path), "%s%s%s", path, query ? "?" : "", query ? query : "");
        rc = 0;
    }
    curl_free(scheme); curl_free(host); curl_free(port); curl_free(path); curl_free(query);
    curl_url_cleanup(u);
    return rc < 0 ? fail(q, "url: cannot parse an https URL") : 0;
}

/* The address: from --resolve NAME:PORT:ADDR if one matches, else the system resolver
 * (outside the timings either way: name resolution is excluded, as in the paper). */
static int resolve(struct nq *q, struct addrinfo **res)
{
    const char *addr = q->host;
    char buf[128];
    size_t hl = strlen(q->host), pl = strlen(q->port);
    for (int i = 0; i < q->o->n_resolve; i++) {
        const char *r = q->o->resolve[i];
        if (strncasecmp(r, q->host, hl) == 0 && r[hl] == ':' &&
            strncmp(r + hl + 1, q->port, pl) == 0 && r[hl + 1 + pl] == ':') {
            const char *a = r + hl + pl + 2;
            size_t n = strlen(a);
            if (a[0] == '[' && n > 1 && a[n - 1] == ']') {  /* [v6], as curl accepts it */
                a++;
                n -= 2;
            }
            snprintf(buf, sizeof(buf), "%.*s", (int)n, a);
            addr = buf;
        }
    }
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_DGRAM};
    int rc = getaddrinfo(addr, q->port, &hints, res);
    return rc != 0 ? fail(q, "resolve: %s: %s", addr, gai_strerror(rc)) : 0;
}

static void set_endpoint(const struct sockaddr_storage *ss, char *ip, size_t iplen, long *port)
{
    const void *a = ss->ss_family == AF_INET6
                        ? (const void *)&((const struct sockaddr_in6 *)ss)->sin6_addr
                        : (const void *)&((const struct sockaddr_in *)ss)->sin_addr;
    inet_ntop(ss->ss_family, a, ip, (socklen_t)iplen);
    *port = ntohs(ss->ss_family == AF_INET6 ? ((const struct sockaddr_in6 *)ss)->sin6_port
                                             : ((const struct sockaddr_in *)ss)->sin_port);
}

/* A connected UDP socket: the kernel then reports ICMP errors (refused, unreachable). */
static int open_socket(struct nq *q)
{
    struct addrinfo *ai = NULL;
    if (resolve(q, &ai) < 0)
        return -1;
    q->fd = socket(ai->ai_family, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    int ok = q->fd >= 0 && connect(q->fd, ai->ai_addr, ai->ai_addrlen) == 0;
    if (ok) {
        memcpy(&q->remote, ai->ai_addr, ai->ai_addrlen);
        q->remotelen = ai->ai_addrlen;
        q->locallen = sizeof(q->local);
        getsockname(q->fd, (struct sockaddr *)&q->local, &q->locallen);
        set_endpoint(&q->remote, q->row->remote_ip, sizeof(q->row->remote_ip),
                     &q->row->remote_port);
        set_endpoint(&q->local, q->row->local_ip, sizeof(q->row->local_ip),
                     &q->row->local_port);
    }
    freeaddrinfo(ai);
    return ok ? 0 : fail(q, "connect: %s", strerror(errno));
}

/* NewSessionTicket arrived (after the handshake): keep it with the transport parameters. */
static int on_ticket(gnutls_session_t tls, unsigned int htype, unsigned int when,
                     unsigned int incoming, const gnutls_datum_t *msg)
{
    ngtcp2_crypto_conn_ref *ref = gnutls_session_get_ptr(tls);
    struct nq *q = ref->user_data;
    (void)htype; (void)when; (void)msg;
    if (!incoming || !q->o->resume)
        return 0;
    gnutls_free(q->st->ticket.data);
    q->st->ticket.data = NULL;
    q->st->ticket.size = 0;
    if (gnutls_session_get_data2(tls, &q->st->ticket) != 0)
        q->st->ticket.size = 0;
    ngtcp2_ssize n = ngtcp2_conn_encode_0rtt_transport_params(q->conn, q->st->tp,
                                                              sizeof(q->st->tp));
    q->st->tplen = n > 0 ? (size_t)n : 0;
    return 0;
}

static void setup_resumption(struct nq *q)
{
    if (!q->o->resume)
        return;
    gnutls_handshake_set_hook_function(q->tls, GNUTLS_HANDSHAKE_NEW_SESSION_TICKET,
                                       GNUTLS_HOOK_POST, on_ticket);
    if (q->st->ticket.size)
        gnutls_session_set_data(q->tls, q->st->ticket.data, q->st->ticket.size);
}

/* NQ_PRIORITY with the groups of --groups appended, in order; -1 for a name not known. */
static int group_priority(const char *groups, char *out, size_t size)
{
    size_t len = (size_t)snprintf(out, size, "%s", NQ_PRIORITY);
    char list[256];
    snprintf(list, sizeof(list), "%s", groups);
    for (char *save = NULL, *name = strtok_r(list, ":", &save); name;
         name = strtok_r(NULL, ":", &save)) {
        const char *item = NULL;
        for (size_t i = 0; i < sizeof(GROUP_NAMES) / sizeof(GROUP_NAMES[0]); i++)
            if (strcmp(GROUP_NAMES[i].openssl, name) == 0)
                item = GROUP_NAMES[i].gnutls;
        if (!item || len >= size)
            return -1;
        len += (size_t)snprintf(out + len, size - len, ":+%s", item);
    }
    return len < size ? 0 : -1;
}

static int setup_tls(struct nq *q)
{
    const gnutls_datum_t alpn = {(unsigned char *)"h3", 2};
    if (!q->st->priority)
        return fail(q, "tls: --groups '%.100s' names a group this backend does not know",
                    q->o->groups);
    if (!q->st->cred)
        return fail(q, "tls: cannot load the trust anchors (CA file?)");
    /* GNUTLS_KEY_SHARE_TOP: one key share, for the first group, as OpenSSL sends (libcurl,
     * tls_perf); GnuTLS's default would also generate one for the next group of another type */
    unsigned int flags = GNUTLS_CLIENT | GNUTLS_NO_END_OF_EARLY_DATA | GNUTLS_KEY_SHARE_TOP |
                         (q->o->resume ? GNUTLS_ENABLE_EARLY_DATA : 0);
    int ok = gnutls_init(&q->tls, flags) == 0 &&
             gnutls_priority_set(q->tls, q->st->priority) == 0 &&
             ngtcp2_crypto_gnutls_configure_client_session(q->tls) == 0 &&
             gnutls_credentials_set(q->tls, GNUTLS_CRD_CERTIFICATE, q->st->cred) == 0 &&
             gnutls_alpn_set_protocols(q->tls, &alpn, 1, GNUTLS_ALPN_MANDATORY) == 0;
    if (!ok)
        return fail(q, "tls: GnuTLS set-up failed");
    struct in6_addr ip;
    if (inet_pton(AF_INET, q->host, &ip) != 1 && inet_pton(AF_INET6, q->host, &ip) != 1)
        gnutls_server_name_set(q->tls, GNUTLS_NAME_DNS, q->host, strlen(q->host));
    if (!q->o->insecure)
        gnutls_session_set_verify_cert(q->tls, q->host, 0);
    q->ref.get_conn = get_conn;
    q->ref.user_data = q;
    gnutls_session_set_ptr(q->tls, &q->ref);
    setup_resumption(q);
    return 0;
}

static const ngtcp2_callbacks nq_callbacks = {
    .client_initial = ngtcp2_crypto_client_initial_cb,
    .recv_crypto_data = ngtcp2_crypto_recv_crypto_data_cb,
    .encrypt = ngtcp2_crypto_encrypt_cb,
    .decrypt = ngtcp2_crypto_decrypt_cb,
    .hp_mask = ngtcp2_crypto_hp_mask_cb,
    .recv_retry = ngtcp2_crypto_recv_retry_cb,
    .update_key = ngtcp2_crypto_update_key_cb,
    .delete_crypto_aead_ctx = ngtcp2_crypto_delete_crypto_aead_ctx_cb,
    .delete_crypto_cipher_ctx = ngtcp2_crypto_delete_crypto_cipher_ctx_cb,
    .get_path_challenge_data = ngtcp2_crypto_get_path_challenge_data_cb,
    .version_negotiation = ngtcp2_crypto_version_negotiation_cb,
    .handshake_completed = on_handshake_completed,
    .recv_stream_data = on_recv_stream_data,
    .acked_stream_data_offset = on_acked_stream_data_offset,
    .stream_close = on_stream_close,
    .stream_reset = on_stream_reset,
    .stream_stop_sending = on_stream_stop_sending,
    .extend_max_stream_data = on_extend_max_stream_data,
    .rand = on_rand,
    .get_new_connection_id = on_new_cid,
    .tls_early_data_rejected = on_early_data_rejected,
};

static ngtcp2_path conn_path(struct nq *q)
{
    ngtcp2_path p = {{(ngtcp2_sockaddr *)&q->local, q->locallen},
                     {(ngtcp2_sockaddr *)&q->remote, q->remotelen}, NULL};
    return p;
}

/* ngtcp2 hands over its qlog (JSON-SEQ records) in pieces; FIN ends the connection's. */
static void on_qlog_write(void *ud, uint32_t flags, const void *data, size_t len)
{
    struct nq *q = ud;
    fwrite(data, 1, len, q->qlog);
    if (flags & NGTCP2_QLOG_WRITE_FLAG_FIN)
        fflush(q->qlog);
}

static ngtcp2_cc_algo cc_algo(const char *name)
{
    if (name && strcmp(name, "reno") == 0)
        return NGTCP2_CC_ALGO_RENO;
    if (name && strcmp(name, "bbr") == 0)
        return NGTCP2_CC_ALGO_BBR;
    return NGTCP2_CC_ALGO_CUBIC;  /* ngtcp2's default */
}

static int setup_conn(struct nq *q)
{
    ngtcp2_cid dcid = {.datalen = 18}, scid = {.datalen = 17};
    ngtcp2_settings s;
    ngtcp2_transport_params p;
    ngtcp2_path path = conn_path(q);
    gnutls_rnd(GNUTLS_RND_RANDOM, dcid.data, dcid.datalen);
    gnutls_rnd(GNUTLS_RND_RANDOM, scid.data, scid.datalen);
    ngtcp2_settings_default(&s);
    s.initial_ts = now_ns();
    s.max_window = 24u << 20;         /* flow-control auto-tuning may grow windows to these */
    s.max_stream_window = 16u << 20;
    s.cc_algo = cc_algo(q->o->cc);
    if (q->qlog)
        s.qlog_write = on_qlog_write;
    ngtcp2_transport_params_default(&p);
    p.initial_max_streams_uni = 3;
    p.initial_max_stream_data_bidi_local = 1u << 20;
    p.initial_max_stream_data_uni = 256u << 10;
    p.initial_max_data = 4u << 20;
    p.max_idle_timeout = 30 * NGTCP2_SECONDS;
    if (ngtcp2_conn_client_new(&q->conn, &dcid, &scid, &path, NGTCP2_PROTO_VER_V1,
                               &nq_callbacks, &s, &p, NULL, q) != 0)
        return fail(q, "quic: ngtcp2_conn_client_new failed");
    ngtcp2_conn_set_tls_native_handle(q->conn, q->tls);
    /* resuming: the request goes out as 0-RTT, under the remembered transport parameters */
    if (q->o->resume && q->st->ticket.size && q->st->tplen &&
        ngtcp2_conn_decode_and_set_0rtt_transport_params(q->conn, q->st->tp, q->st->tplen) == 0)
        return setup_h3(q);
    return 0;
}

/* ---- I/O ---- */

static int send_packet(struct nq *q, const uint8_t *buf, size_t len)
{
    if (send(q->fd, buf, len, 0) >= 0 || errno == EAGAIN || errno == EWOULDBLOCK)
        return 0;  /* a full socket buffer is a loss, which QUIC recovers from */
    return fail(q, "connect: %s", strerror(errno));
}

/* Stream bytes ngtcp2 took into a packet; counted as early data before the handshake ends. */
static void stream_written(struct nq *q, int64_t sid, ngtcp2_ssize datalen)
{
    if (datalen < 0 || sid < 0)
        return;
    nghttp3_conn_add_write_offset(q->h3, sid, (size_t)datalen);
    if (!ngtcp2_conn_get_handshake_completed(q->conn))
        q->early_bytes += (size_t)datalen;
}

/* The "try again" results of ngtcp2_conn_writev_stream: 1 = loop on, -1 = a real error. */
static int write_retry(struct nq *q, ngtcp2_ssize n, int64_t sid, ngtcp2_ssize datalen)
{
    switch (n) {
    case NGTCP2_ERR_WRITE_MORE: stream_written(q, sid, datalen); return 1;
    case NGTCP2_ERR_STREAM_DATA_BLOCKED: nghttp3_conn_block_stream(q->h3, sid); return 1;
    case NGTCP2_ERR_STREAM_SHUT_WR: nghttp3_conn_shutdown_stream_write(q->h3, sid); return 1;
    default: return fail(q, "quic: %s", ngtcp2_strerror((int)n));
    }
}

/* Writes every packet ngtcp2 has ready, feeding it HTTP/3 stream data from nghttp3. */
static int write_packets(struct nq *q)
{
    uint8_t buf[NQ_MAX_UDP];
    ngtcp2_path_storage ps;
    ngtcp2_pkt_info pi;
    uint64_t ts = now_ns();
    ngtcp2_path_storage_zero(&ps);
    for (;;) {
        int64_t sid = -1;
        int fin = 0;
        nghttp3_vec vec[16];
        nghttp3_ssize nvec = 0;
        if (q->h3 && ngtcp2_conn_get_max_data_left(q->conn)) {
            nvec = nghttp3_conn_writev_stream(q->h3, &sid, &fin, vec, 16);
            if (nvec < 0)
                return fail(q, "quic: HTTP/3 error: %s", nghttp3_strerror((int)nvec));
        }
        ngtcp2_ssize datalen = -1;
        uint32_t flags = NGTCP2_WRITE_STREAM_FLAG_MORE | (fin ? NGTCP2_WRITE_STREAM_FLAG_FIN : 0);
        ngtcp2_ssize n = ngtcp2_conn_writev_stream(q->conn, &ps.path, &pi, buf, sizeof(buf),
                                                   &datalen, flags, sid,
                                                   (const ngtcp2_vec *)vec, (size_t)nvec, ts);
        if (n < 0) {
            if (write_retry(q, n, sid, datalen) < 0)
                return -1;
            continue;
        }
        stream_written(q, sid, datalen);
        if (n == 0)
            break;  /* nothing more to send now (or pacing says wait) */
        if (send_packet(q, buf, (size_t)n) < 0)
            return -1;
    }
    ngtcp2_conn_update_pkt_tx_time(q->conn, ts);
    return 0;
}

static int read_error(struct nq *q, int rv)
{
    if (rv == NGTCP2_ERR_CRYPTO) {
        unsigned int st = gnutls_session_get_verify_cert_status(q->tls);
        gnutls_datum_t msg = {NULL, 0};
        if (st && gnutls_certificate_verification_status_print(st, GNUTLS_CRT_X509, &msg, 0) == 0) {
            size_t n = strlen((char *)msg.data);
            while (n > 0 && msg.data[n - 1] == ' ')  /* GnuTLS ends its sentences with a blank */
                msg.data[--n] = '\0';
            fail(q, "tls: certificate verify failed: %.180s", (char *)msg.data);
            gnutls_free(msg.data);
            return -1;
        }
        return fail(q, "tls: handshake failed (alert %u)", ngtcp2_conn_get_tls_alert(q->conn));
    }
    if (rv == NGTCP2_ERR_DRAINING || rv == NGTCP2_ERR_CLOSING) {
        q->closed = 1;
        return q->done ? 0 : fail(q, "quic: connection closed by server");
    }
    return fail(q, "quic: %s", ngtcp2_strerror(rv));
}

static int read_packets(struct nq *q)
{
    uint8_t buf[65536];
    ngtcp2_path path = conn_path(q);
    for (;;) {
        ssize_t n = recv(q->fd, buf, sizeof(buf), 0);
        if (n < 0)
            return errno == EAGAIN || errno == EWOULDBLOCK ? 0
                                                           : fail(q, "connect: %s", strerror(errno));
        ngtcp2_pkt_info pi = {0};
        int rv = ngtcp2_conn_read_pkt(q->conn, &path, &pi, buf, (size_t)n, now_ns());
        if (rv != 0)
            return read_error(q, rv);
    }
}

static int poll_timeout_ms(struct nq *q, uint64_t deadline)
{
    uint64_t now = now_ns(), exp = ngtcp2_conn_get_expiry(q->conn);
    uint64_t until = exp < deadline ? exp : deadline;
    return until <= now ? 0 : (int)((until - now + 999999) / 1000000);
}

/* One round: send what is ready, wait for a packet or a timer (at most until `until`), read,
 * handle the timer. */
static int step(struct nq *q, uint64_t until)
{
    if (write_packets(q) < 0)
        return -1;
    struct pollfd p = {q->fd, POLLIN, 0};
    if (poll(&p, 1, poll_timeout_ms(q, until)) > 0 && read_packets(q) < 0)
        return -1;
    uint64_t now = now_ns();
    if (now >= ngtcp2_conn_get_expiry(q->conn)) {
        int rv = ngtcp2_conn_handle_expiry(q->conn, now);
        if (rv != 0)
            return fail(q, rv == NGTCP2_ERR_IDLE_CLOSE ? "timeout: QUIC idle timeout"
                                                       : "quic: %s", ngtcp2_strerror(rv));
    }
    return 0;
}

static int run_loop(struct nq *q, uint64_t deadline)
{
    while (!q->done) {
        if (step(q, deadline) < 0)
            return -1;
        if (now_ns() >= deadline && !q->done)
            return fail(q, "timeout: no complete response after %.3f s", q->o->timeout_s);
    }
    return 0;
}

/* A polite end: CONNECTION_CLOSE with H3_NO_ERROR (after t_done, so not timed). */
static void close_conn(struct nq *q)
{
    uint8_t buf[NQ_MAX_UDP];
    ngtcp2_path_storage ps;
    ngtcp2_pkt_info pi;
    ngtcp2_ccerr e;
    ngtcp2_path_storage_zero(&ps);
    ngtcp2_ccerr_set_application_error(&e, NGHTTP3_H3_NO_ERROR, NULL, 0);
    ngtcp2_ssize n = ngtcp2_conn_write_connection_close(q->conn, &ps.path, &pi, buf, sizeof(buf),
                                                        &e, now_ns());
    if (n > 0)
        send_packet(q, buf, (size_t)n);
}

static void read_tls_info(struct nq *q)
{
    if (isnan(q->t_handshake))
        return;
    const char *suite = gnutls_ciphersuite_get(q->tls);
    snprintf(q->row->tls_version, sizeof(q->row->tls_version), "%s",
             gnutls_protocol_get_version(q->tls) == GNUTLS_TLS1_3 ? "TLSv1.3" : "other");
    snprintf(q->row->cipher, sizeof(q->row->cipher), "%s", suite ? suite : "");
    perf_set_group(q->row, q->o->groups, gnutls_group_get_name(gnutls_group_get(q->tls)));
    q->row->resumed = gnutls_session_is_resumed(q->tls) ? 1 : 0;
    /* on a client GnuTLS sets this flag when the server accepted the early data */
    if (gnutls_session_get_flags(q->tls) & GNUTLS_SFLAGS_EARLY_DATA)
        q->row->early_data_bytes = (long long)q->early_bytes;
    snprintf(q->row->http_version, sizeof(q->row->http_version), "3");
}

static void cleanup(struct nq *q)
{
    nghttp3_conn_del(q->h3);
    ngtcp2_conn_del(q->conn);
    if (q->tls)
        gnutls_deinit(q->tls);
    if (q->fd >= 0)
        close(q->fd);
    if (q->qlog)
        fclose(q->qlog);
    perf_sink_close(&q->sink, q->row);
}

static void finish_row(struct nq *q, double t_before)
{
    double hs = q->t_handshake - t_before;
    read_tls_info(q);
    /* no transport handshake of its own in QUIC: connect = handshake; no DNS: lookup = 0 */
    perf_row_timings(q->row, t_before, 0.0, hs, hs, q->t_first - t_before,
                     q->t_done - t_before);
    if (!isnan(q->t_handshake))
        q->row->client_cpu_ms = (q->cpu_handshake - q->cpu_start) * 1e3;
    if (!q->row->error[0] && (q->row->http_status < 200 || q->row->http_status >= 300))
        fail(q, "http: status %ld", q->row->http_status);
}

/* Up to the first flight: the row's library, the socket, TLS and the ngtcp2 connection;
 * t_before stays NaN if the connection never started. */
static int start_conn(struct nq *q)
{
    q->t_handshake = q->t_first = q->t_done = q->t_before = NAN;
    snprintf(q->row->library, sizeof(q->row->library), "ngtcp2/%s nghttp3/%s GnuTLS/%s",
             ngtcp2_version(0)->version_str, nghttp3_version(0)->version_str,
             gnutls_check_version(NULL));
    if (perf_sink_open(&q->sink, q->o, q->row) != 0 || parse_url(q) != 0 || open_socket(q) != 0)
        return -1;
    /* appended: a --resume warm-up connection and the measured one share the file */
    if (q->o->qlog && !(q->qlog = fopen(q->o->qlog, "ab")))
        return fail(q, "qlog: cannot open %.200s", q->o->qlog);
    q->cpu_start = perf_now_thread_cpu();
    q->t_before = perf_now_realtime();
    return setup_tls(q) == 0 && setup_conn(q) == 0 ? 0 : -1;
}

/* The first request's row (if the connection started), then everything freed. */
static void end_conn(struct nq *q)
{
    if (!isnan(q->t_before))
        finish_row(q, q->t_before);
    cleanup(q);
}

static int ng_fetch(const struct perf_opts *o, void *state, struct perf_row *row)
{
    struct nq q = {.o = o, .st = state, .row = row, .fd = -1, .req = -1};
    if (start_conn(&q) == 0 &&
        run_loop(&q, now_ns() + (uint64_t)(o->timeout_s * 1e9)) == 0)
        close_conn(&q);
    end_conn(&q);
    return row->error[0] ? -1 : 0;
}

/* ---- video_download: more requests on the connection (perf.h) ---- */

struct nq *perf_quic_open(const struct perf_opts *o, void *state, struct perf_row *row,
                          const struct perf_quic_hooks *hooks)
{
    struct nq *q = calloc(1, sizeof(*q));
    if (!q)
        return NULL;
    *q = (struct nq){.o = o, .st = state, .row = row, .fd = -1, .req = -1, .hooks = hooks};
    start_conn(q);
    return q;
}

int64_t perf_quic_first(const struct nq *q)
{
    return q->done ? q->req : -1;
}

int perf_quic_get(struct nq *q, const char *url, int64_t *sid)
{
    CURLU *u = curl_url();
    char *path = NULL, *query = NULL, full[2048];
    int ok = u && curl_url_set(u, CURLUPART_URL, url, 0) == CURLUE_OK &&
             curl_url_get(u, CURLUPART_PATH, &path, 0) == CURLUE_OK;
    if (ok) {
        curl_url_get(u, CURLUPART_QUERY, &query, 0);
        ok = (size_t)snprintf(full, sizeof(full), "%s%s%s", path, query ? "?" : "",
                              query ? query : "") < sizeof(full);
    }
    curl_free(path); curl_free(query);
    curl_url_cleanup(u);
    if (!ok)
        return fail(q, "url: cannot parse %.100s", url);
    return submit_get(q, full, sid);
}

int perf_quic_step(struct nq *q, double until)
{
    if (q->row->error[0])
        return -1;
    if (q->closed)
        return fail(q, "quic: connection closed by server");
    double wait = until - perf_now_realtime();
    return step(q, now_ns() + (wait > 0 ? (uint64_t)(wait * 1e9) : 0));
}

void perf_quic_close(struct nq *q)
{
    if (!q)
        return;
    if (q->conn && !q->closed && !q->row->error[0])
        close_conn(q);
    end_conn(q);
    free(q);
}

static void ng_teardown(void *state)
{
    struct ng_state *st = state;
    if (!st)
        return;
    if (st->cred)
        gnutls_certificate_free_credentials(st->cred);
    if (st->priority)
        gnutls_priority_deinit(st->priority);
    gnutls_free(st->ticket.data);
    free(st);
}

/* The per-process TLS objects; what fails to load is left NULL and fails each row. */
static void load_tls_state(const struct perf_opts *o, struct ng_state *st)
{
    char priority[512];
    if (group_priority(o->groups, priority, sizeof(priority)) != 0 ||
        gnutls_priority_init(&st->priority, priority, NULL) != 0)
        st->priority = NULL;
    if (gnutls_certificate_allocate_credentials(&st->cred) != 0) {
        st->cred = NULL;
        return;
    }
    int loaded = o->cacert ? gnutls_certificate_set_x509_trust_file(st->cred, o->cacert,
                                                                     GNUTLS_X509_FMT_PEM) > 0
                           : gnutls_certificate_set_x509_system_trust(st->cred) >= 0;
    if (!loaded) {
        gnutls_certificate_free_credentials(st->cred);
        st->cred = NULL;
    }
}

/* Trust anchors and priorities are made here, before any connection, so that a connection's
 * time is its handshake; what cannot be made fails each row with a "tls:" error. With --resume,
 * a warm-up connection (not printed) collects a session ticket. */
static int ng_setup(const struct perf_opts *o, void **state)
{
    *state = NULL;
    if (o->cc && strcmp(o->cc, "cubic") && strcmp(o->cc, "reno") && strcmp(o->cc, "bbr")) {
        fprintf(stderr, "%s: backend ngtcp2: --cc cubic, reno or bbr\n", o->tool);
        return -2;
    }
    struct ng_state *st = calloc(1, sizeof(*st));
    if (!st)
        return -1;
    *state = st;
    load_tls_state(o, st);
    if (!o->resume)
        return 0;
    struct perf_opts warm = *o;
    warm.output_body = NULL;
    struct perf_row row;
    perf_row_init(&row, -1);
    if (ng_fetch(&warm, st, &row) < 0)
        fprintf(stderr, "%s: warm-up connection failed: %s\n", o->tool, row.error);
    else if (!st->ticket.size)
        fprintf(stderr, "%s: warm-up connection got no session ticket\n", o->tool);
    perf_row_free(&row);
    return 0;
}

const struct perf_backend perf_backend_ngtcp2 = {
    .name = "ngtcp2",
    .setup = ng_setup,
    .fetch = ng_fetch,
    .teardown = ng_teardown,
};
