/* One libcurl transfer, shared by the libcurl backend (one transfer per measurement, blocking)
 * and video_download (many transfers on kept connections, driven by a multi handle): the
 * options, the callbacks that time the handshake and read the TLS parameters, and the row
 * fields a finished transfer fills. */
#ifndef PERF_CURL_H
#define PERF_CURL_H

#include <curl/curl.h>

#include "perf.h"

/* Per-transfer context handed to the callbacks. */
struct perf_xfer {
    const struct perf_opts *o;
    struct perf_row *row;
    CURL *easy;
    struct perf_sink sink;
    int tls_seen;
    int headers_seen;
    double t_prereq;              /* CLOCK_REALTIME in the pre-request callback */
    double cpu_start, cpu_prereq; /* the thread's CPU time at t_before and at the callback */
    double t_before;              /* CLOCK_REALTIME right before the transfer starts */
};

/* --resolve as libcurl's list (NULL if none); free with curl_slist_free_all. */
struct curl_slist *perf_curl_resolve(const struct perf_opts *o);
/* Options, body sink and callbacks of one transfer of o->url on x->easy (x->o, x->row and
 * x->easy set by the caller); -1 with row->error set if it cannot start. */
int perf_curl_prepare(struct perf_xfer *x, struct curl_slist *resolve, CURLSH *share,
                      char *errbuf);
/* The zero point: call right before the transfer starts (curl_easy_perform, or adding the
 * handle to a multi handle). */
void perf_curl_start(struct perf_xfer *x);
/* The finished transfer's result into x->row: timings, TLS, HTTP, endpoints, error. */
void perf_curl_finish(struct perf_xfer *x, CURLcode rc, const char *errbuf);

#endif
