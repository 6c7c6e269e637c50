/* Command-line parsing shared by tls_perf, quic_perf and video_download. */
#define _POSIX_C_SOURCE 200809L
#include <ctype.h>
#include <stdarg.h>
#include <getopt.h>
#include <stdlib.h>
#include <string.h>

#include "perf.h"

enum { OPT_URL = 256, OPT_RESOLVE, OPT_CACERT, OPT_INSECURE, OPT_PAUSE, OPT_TIMEOUT, OPT_CPU,
       OPT_KEYLOG, OPT_OUTPUT_BODY, OPT_DISCARD, OPT_SHA256, OPT_RESUME, OPT_TLS, OPT_HTTP,
       OPT_BACKEND, OPT_VERSION, OPT_VERBOSE, OPT_CURL_TIMERS, OPT_CC,
       OPT_GROUPS, OPT_COLD, OPT_TRANSPORT, OPT_DURATION, OPT_BUFFER, OPT_RENDITION, OPT_QLOG };

static const struct option long_opts[] = {
    {"url", required_argument, NULL, OPT_URL},
    {"resolve", required_argument, NULL, OPT_RESOLVE},
    {"cacert", required_argument, NULL, OPT_CACERT},
    {"insecure", no_argument, NULL, OPT_INSECURE},
    {"repetitions", required_argument, NULL, 'n'},
    {"pause", required_argument, NULL, OPT_PAUSE},
    {"timeout", required_argument, NULL, OPT_TIMEOUT},
    {"cpu", no_argument, NULL, OPT_CPU},
    {"keylog", required_argument, NULL, OPT_KEYLOG},
    {"qlog", required_argument, NULL, OPT_QLOG},
    {"output-body", required_argument, NULL, OPT_OUTPUT_BODY},
    {"discard", no_argument, NULL, OPT_DISCARD},
    {"sha256", no_argument, NULL, OPT_SHA256},
    {"resume", no_argument, NULL, OPT_RESUME},
    {"tls", required_argument, NULL, OPT_TLS},
    {"http", required_argument, NULL, OPT_HTTP},
    {"backend", required_argument, NULL, OPT_BACKEND},
    {"verbose", no_argument, NULL, OPT_VERBOSE},
    {"curl-timers", no_argument, NULL, OPT_CURL_TIMERS},
    {"cc", required_argument, NULL, OPT_CC},
    {"groups", required_argument, NULL, OPT_GROUPS},
    {"cold", no_argument, NULL, OPT_COLD},
    {"transport", required_argument, NULL, OPT_TRANSPORT},
    {"duration", required_argument, NULL, OPT_DURATION},
    {"buffer", required_argument, NULL, OPT_BUFFER},
    {"rendition", required_argument, NULL, OPT_RENDITION},
    {"version", no_argument, NULL, OPT_VERSION},
    {"help", no_argument, NULL, 'h'},
    {NULL, 0, NULL, 0},
};

void perf_usage(const struct perf_tool *tool, FILE *out)
{
    fprintf(out,
            "usage: %s --url https://NAME[:PORT]/PATH [options]\n"
            "  --resolve NAME:PORT:ADDR  pin the address (DNS stays out of the timings); repeatable\n"
            "  --cacert FILE | --insecure  trust anchor (default: system store), or no verification\n"
            "  -n, --repetitions N       measurements, each on a fresh connection (default 1)\n"
            "  --pause MS                pause between repetitions (default 0)\n"
            "  --timeout S               whole-transfer limit in seconds (default 30)\n"
            "  --cpu                     sample process/system CPU every 500 ms\n"
            "  --keylog FILE             write TLS secrets (SSLKEYLOGFILE format)\n"
            "  --qlog FILE               QUIC: append each connection's qlog (JSON-SEQ) to FILE\n"
            "  --output-body FILE | --discard  keep or drop the body (default: drop, count bytes)\n"
            "  --sha256                  put the body's SHA-256 into the row\n"
            "  --resume                  warm-up connection, then resume its TLS session\n"
            "  --cold                    no loopback warm-up: the first measurement also times\n"
            "                            the libraries' first use (TLS context, trust anchors)\n"
            "  --verbose                 libcurl verbose output on stderr\n"
            "  --curl-timers             add libcurl's raw phase offsets (us) to the row\n"
            "  --cc NAME                 congestion control: TCP (tls_perf) any kernel name,\n"
            "                            e.g. cubic, reno, bbr; quic_perf --backend ngtcp2:\n"
            "                            cubic, reno, bbr (libcurl's QUIC cannot choose)\n"
            "  --groups LIST             key-exchange groups offered, colon-separated, e.g.\n"
            "                            X25519MLKEM768:X25519 (default " PERF_DEFAULT_GROUPS ")\n",
            tool->name);
    if (tool->is_video)
        fprintf(out, "  --transport tcp|quic      two TLS/TCP connections (HTTP/2) or one QUIC\n"
                     "                            connection with two streams (default quic)\n"
                     "  --tls 1.2|1.3             TLS version over TCP (default 1.3)\n"
                     "  --duration S              seconds of media to fetch (default: all)\n"
                     "  --buffer S                media fetched ahead of playout (default %g)\n"
                     "  --rendition NAME          video rendition, e.g. 720p (default: the top)\n"
                     "  --backend libcurl|ngtcp2  QUIC through libcurl's HTTP/3 (default) or\n"
                     "                            natively through ngtcp2\n"
                     "--url names the DASH manifest; -n repeats the whole session.\n",
                PERF_VIDEO_BUFFER_S);
    else if (tool->is_quic) {
        fprintf(out, "  --backend NAME            QUIC implementation:");
        for (const struct perf_backend *const *b = tool->backends; *b; b++)
            fprintf(out, " %s%s", (*b)->name, b == tool->backends ? " (default)" : "");
        fputc('\n', out);
    } else
        fprintf(out, "  --tls 1.2|1.3             TLS version to force (default 1.3)\n"
                     "  --http 1.1|2              HTTP version to force (default 2)\n");
    fprintf(out, "Prints one JSON object per measurement on stdout (schema: README.md).\n"
                 "Exit status: 0 all measurements succeeded, 1 some failed, 2 usage error,\n"
                 "3 unsupported (an option this tool or backend cannot do; no rows).\n");
}

/* Strict number parsing: the runner's typos must not silently become 0. */
static int parse_long(const char *s, long min, long *out)
{
    char *end = NULL;
    long v = strtol(s, &end, 10);
    if (*s == '\0' || *end != '\0' || v < min)
        return -1;
    *out = v;
    return 0;
}

static int parse_double(const char *s, double min, double *out)
{
    char *end = NULL;
    double v = strtod(s, &end);
    if (*s == '\0' || *end != '\0' || !(v >= min))
        return -1;
    *out = v;
    return 0;
}

static int set_tls(const struct perf_tool *tool, const char *v, struct perf_opts *o)
{
    o->tls_given = 1;
    if (tool->is_quic)
        return strcmp(v, "1.3") == 0 ? 0 : -1;  /* QUIC always uses TLS 1.3 */
    if (strcmp(v, "1.2") == 0)
        o->proto = PROTO_TLS12;
    else if (strcmp(v, "1.3") == 0)
        o->proto = PROTO_TLS13;
    else
        return -1;
    return 0;
}

static int set_http(const struct perf_tool *tool, const char *v, struct perf_opts *o)
{
    if (tool->is_video)
        return -1;  /* fixed by the transport: HTTP/2 over TCP, HTTP/3 over QUIC */
    if (tool->is_quic)
        return strcmp(v, "3") == 0 ? 0 : -1;
    if (strcmp(v, "1.1") == 0)
        o->http = HTTP_11;
    else if (strcmp(v, "2") == 0)
        o->http = HTTP_2;
    else
        return -1;
    return 0;
}

static int set_backend(const struct perf_tool *tool, const char *v, struct perf_opts *o)
{
    for (const struct perf_backend *const *b = tool->backends; *b; b++)
        if (strcmp((*b)->name, v) == 0) {
            o->backend = (*b)->name;
            return 0;
        }
    return -1;
}

/* Names as OpenSSL spells them (X25519, secp256r1, X25519MLKEM768), colon-separated; each
 * backend maps them or reports a row error for one its library lacks. */
static int set_groups(const char *v, struct perf_opts *o)
{
    if (!v[0] || strlen(v) > 200 || v[0] == ':' || v[strlen(v) - 1] == ':')
        return -1;
    for (const char *p = v; *p; p++)
        if (!isalnum((unsigned char)*p) && !strchr(":-_", *p))
            return -1;
    o->groups = v;
    return 0;
}

static void set_defaults(const struct perf_tool *tool, struct perf_opts *o)
{
    memset(o, 0, sizeof(*o));
    o->tool = tool->name;
    o->repetitions = 1;
    o->timeout_s = 30.0;
    o->proto = tool->default_proto;
    o->http = tool->default_http;
    o->backend = tool->backends[0]->name;
    o->groups = PERF_DEFAULT_GROUPS;
    o->video = tool->is_video;
    o->buffer_s = PERF_VIDEO_BUFFER_S;
}

/* A usage error: one line on stderr, the way to the full usage named in it. */
static int usage_error(const struct perf_tool *tool, const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "%s: ", tool->name);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, " (usage: %s --help)\n", tool->name);
    return -1;
}

/* video_download: --transport picks the HTTP version here, the protocol in finish_video. */
static int set_transport(const char *v, struct perf_opts *o)
{
    if (strcmp(v, "quic") == 0)
        o->http = HTTP_3;
    else if (strcmp(v, "tcp") == 0)
        o->http = HTTP_2;
    else
        return -1;
    return 0;
}

static int set_rendition(const char *v, struct perf_opts *o)
{
    size_t n = strlen(v);
    if (n == 0 || n >= sizeof(((struct perf_video *)0)->rendition))
        return -1;
    for (const char *p = v; *p; p++)
        if (!isalnum((unsigned char)*p) && !strchr("-_.", *p))
            return -1;
    o->rendition = v;
    return 0;
}

/* The video options, for video_download only. */
static int apply_video_opt(const struct perf_tool *tool, int c, const char *arg,
                           struct perf_opts *o)
{
    if (!tool->is_video)
        return -1;
    switch (c) {
    case OPT_TRANSPORT: return set_transport(arg, o);
    case OPT_DURATION: return parse_double(arg, 0.001, &o->duration_s);
    case OPT_BUFFER: return parse_double(arg, 0.0, &o->buffer_s);
    default: return set_rendition(arg, o);
    }
}

/* --transport and --tls in either order: QUIC is TLS 1.3 only. */
static int finish_video(const struct perf_tool *tool, struct perf_opts *o)
{
    if (o->http == HTTP_3) {
        if (o->tls_given && o->proto != PROTO_TLS13) {
            return usage_error(tool, "--tls 1.2 needs --transport tcp (QUIC is TLS 1.3)");
        }
        o->proto = PROTO_QUIC;
    } else if (o->proto == PROTO_QUIC) {
        o->proto = PROTO_TLS13;
    }
    return 0;
}

/* Returns 0 on success, 1 if --help/--version was handled, -1 on a usage error. */
static int apply_opt(const struct perf_tool *tool, int c, const char *arg, struct perf_opts *o)
{
    long l = 0;
    switch (c) {
    case OPT_URL: o->url = arg; return 0;
    case OPT_RESOLVE:
        if (o->n_resolve >= PERF_MAX_RESOLVE)
            return -1;
        o->resolve[o->n_resolve++] = arg;
        return 0;
    case OPT_CACERT: o->cacert = arg; return 0;
    case OPT_INSECURE: o->insecure = 1; return 0;
    case 'n':
        if (parse_long(arg, 1, &l) < 0 || l > 1000000)
            return -1;
        o->repetitions = (int)l;
        return 0;
    case OPT_PAUSE: return parse_long(arg, 0, &o->pause_ms);
    case OPT_TIMEOUT: return parse_double(arg, 0.001, &o->timeout_s);
    case OPT_CPU: o->cpu = 1; return 0;
    case OPT_KEYLOG: o->keylog = arg; return 0;
    case OPT_QLOG: o->qlog = arg; return 0;
    case OPT_OUTPUT_BODY: o->output_body = arg; return 0;
    case OPT_DISCARD: o->output_body = NULL; return 0;
    case OPT_SHA256: o->sha256 = 1; return 0;
    case OPT_RESUME: o->resume = 1; return 0;
    case OPT_COLD: o->cold = 1; return 0;
    case OPT_VERBOSE: o->verbose = 1; return 0;
    case OPT_CURL_TIMERS: o->curl_timers = 1; return 0;
    case OPT_CC: o->cc = arg; return 0;
    case OPT_GROUPS: return set_groups(arg, o);
    case OPT_TLS: return set_tls(tool, arg, o);
    case OPT_HTTP: return set_http(tool, arg, o);
    case OPT_BACKEND: return set_backend(tool, arg, o);
    case OPT_TRANSPORT:
    case OPT_DURATION:
    case OPT_BUFFER:
    case OPT_RENDITION: return apply_video_opt(tool, c, arg, o);
    case OPT_VERSION: printf("%s %s\n", tool->name, PERF_TOOL_VERSION); return 1;
    case 'h': perf_usage(tool, stdout); return 1;
    default: return -1;
    }
}

int perf_parse_opts(const struct perf_tool *tool, int argc, char **argv, struct perf_opts *o)
{
    int c, idx = -1;
    set_defaults(tool, o);
    opterr = 0;  /* getopt's own messages would make a second line */
    while ((c = getopt_long(argc, argv, ":n:h", long_opts, &idx)) != -1) {
        if (c == '?')
            return usage_error(tool, "unknown option '%s'", argv[optind - 1]);
        if (c == ':')
            return usage_error(tool, "option '%s' needs a value", argv[optind - 1]);
        int r = apply_opt(tool, c, optarg, o);
        if (r < 0)
            return usage_error(tool, "invalid or unsupported value '%s' for %s%s",
                               optarg ? optarg : "", idx >= 0 ? "--" : "-",
                               idx >= 0 ? long_opts[idx].name : "n");
        if (r > 0)
            return r;
        idx = -1;
    }
    if (optind < argc)
        return usage_error(tool, "unexpected argument '%s'", argv[optind]);
    if (!o->url)
        return usage_error(tool, "--url is required");
    return tool->is_video ? finish_video(tool, o) : 0;
}
