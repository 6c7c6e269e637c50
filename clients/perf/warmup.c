/* The warm-up before the first measurement (see perf_warm_up in perf.h).
 *
 * A fresh process pays for the libraries' first use inside its first connection: OpenSSL's
 * context and algorithm fetches, the trust anchors, the QUIC stack's tables. A long-lived
 * client (the paper's lsquic engine, a browser) has all of that ready before it connects, and
 * the runner starts one process per trial, so without this every row would carry it (about
 * 3 ms for libcurl's QUIC, 14 % of a 20 ms RTT). The warm-up is one connection attempt with
 * the measurement's own options (name, TLS version, groups, CA file) to a socket on the
 * client's loopback that never answers; it is abandoned after WARM_UP_TIMEOUT_S. Nothing
 * reaches the server or the emulated path, no session or token is kept, and the measured
 * connections stay fresh. --cold leaves it out. */
#define _POSIX_C_SOURCE 200809L
#include <arpa/inet.h>
#include <curl/curl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "perf.h"

/* Long enough for the first flight to be built and sent on a busy host, short next to a trial. */
#define WARM_UP_TIMEOUT_S 0.2

/* A loopback socket of the tool's transport that takes the client's first flight and never
 * answers: a TCP listener (the kernel completes the handshake, nobody reads the ClientHello)
 * or a UDP socket nobody reads. Returns the port, or -1. */
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

void perf_warm_up(const struct perf_tool *tool, const struct perf_opts *o,
                  const struct perf_backend *be, void *state)
{
    char url[4096], resolve[512];
    int fd = -1, port = silent_socket(tool->is_quic, &fd);
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
    struct perf_row row;
    perf_row_init(&row, -1);
    be->fetch(&warm, state, &row);  /* it times out by design; the row is not printed */
    if (o->verbose)
        fprintf(stderr, "%s: warm-up on 127.0.0.1:%d: %s\n", tool->name, port, row.error);
    perf_row_free(&row);
    close(fd);
}
