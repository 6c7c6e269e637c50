/* The measurement row: derived timings and the one-line JSON output. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "perf.h"

double perf_now_realtime(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

double perf_now_thread_cpu(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

double perf_now_monotonic(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

void perf_sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0)
        ;  /* EINTR: sleep the remainder */
}

const char *perf_proto_name(enum perf_proto p)
{
    switch (p) {
    case PROTO_TLS12: return "tls1.2";
    case PROTO_TLS13: return "tls1.3";
    default: return "quic";
    }
}

void perf_set_group(struct perf_row *row, const char *groups, const char *negotiated)
{
    const char *name = negotiated ? negotiated : "";
    size_t n = strlen(name);
    for (const char *p = groups; n && *p;) {
        size_t len = strcspn(p, ":");
        if (len == n && strncasecmp(p, name, n) == 0) {
            snprintf(row->tls_group, sizeof(row->tls_group), "%.*s", (int)len, p);
            return;
        }
        p += len + (p[len] == ':');
    }
    snprintf(row->tls_group, sizeof(row->tls_group), "%s", name);
}

void perf_row_init(struct perf_row *row, int rep)
{
    memset(row, 0, sizeof(*row));
    row->rep = rep;
    row->resumed = 0;
    /* NaN marks a phase the transfer never reached; it is printed as null. */
    row->t_start = row->t_connect = row->t_handshake = row->t_first_byte = row->t_done = NAN;
    row->connection_time_ms = row->ttfb_ms = row->download_time_ms = NAN;
    row->throughput_mbps = row->client_cpu_ms = NAN;
    row->video.video_rate_mbps = row->video.audio_rate_mbps = row->video.media_s = NAN;
    row->video.startup_ms = row->video.stall_ms = row->video.second_connection_time_ms = NAN;
}

void perf_row_free(struct perf_row *row)
{
    free(row->cpu);
    row->cpu = NULL;
    row->n_cpu = 0;
}

/* A failed measurement downloaded nothing usable: no completion time, no throughput (the
 * phases it did reach stay, they help to see where it failed). Unknown ports are 0. */
void perf_row_failed(struct perf_row *row)
{
    row->t_done = row->download_time_ms = row->throughput_mbps = NAN;
    if (row->local_port < 0)
        row->local_port = 0;
    if (row->remote_port < 0)
        row->remote_port = 0;
}

/* Offset of a libcurl phase from the end of name resolution, or NaN if curl never reached
 * it (curl reports 0 for phases it did not reach). As in the paper, DNS is excluded. */
static double since_lookup(double phase_s, double namelookup_s)
{
    return phase_s > 0.0 ? phase_s - namelookup_s : NAN;
}

/* t_before: CLOCK_REALTIME right before curl_easy_perform. The row's zero point t_start is
 * t_before + namelookup, the instant name resolution ended and the connection attempt began
 * (the paper's zero point; with --resolve it is tens of microseconds after t_before). Every
 * absolute time is then t_before + curl's offset, a real instant comparable with a capture,
 * and each duration is exactly the difference of two absolute times. */
void perf_row_timings(struct perf_row *row, double t_before, double namelookup_s,
                      double connect_s, double appconnect_s, double starttransfer_s,
                      double total_s)
{
    double c = since_lookup(connect_s, namelookup_s);
    double h = since_lookup(appconnect_s, namelookup_s);
    double f = since_lookup(starttransfer_s, namelookup_s);
    double d = since_lookup(total_s, namelookup_s);
    double t0 = t_before + namelookup_s;

    row->t_start = t0;
    row->t_connect = t0 + c;
    row->t_handshake = t0 + h;
    row->t_first_byte = t0 + f;
    row->t_done = t0 + d;
    row->connection_time_ms = h * 1e3;
    row->ttfb_ms = f * 1e3;
    row->download_time_ms = d * 1e3;
    row->throughput_mbps = d > 0.0 ? (double)row->bytes * 8.0 / d / 1e6 : NAN;
}

/* JSON string with the escapes RFC 8259 requires; other bytes pass through. */
static void json_str(FILE *f, const char *s)
{
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)(s ? s : ""); *p; p++) {
        if (*p == '"' || *p == '\\')
            fprintf(f, "\\%c", *p);
        else if (*p == '\n')
            fputs("\\n", f);
        else if (*p < 0x20)
            fprintf(f, "\\u%04x", *p);
        else
            fputc(*p, f);
    }
    fputc('"', f);
}

static void json_num(FILE *f, const char *fmt, double v)
{
    if (isfinite(v))
        fprintf(f, fmt, v);
    else
        fputs("null", f);
}

static void key(FILE *f, const char *k)
{
    fprintf(f, ", \"%s\": ", k);
}

static void print_cpu(FILE *f, const struct perf_row *row)
{
    fputc('[', f);
    for (size_t i = 0; i < row->n_cpu; i++)
        fprintf(f, "%s{\"t\": %.3f, \"proc_pct\": %.2f, \"sys_busy_pct\": %.2f}", i ? ", " : "",
                row->cpu[i].t, row->cpu[i].proc_pct, row->cpu[i].sys_busy_pct);
    fputc(']', f);
}

static void print_identity(FILE *f, const struct perf_opts *o, const struct perf_row *row)
{
    fputs("{\"tool\": ", f);
    json_str(f, o->tool);
    key(f, "tool_version"); json_str(f, PERF_TOOL_VERSION);
    key(f, "library"); json_str(f, row->library);
    key(f, "backend"); json_str(f, o->backend);
    key(f, "protocol"); json_str(f, perf_proto_name(o->proto));
    key(f, "tls_version"); json_str(f, row->tls_version);
    key(f, "http_version"); json_str(f, row->http_version);
    key(f, "cipher"); json_str(f, row->cipher);
    key(f, "tls_group"); json_str(f, row->tls_group);
    key(f, "local_ip"); json_str(f, row->local_ip);
    key(f, "local_port"); fprintf(f, "%ld", row->local_port);
    key(f, "remote_ip"); json_str(f, row->remote_ip);
    key(f, "remote_port"); fprintf(f, "%ld", row->remote_port);
    key(f, "url"); json_str(f, o->url);
    key(f, "bytes"); fprintf(f, "%llu", (unsigned long long)row->bytes);
    key(f, "http_status"); fprintf(f, "%ld", row->http_status);
}

static void print_times(FILE *f, const struct perf_row *row)
{
    key(f, "t_start"); json_num(f, "%.6f", row->t_start);
    key(f, "t_connect"); json_num(f, "%.6f", row->t_connect);
    key(f, "t_handshake"); json_num(f, "%.6f", row->t_handshake);
    key(f, "t_first_byte"); json_num(f, "%.6f", row->t_first_byte);
    key(f, "t_done"); json_num(f, "%.6f", row->t_done);
    key(f, "connection_time_ms"); json_num(f, "%.3f", row->connection_time_ms);
    key(f, "client_cpu_ms"); json_num(f, "%.3f", row->client_cpu_ms);
    key(f, "ttfb_ms"); json_num(f, "%.3f", row->ttfb_ms);
    key(f, "download_time_ms"); json_num(f, "%.3f", row->download_time_ms);
    key(f, "throughput_mbps"); json_num(f, "%.3f", row->throughput_mbps);
}

static void print_curl_timers(FILE *f, const struct perf_row *row)
{
    static const char *const names[] = {"namelookup", "connect", "appconnect", "pretransfer",
                                        "starttransfer", "total", "prereq_cb"};
    key(f, "curl_timers");
    for (int i = 0; i < 7; i++)
        fprintf(f, "%s\"%s\": %lld", i ? ", " : "{", names[i], row->curl_us[i]);
    fputc('}', f);
}

/* video_download's columns (quicbed/rowschema.py VIDEO_DOWNLOAD). */
static void print_video(FILE *f, const struct perf_video *v)
{
    key(f, "video_rate_mbps"); json_num(f, "%.3f", v->video_rate_mbps);
    key(f, "audio_rate_mbps"); json_num(f, "%.3f", v->audio_rate_mbps);
    key(f, "video_bytes"); fprintf(f, "%llu", (unsigned long long)v->video_bytes);
    key(f, "audio_bytes"); fprintf(f, "%llu", (unsigned long long)v->audio_bytes);
    key(f, "segments"); fprintf(f, "%d", v->segments);
    key(f, "rendition"); json_str(f, v->rendition);
    key(f, "media_s"); json_num(f, "%.3f", v->media_s);
    key(f, "startup_ms"); json_num(f, "%.3f", v->startup_ms);
    key(f, "late_segments"); fprintf(f, "%d", v->late_segments);
    key(f, "stalls"); fprintf(f, "%d", v->stalls);
    key(f, "stall_ms"); json_num(f, "%.3f", v->stall_ms);
    key(f, "second_connection_time_ms"); json_num(f, "%.3f", v->second_connection_time_ms);
}

void perf_row_print(const struct perf_opts *o, const struct perf_row *row)
{
    FILE *f = stdout;
    print_identity(f, o, row);
    print_times(f, row);
    key(f, "resumed");
    fputs(row->resumed < 0 ? "null" : row->resumed ? "true" : "false", f);
    key(f, "cpu"); print_cpu(f, row);
    key(f, "rep"); fprintf(f, "%d", row->rep);
    key(f, "error"); json_str(f, row->error);
    if (o->sha256) {
        key(f, "sha256"); json_str(f, row->sha256);
    }
    if (o->curl_timers)
        print_curl_timers(f, row);
    if (o->cc) {
        key(f, "cc"); json_str(f, o->cc);
    }
    if (o->resume) {
        key(f, "early_data_bytes"); fprintf(f, "%lld", row->early_data_bytes);
    }
    if (o->video)
        print_video(f, &row->video);
    fputs("}\n", f);
    fflush(f);  /* the runner may read rows while later repetitions are still running */
}
