/* The driver shared by the tools: options, repetitions, one JSON row per measurement. */
#define _POSIX_C_SOURCE 200809L
#include <curl/curl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "perf.h"

static const struct perf_backend *find_backend(const struct perf_tool *tool, const char *name)
{
    for (const struct perf_backend *const *b = tool->backends; *b; b++)
        if (strcmp((*b)->name, name) == 0)
            return *b;
    return tool->backends[0];
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
    int rc = be->setup(&o, &state);
    if (rc == 0) {
        if (!o.cold && !o.resume)  /* --resume's warm-up connection already did it */
            perf_warm_up(tool, &o, be, state);
        failed = run(&o, be, state);
        be->teardown(state);
    } else if (rc != -2) {
        fprintf(stderr, "%s: backend %s: setup failed\n", tool->name, be->name);
    }
    curl_global_cleanup();
    return rc == -2 ? PERF_EXIT_UNSUPPORTED : failed ? 1 : 0;
}
