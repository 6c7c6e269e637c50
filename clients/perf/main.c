/* The driver shared by the tools: options, repetitions, one JSON row per measurement. */
#define _POSIX_C_SOURCE 200809L
#include <curl/curl.h>
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "perf.h"

static const struct perf_backend *find_backend(const struct perf_tool *tool, const char *name)
{
    for (const struct perf_backend *const *b = tool->backends; *b; b++)
        if (strcmp((*b)->name, name) == 0)
            return *b;
    return tool->backends[0];
}

/* --qlog through libcurl: OpenSSL 3.5's QUIC stack writes one <id>_client.sqlog per
 * connection into $QLOGDIR, read at each connection's creation. The tool points it at
 * FILE.d and, at its end, appends those files to FILE and removes them, so both backends
 * leave one JSON-SEQ file. ngtcp2 writes FILE itself (its qlog callback). */
static int qlog_by_env(const struct perf_opts *o, const struct perf_backend *be)
{
    return o->qlog && o->proto == PROTO_QUIC && strcmp(be->name, "ngtcp2") != 0;
}

static void qlog_dir(const struct perf_opts *o, char *dir, size_t size)
{
    snprintf(dir, size, "%s.d", o->qlog);
}

static void qlog_env_begin(const struct perf_opts *o)
{
    char dir[4096];
    qlog_dir(o, dir, sizeof(dir));
    if (mkdir(dir, 0755) != 0 && errno != EEXIST)
        fprintf(stderr, "%s: --qlog: cannot make %s: %s\n", o->tool, dir, strerror(errno));
    setenv("QLOGDIR", dir, 1);
}

static int by_mtime(const struct dirent **a, const struct dirent **b, const char *dir)
{
    char pa[4352], pb[4352];
    struct stat sa = {0}, sb = {0};
    snprintf(pa, sizeof(pa), "%s/%s", dir, (*a)->d_name);
    snprintf(pb, sizeof(pb), "%s/%s", dir, (*b)->d_name);
    stat(pa, &sa);
    stat(pb, &sb);
    if (sa.st_mtim.tv_sec != sb.st_mtim.tv_sec)
        return sa.st_mtim.tv_sec < sb.st_mtim.tv_sec ? -1 : 1;
    return (sa.st_mtim.tv_nsec > sb.st_mtim.tv_nsec) - (sa.st_mtim.tv_nsec < sb.st_mtim.tv_nsec);
}

static const char *sort_dir;  /* scandir's comparator takes no context */
static int cmp_mtime(const struct dirent **a, const struct dirent **b)
{
    return by_mtime(a, b, sort_dir);
}

static int not_dot(const struct dirent *e)
{
    return e->d_name[0] != '.';
}

static void append_file(FILE *out, const char *path)
{
    char buf[65536];
    size_t n;
    FILE *in = fopen(path, "rb");
    if (!in)
        return;
    while ((n = fread(buf, 1, sizeof(buf), in)) > 0)
        fwrite(buf, 1, n, out);
    fclose(in);
}

/* The connections' files in the order they were written, one after the other. */
static void qlog_env_end(const struct perf_opts *o)
{
    char dir[4096], path[4352];
    struct dirent **names = NULL;
    qlog_dir(o, dir, sizeof(dir));
    sort_dir = dir;
    int n = scandir(dir, &names, not_dot, cmp_mtime);
    FILE *out = n > 0 ? fopen(o->qlog, "ab") : NULL;
    for (int i = 0; i < n; i++) {
        snprintf(path, sizeof(path), "%s/%s", dir, names[i]->d_name);
        if (out)
            append_file(out, path);
        unlink(path);
        free(names[i]);
    }
    free(names);
    if (out)
        fclose(out);
    rmdir(dir);
}

/* Runs every repetition; returns the number of failed measurements. */
static int run(const struct perf_opts *o, const struct perf_backend *be, void *state)
{
    int failed = 0;
    for (int rep = 0; rep < o->repetitions; rep++) {
        struct perf_row row;
        if (rep > 0 && o->pause_ms > 0)
            perf_sleep_ms(o->pause_ms);
        perf_row_init(&row, rep);
        /* the sampler brackets the backend call: its set-up is negligible next to 500 ms */
        struct cpu_sampler *s = o->cpu ? cpu_sampler_start(0.5) : NULL;
        int rc = be->fetch(o, state, &row);
        cpu_sampler_stop(s, &row);
        if (rc < 0 && !row.error[0])
            snprintf(row.error, sizeof(row.error), "internal: backend failed");
        if (row.error[0])
            perf_row_failed(&row);
        failed += row.error[0] != '\0';
        perf_row_print(o, &row);
        perf_row_free(&row);
    }
    return failed;
}

int perf_main(const struct perf_tool *tool, int argc, char **argv)
{
    struct perf_opts o;
    int r = perf_parse_opts(tool, argc, argv, &o);
    if (r != 0)
        return r < 0 ? 2 : 0;  /* a usage error was said in one line */
    /* libcurl's OpenSSL backend (TCP and QUIC) reads SSLKEYLOGFILE when it initialises */
    if (o.keylog)
        setenv("SSLKEYLOGFILE", o.keylog, 1);
    signal(SIGPIPE, SIG_IGN);  /* a closed stdout must end in an error, not a silent death */
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
        fprintf(stderr, "%s: curl_global_init failed\n", tool->name);
        return 1;
    }
    const struct perf_backend *be = find_backend(tool, o.backend);
    void *state = NULL;
    int failed = o.repetitions;
    int env_qlog = qlog_by_env(&o, be);
    if (env_qlog && o.resume)  /* the warm-up connection to the server is the trial's too */
        qlog_env_begin(&o);
    int rc = be->setup(&o, &state);
    if (rc == 0) {
        if (!o.cold && !o.resume)  /* --resume's warm-up connection already did it */
            perf_warm_up(tool, &o, be, state);
        if (env_qlog)  /* after the loopback warm-up, which is no connection of the trial's */
            qlog_env_begin(&o);
        failed = run(&o, be, state);
        be->teardown(state);
    } else if (rc != -2) {
        fprintf(stderr, "%s: backend %s: setup failed\n", tool->name, be->name);
    }
    curl_global_cleanup();
    if (env_qlog)
        qlog_env_end(&o);
    return rc == -2 ? PERF_EXIT_UNSUPPORTED : failed ? 1 : 0;
}
