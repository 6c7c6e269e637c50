/* Shared types of tls_perf, quic_perf and video_download: options, the measurement row and the backend
 * interface. Both tools are the same driver (perf_main) with a different tool description,
 * so options, timing, CPU sampling and JSON output exist once. */
#ifndef PERF_H
#define PERF_H

#include <stddef.h>
#include <stdio.h>
#include <stdint.h>

#define PERF_TOOL_VERSION "0.1.0"
#define PERF_MAX_RESOLVE 8
/* A valid request this tool or backend cannot do (clients/tools.py: UNSUPPORTED_EXIT). */
#define PERF_EXIT_UNSUPPORTED 3

enum perf_proto { PROTO_TLS12, PROTO_TLS13, PROTO_QUIC };
enum perf_http { HTTP_11, HTTP_2, HTTP_3 };

struct perf_opts {
    const char *tool;             /* "tls_perf", "quic_perf" or "video_download" */
    const char *url;
    const char *resolve[PERF_MAX_RESOLVE];
    int n_resolve;
    const char *cacert;
    int insecure;
    int repetitions;
    long pause_ms;
    double timeout_s;
    int cpu;
    const char *keylog;
    const char *qlog;             /* --qlog: the QUIC connections' qlog (JSON-SEQ), NULL = none */
    const char *output_body;      /* NULL: discard (bytes are still counted) */
    int sha256;
    int resume;
    int verbose;
    int curl_timers;              /* add libcurl's raw phase offsets to the row */
    enum perf_proto proto;
    enum perf_http http;
    const char *backend;
    const char *cc;               /* --cc: congestion control, NULL = the stack's default */
    const char *groups;           /* --groups: key-exchange groups offered, in order */
    int cold;                     /* --cold: no warm-up, first use of the libraries is timed */
    /* video_download only (video.c) */
    int video;                    /* the tool is video_download: print the video columns */
    double duration_s;            /* --duration: seconds of media to fetch, 0 = all of it */
    double buffer_s;              /* --buffer: seconds of media fetched ahead of playout */
    const char *rendition;        /* --rendition: "720p" or a Representation id, NULL = top */
    int tls_given;                /* --tls was given (QUIC accepts 1.3 only) */
};

/* One key exchange for every stack, so that protocols are compared on equal handshakes:
 * OpenSSL 3.5 (libcurl) would otherwise offer the X25519MLKEM768 hybrid (a 1.2 KB key share,
 * a ClientHello of two packets) where GnuTLS offers X25519. X25519 is also what the paper's
 * stacks used (2018-2021). The key share is X25519's; secp256r1 follows because in TLS 1.2 this
 * list also names the curves of ECDSA certificates the client accepts (ours are P-256).
 * --groups X25519MLKEM768:X25519 measures the post-quantum hybrid handshake. */
#define PERF_DEFAULT_GROUPS "X25519:secp256r1"

/* video_download --buffer: seconds of media a player keeps ahead of playout (dash.js's
 * default stable buffer is 12 s; a round 10 s keeps several 2 s segments in hand). */
#define PERF_VIDEO_BUFFER_S 10.0

/* What video_download adds to a row (quicbed/rowschema.py VIDEO_DOWNLOAD). */
struct perf_video {
    double video_rate_mbps, audio_rate_mbps;  /* a stream's bytes over its busy time */
    uint64_t video_bytes, audio_bytes;        /* init + media segments */
    int segments;                             /* media segments, both streams */
    char rendition[32];
    double media_s;                           /* seconds of media fetched */
    double startup_ms;                        /* t_start to the first media of both streams */
    int late_segments, stalls;
    double stall_ms;
    double second_connection_time_ms;         /* TCP: the audio connection's; QUIC: none */
};

/* One CPU sample; see cpu.c for the definition of the two percentages. */
struct cpu_sample {
    double t;                     /* seconds since t_start */
    double proc_pct;
    double sys_busy_pct;
};

struct perf_row {
    char library[256];
    char tls_version[32];
    char http_version[8];
    char cipher[96];
    char tls_group[64];           /* key-exchange group negotiated (or the one offered) */
    char local_ip[64];
    long local_port;
    char remote_ip[64];
    long remote_port;
    uint64_t bytes;
    long http_status;
    double t_start, t_connect, t_handshake, t_first_byte, t_done;  /* epoch seconds */
    double connection_time_ms, ttfb_ms, download_time_ms, throughput_mbps;
    /* CPU time of the measuring thread from t_start to handshake completion: the client's
     * own share of connection_time_ms (NaN if the handshake did not complete) */
    double client_cpu_ms;
    int resumed;                  /* 1, 0, or -1 = unknown (printed as null) */
    struct cpu_sample *cpu;
    size_t n_cpu;
    char sha256[65];              /* printed only with --sha256 */
    long long early_data_bytes;   /* printed only with --resume */
    /* --curl-timers: libcurl's own offsets from its start, in microseconds, plus the instant
     * of the pre-request callback; for diagnosing the timing rules documented in README.md */
    long long curl_us[7];         /* namelookup connect appconnect pretransfer starttransfer
                                     total prereq_cb */
    struct perf_video video;      /* printed only by video_download */
    int rep;
    char error[256];
};

/* A way of fetching one URL over one fresh (or resumed) connection.
 * setup/teardown hold state that lives across repetitions (e.g. a TLS session cache for
 * --resume); setup returns -2 for options the backend cannot honour (a usage error).
 * fetch fills every field of the row it can, and sets row->error on failure. */
struct perf_backend {
    const char *name;
    int (*setup)(const struct perf_opts *o, void **state);
    int (*fetch)(const struct perf_opts *o, void *state, struct perf_row *row);
    void (*teardown)(void *state);
};

/* What distinguishes the two tools. */
struct perf_tool {
    const char *name;
    enum perf_proto default_proto;
    enum perf_http default_http;
    int is_quic;                  /* accepts --http 3 only, no --tls */
    int is_video;                 /* video_download: --transport, --duration, --buffer, ... */
    const struct perf_backend *const *backends;  /* NULL-terminated, first = default */
};

int perf_main(const struct perf_tool *tool, int argc, char **argv);

/* warmup.c: one connection attempt to a loopback socket that never answers, made before the
 * first measurement with the measurement's own options, so that what a long-lived client has
 * ready before it connects (TLS context, trust anchors, the libraries' first-use set-up) is
 * not timed; the server, its sessions and the path are never touched. */
void perf_warm_up(const struct perf_tool *tool, const struct perf_opts *o,
                  const struct perf_backend *be, void *state);

/* opts.c */
int perf_parse_opts(const struct perf_tool *tool, int argc, char **argv, struct perf_opts *o);
void perf_usage(const struct perf_tool *tool, FILE *out);

/* row.c */
void perf_row_init(struct perf_row *row, int rep);
void perf_row_free(struct perf_row *row);
void perf_row_print(const struct perf_opts *o, const struct perf_row *row);
void perf_row_failed(struct perf_row *row);
void perf_row_timings(struct perf_row *row, double t_before, double namelookup_s,
                      double connect_s, double appconnect_s, double starttransfer_s,
                      double total_s);
const char *perf_proto_name(enum perf_proto p);
/* The negotiated group as --groups spells it (libraries differ in case), else as given. */
void perf_set_group(struct perf_row *row, const char *groups, const char *negotiated);

/* timeutil */
double perf_now_realtime(void);
double perf_now_monotonic(void);
double perf_now_thread_cpu(void);  /* seconds of CPU used by the calling thread */
void perf_sleep_ms(long ms);

/* cpu.c: samples every 500 ms from a helper thread while a fetch runs. */
struct cpu_sampler;
struct cpu_sampler *cpu_sampler_start(double interval_s);
void cpu_sampler_stop(struct cpu_sampler *s, struct perf_row *row);

/* sink.c: where the body goes (counted always; optionally hashed and/or kept) */
struct perf_sink {
    FILE *body;
    void *md;                     /* EVP_MD_CTX * with --sha256 */
};
int perf_sink_open(struct perf_sink *s, const struct perf_opts *o, struct perf_row *row);
int perf_sink_write(struct perf_sink *s, struct perf_row *row, const void *data, size_t len);
void perf_sink_close(struct perf_sink *s, struct perf_row *row);

/* backend_curl.c */
extern const struct perf_backend perf_backend_libcurl;

/* video.c: video_download's one backend, libcurl multi handles */
extern const struct perf_backend perf_backend_video;

#ifdef HAVE_NGTCP2
/* backend_ngtcp2.c: native ngtcp2 + nghttp3 + GnuTLS */
extern const struct perf_backend perf_backend_ngtcp2;
extern const struct perf_backend perf_backend_video_ngtcp2;  /* video.c */

/* For video_download: one connection whose first request (o->url) fills the row as quic_perf's
 * does (timings in library callbacks, TLS, status), further GETs on it, and every response's
 * status, body and end handed to the hooks instead of the body sink. */
struct perf_quic_hooks {
    void *ud;
    int (*data)(void *ud, int64_t sid, const uint8_t *data, size_t len);  /* <0: fail */
    void (*status)(void *ud, int64_t sid, long status);
    void (*end)(void *ud, int64_t sid);
};
struct nq;  /* the connection, opaque */
/* NULL only without memory; a connection that cannot start has row->error set. */
struct nq *perf_quic_open(const struct perf_opts *o, void *state, struct perf_row *row,
                          const struct perf_quic_hooks *hooks);
int64_t perf_quic_first(const struct nq *q);  /* the first request's stream once done, else -1 */
int perf_quic_get(struct nq *q, const char *url, int64_t *sid);
/* One round of I/O, waiting at most until `until` (CLOCK_REALTIME seconds); -1: row->error. */
int perf_quic_step(struct nq *q, double until);
/* Finishes the first request's row, closes the connection politely, frees it. */
void perf_quic_close(struct nq *q);
#endif

#endif
