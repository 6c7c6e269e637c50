/* The warm-up before the first measurement (see perf_warm_up in perf.h).
 *
 * A fresh process pays for the libraries' first use inside its first connection: OpenSSL's
 * context and algorithm fetches, the trust anchors, the QUIC stack's tables. A long-lived
 * client (the paper's lsquic engine, a browser) has all of that ready before it connects, and
 * the runner starts one process per trial, so without this every row would carry it (about
 * 3 ms for libcurl's QUIC, 14 % of a 20 ms RTT). The warm-up is one connection attempt with
 * the measurement's own options (name, TLS version, groups, CA file) to a socket on the
 * client's loopback. Once the client's first flight has arrived there, that socket ends the
 * attempt at once (a TCP reset, or a QUIC Version Negotiation offering no version the client
 * speaks), so the warm-up costs the first flight, not a timeout; WARM_UP_TIMEOUT_S caps it
 * when nothing arrives. Nothing reaches the server or the emulated path, no session or token
 * is kept, and the measured connections stay fresh. --cold leaves it out. */
#define _POSIX_C_SOURCE 200809L
#include <arpa/inet.h>
#include <curl/curl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "perf.h"

/* Only when the first flight never arrives: long enough for it on a busy host. */
#define WARM_UP_TIMEOUT_S 0.2
/* A version no QUIC stack speaks (RFC 9000 reserves 0x?a?a?a?a for this). */
#define UNSPOKEN_VERSION 0x1a2a3a4aU

/* A loopback socket of the tool's transport that takes the client's first flight: a TCP
 * listener (the kernel completes the handshake) or a UDP socket. Returns the port, or -1. */
static int silent_socket(int quic, int *fd_out)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = 0};
    socklen_t len = sizeof(a);
    int fd = socket(AF_INET, quic ? SOCK_DGRAM : SOCK_STREAM, 0);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd < 0)
        return -1;
    if (bind(fd, (struct sockaddr *)&a, sizeof(a)) != 0 || (!quic && listen(fd, 1) != 0) ||
        getsockname(fd, (struct sockaddr *)&a, &len) != 0) {
        close(fd);
        return -1;
    }
    *fd_out = fd;
    return ntohs(a.sin_port);
}

/* An IP literal has no name to point elsewhere: the warm-up would go to the real server. */
static int is_ip_literal(const char *host)
{
    unsigned char buf[sizeof(struct in6_addr)];
    char bare[64];
    size_t n = strlen(host);
    if (n >= 2 && host[0] == '[' && host[n - 1] == ']' && n - 2 < sizeof(bare)) {
        memcpy(bare, host + 1, n - 2);
        bare[n - 2] = '\0';
        host = bare;
    }
    return inet_pton(AF_INET, host, buf) == 1 || inet_pton(AF_INET6, host, buf) == 1;
}

/* The measurement's URL on the silent socket's port, and the --resolve entry that sends its
 * name to loopback: the same name (SNI, certificate check) and the same options. */
static int warm_target(const char *url, int port, char *warm_url, size_t url_size,
                       char *resolve, size_t resolve_size)
{
    CURLU *u = curl_url();
    char *host = NULL, *out = NULL, portstr[8];
    snprintf(portstr, sizeof(portstr), "%d", port);
    int ok = u && curl_url_set(u, CURLUPART_URL, url, 0) == CURLUE_OK &&
             curl_url_set(u, CURLUPART_PORT, portstr, 0) == CURLUE_OK &&
             curl_url_get(u, CURLUPART_HOST, &host, 0) == CURLUE_OK &&
             curl_url_get(u, CURLUPART_URL, &out, 0) == CURLUE_OK && !is_ip_literal(host) &&
             (size_t)snprintf(warm_url, url_size, "%s", out) < url_size &&
             (size_t)snprintf(resolve, resolve_size, "%s:%d:127.0.0.1", host, port) <
                 resolve_size;
    curl_free(host);
    curl_free(out);
    curl_url_cleanup(u);
    return ok ? 0 : -1;
}

/* A Version Negotiation packet answering a QUIC Initial (RFC 9000 17.2.1): the client's
 * connection ids swapped, one version it does not speak; it must abandon the attempt.
 * Returns its length, or 0 if `in` is not a long-header packet. */
static size_t version_negotiation(const unsigned char *in, size_t n, unsigned char *out,
                                  size_t size)
{
    if (n < 7 || !(in[0] & 0x80))
        return 0;
    size_t dcid_len = in[5];
    if (dcid_len > 20 || n < 7 + dcid_len)
        return 0;
    const unsigned char *dcid = in + 6, *scid = in + 7 + dcid_len;
    size_t scid_len = in[6 + dcid_len];
    if (scid_len > 20 || n < 7 + dcid_len + scid_len || size < 7 + dcid_len + scid_len + 4)
        return 0;
    size_t k = 0;
    out[k++] = 0x80 | 0x2a;
    memset(out + k, 0, 4); /* version 0: Version Negotiation */
    k += 4;
    out[k++] = (unsigned char)scid_len;
    memcpy(out + k, scid, scid_len);
    k += scid_len;
    out[k++] = (unsigned char)dcid_len;
    memcpy(out + k, dcid, dcid_len);
    k += dcid_len;
    uint32_t v = UNSPOKEN_VERSION;
    for (int i = 3; i >= 0; i--)
        out[k++] = (unsigned char)(v >> (8 * i));
    return k;
}

struct silent {
    int fd, quic;
};

/* Waits for the client's first flight, then ends the attempt: a reset for TCP, Version
 * Negotiation for QUIC. Woken by shutdown() if nothing comes. */
static void *end_after_first_flight(void *arg)
{
    const struct silent *s = arg;
    unsigned char in[2048], out[64];
    if (!s->quic) {
        int c = accept(s->fd, NULL, NULL);
        if (c < 0)
            return NULL;
        (void)recv(c, in, 1, 0); /* the ClientHello's first byte */
        struct linger reset = {.l_onoff = 1, .l_linger = 0};
        setsockopt(c, SOL_SOCKET, SO_LINGER, &reset, sizeof(reset));
        close(c);
        return NULL;
    }
    struct sockaddr_in from;
    socklen_t len = sizeof(from);
    ssize_t n = recvfrom(s->fd, in, sizeof(in), 0, (struct sockaddr *)&from, &len);
    size_t m = n > 0 ? version_negotiation(in, (size_t)n, out, sizeof(out)) : 0;
    if (m)
        sendto(s->fd, out, m, 0, (struct sockaddr *)&from, len);
    return NULL;
}

void perf_warm_up(const struct perf_tool *tool, const struct perf_opts *o,
                  const struct perf_backend *be, void *state)
{
    char url[4096], resolve[512];
    int quic = o->proto == PROTO_QUIC;  /* video_download chooses it per run */
    int fd = -1, port = silent_socket(quic, &fd);
    if (port < 0 || warm_target(o->url, port, url, sizeof(url), resolve, sizeof(resolve)) < 0) {
        if (o->verbose)
            fprintf(stderr, "%s: no warm-up (IP literal or no loopback socket)\n", tool->name);
        if (fd >= 0)
            close(fd);
        return;
    }
    struct perf_opts warm = *o;
    warm.url = url;
    warm.resolve[0] = resolve;
    warm.n_resolve = 1;
    warm.timeout_s = WARM_UP_TIMEOUT_S;
    warm.cpu = warm.sha256 = 0;
    warm.output_body = NULL;
    warm.qlog = NULL;  /* the loopback attempt is no connection of the trial's */
    struct silent s = {.fd = fd, .quic = quic};
    pthread_t ender;
    int ending = pthread_create(&ender, NULL, end_after_first_flight, &s) == 0;
    struct perf_row row;
    perf_row_init(&row, -1);
    be->fetch(&warm, state, &row); /* it fails by design; the row is not printed */
    if (o->verbose)
        fprintf(stderr, "%s: warm-up on 127.0.0.1:%d: %s\n", tool->name, port, row.error);
    perf_row_free(&row);
    shutdown(fd, SHUT_RDWR); /* wakes the ender if the first flight never came */
    if (ending)
        pthread_join(ender, NULL);
    close(fd);
}
