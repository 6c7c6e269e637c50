/* CPU sampling as in the paper: jiffies of this process against jiffies of the system,
 * read from /proc/self/stat and /proc/stat every interval.
 *
 * A helper thread does the sampling rather than a libcurl progress callback: curl calls the
 * progress callback only when its event loop wakes up, so a stalled transfer would produce
 * no samples, exactly when they matter. The thread sleeps on a condition variable so that
 * stopping it does not wait for the rest of an interval.
 *
 *   proc_pct     = 100 * d(utime+stime of this process) / (d(all jiffies of /proc/stat) / ncpu)
 *                  i.e. percent of one CPU, as top shows it (can exceed 100 with threads);
 *   sys_busy_pct = 100 * d(all - idle - iowait) / d(all), over all CPUs of the machine.
 * Each sample covers the interval that ends at t (seconds since the sampler started). */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "perf.h"

struct jiffies {
    unsigned long long proc, total, busy;
};

struct cpu_sampler {
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int stop;
    double interval_s, t0;
    long ncpu;
    struct cpu_sample *samples;
    size_t n, cap;
};

static int read_proc_jiffies(unsigned long long *out)
{
    char buf[1024];
    FILE *f = fopen("/proc/self/stat", "r");
    size_t len = f ? fread(buf, 1, sizeof(buf) - 1, f) : 0;
    if (f)
        fclose(f);
    buf[len] = '\0';
    /* comm (field 2) may contain spaces and ')': fields are counted after the last ')'. */
    char *p = strrchr(buf, ')');
    unsigned long long ut = 0, st = 0;
    if (!p || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu",
                     &ut, &st) != 2)
        return -1;
    *out = ut + st;
    return 0;
}

static int read_sys_jiffies(unsigned long long *total, unsigned long long *busy)
{
    unsigned long long v[8] = {0};
    FILE *f = fopen("/proc/stat", "r");
    if (!f)
        return -1;
    int n = fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2],
                   &v[3], &v[4], &v[5], &v[6], &v[7]);
    fclose(f);
    if (n < 4)
        return -1;
    /* guest time is already inside user/nice, so it is not added again */
    *total = v[0] + v[1] + v[2] + v[3] + v[4] + v[5] + v[6] + v[7];
    *busy = *total - v[3] - v[4];
    return 0;
}

static int read_jiffies(struct jiffies *j)
{
    if (read_proc_jiffies(&j->proc) < 0)
        return -1;
    return read_sys_jiffies(&j->total, &j->busy);
}

static void add_sample(struct cpu_sampler *s, const struct jiffies *a, const struct jiffies *b)
{
    double dt = (double)(b->total - a->total);
    if (s->n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 64;
        struct cpu_sample *p = realloc(s->samples, cap * sizeof(*p));
        if (!p)
            return;  /* out of memory: lose the sample, keep measuring */
        s->samples = p;
        s->cap = cap;
    }
    struct cpu_sample *c = &s->samples[s->n++];
    c->t = perf_now_monotonic() - s->t0;
    c->proc_pct = dt > 0 ? 100.0 * (double)(b->proc - a->proc) * (double)s->ncpu / dt : 0.0;
    c->sys_busy_pct = dt > 0 ? 100.0 * (double)(b->busy - a->busy) / dt : 0.0;
}

static void deadline_after(struct timespec *ts, double s)
{
    clock_gettime(CLOCK_MONOTONIC, ts);
    long ns = ts->tv_nsec + (long)(s * 1e9);
    ts->tv_sec += ns / 1000000000L;
    ts->tv_nsec = ns % 1000000000L;
}

static void *sampler_main(void *arg)
{
    struct cpu_sampler *s = arg;
    struct jiffies prev, cur;
    int ok = read_jiffies(&prev) == 0;
    pthread_mutex_lock(&s->lock);
    while (!s->stop) {
        struct timespec ts;
        deadline_after(&ts, s->interval_s);
        int rc = 0;
        while (!s->stop && rc != ETIMEDOUT)
            rc = pthread_cond_timedwait(&s->cond, &s->lock, &ts);
        if (s->stop)
            break;
        if (ok && read_jiffies(&cur) == 0) {
            add_sample(s, &prev, &cur);
            prev = cur;
        }
    }
    pthread_mutex_unlock(&s->lock);
    return NULL;
}

struct cpu_sampler *cpu_sampler_start(double interval_s)
{
    struct cpu_sampler *s = calloc(1, sizeof(*s));
    pthread_condattr_t ca;
    if (!s)
        return NULL;
    s->interval_s = interval_s;
    s->ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    if (s->ncpu < 1)
        s->ncpu = 1;
    s->t0 = perf_now_monotonic();
    pthread_mutex_init(&s->lock, NULL);
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);  /* immune to wall-clock steps */
    pthread_cond_init(&s->cond, &ca);
    pthread_condattr_destroy(&ca);
    if (pthread_create(&s->thread, NULL, sampler_main, s) != 0) {
        free(s);
        return NULL;
    }
    return s;
}

/* Stops the thread and hands its samples over to the row. */
void cpu_sampler_stop(struct cpu_sampler *s, struct perf_row *row)
{
    if (!s)
        return;
    pthread_mutex_lock(&s->lock);
    s->stop = 1;
    pthread_cond_signal(&s->cond);
    pthread_mutex_unlock(&s->lock);
    pthread_join(s->thread, NULL);
    pthread_cond_destroy(&s->cond);
    pthread_mutex_destroy(&s->lock);
    row->cpu = s->samples;
    row->n_cpu = s->n;
    free(s);
}
