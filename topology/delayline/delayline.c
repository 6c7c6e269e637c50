/*
 * quicbed-delayline: netem's delay stage in user space, for kernels without sch_netem.
 *
 * It joins two interfaces with AF_PACKET sockets. Frames read on --a (the router's egress)
 * are impaired the way netem impairs them (delay, jitter from the same iproute2 tables,
 * random or Gilbert-Elliott loss, reordering, duplication, a delay-line limit) and sent on
 * --b when due; frames read on --b go back to --a at once. The rate stage (htb) stays in the
 * host kernel, after this one, exactly as with netem.
 *
 * With `trace=FILE` (Mahimahi's format: one millisecond timestamp per line, each line one
 * delivery opportunity for 1500 bytes of IP packet, repeating with the last timestamp as its
 * period), the rate stage is here instead: frames whose delay is over wait in a drop-tail
 * queue of `link_limit_bytes` IP bytes (mm-link's droptail in bytes), and each opportunity sends up to 1500 bytes from its head,
 * a packet possibly spread over several (mm-link's LinkQueue). An opportunity with nothing
 * queued is wasted. The trace's time 0 is when the settings that name it were applied.
 *
 * Configuration is a key=value file (--config). SIGHUP re-reads it; the new settings hold
 * from the next frame on, and the file named by --applied then gets the config's
 * `generation` and the counters, so the caller knows when a change took effect.
 *
 * PACKET_VNET_HDR carries the kernel's checksum state across: a frame that left the router
 * with its checksum still to be filled in (CHECKSUM_PARTIAL) is sent on the same way.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <linux/if_packet.h>
#include <linux/virtio_net.h>
#include <net/ethernet.h>
#include <net/if.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#ifndef PACKET_IGNORE_OUTGOING
#define PACKET_IGNORE_OUTGOING 23
#endif

#define SLOT_BYTES 2048 /* a vnet header and one MTU-sized frame (offloads are off) */
#define POOL_SLOTS 32768
#define BATCH 64
#define DIST_SCALE 8192 /* netem's NETEM_DIST_SCALE */
#define DIST_MAX 16384
#define SOCKET_BUFFER (8 << 20)

struct config {
    int64_t delay_ns, jitter_ns;
    short dist[DIST_MAX];
    int dist_size; /* 0: uniform, as netem without a table */
    uint32_t loss, ge_p, ge_r, ge_h, ge_k1; /* netem's thresholds against a 32-bit draw */
    int gemodel;
    uint32_t reorder, duplicate;
    long limit;
    uint64_t seed;
    long generation;
    char trace_path[400];
    uint32_t *trace; /* opportunities, ms; NULL: no trace (rate stays with htb) */
    size_t trace_len;
    long link_limit_bytes;
};

struct entry {
    uint64_t due_ns, seq;
    uint32_t slot, len;
};

struct counters {
    unsigned long long rx_a, rx_b, tx_a, tx_b, lost, over_limit, duplicated, reordered,
        send_errors, link_dropped, opportunities;
};

/* The trace's link: a FIFO of frames out of the delay line, served at the opportunities. */
#define OPPORTUNITY_BYTES 1500
#define L2_BYTES (sizeof(struct virtio_net_hdr) + ETH_HLEN) /* what Mahimahi's IP count lacks */
struct queued {
    uint32_t slot, len, left; /* left: IP bytes still to go out */
};

static volatile sig_atomic_t reload_requested, stop_requested;
static struct config cfg;
static struct counters count;
static unsigned char *pool;
static uint32_t free_slots[POOL_SLOTS];
static int free_top;
static struct entry heap[POOL_SLOTS];
static int heap_len;
static uint64_t next_seq;
static uint64_t prng_state;
static int ge_bad;
static struct queued link_fifo[POOL_SLOTS];
static int fifo_head, fifo_len;
static int realtime; /* 1 when it runs SCHED_FIFO (take_realtime) */
static long fifo_bytes;
static uint64_t trace_base_ns, next_opportunity;

static void on_hup(int sig) { (void)sig; reload_requested = 1; }
static void on_term(int sig) { (void)sig; stop_requested = 1; }

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* splitmix64: seedable, so a run's impairments can be repeated. */
static uint32_t draw(void)
{
    uint64_t z = (prng_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return (uint32_t)((z ^ (z >> 31)) >> 32);
}

/* A percentage as netem's 32-bit threshold (what tc's get_percent gives the kernel). */
static uint32_t threshold(double pct)
{
    if (pct <= 0) return 0;
    if (pct >= 100) return UINT32_MAX;
    return (uint32_t)(pct / 100.0 * UINT32_MAX + 0.5);
}

static int load_dist(const char *path, struct config *c)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "delayline: cannot open distribution %s: %s\n", path, strerror(errno));
        return -1;
    }
    char line[4096];
    c->dist_size = 0;
    while (fgets(line, sizeof line, f)) {
        if (line[0] == '#') continue;
        char *p = line, *end;
        for (;;) {
            long v = strtol(p, &end, 10);
            if (end == p) break;
            if (c->dist_size == DIST_MAX) { fclose(f); return -1; }
            c->dist[c->dist_size++] = (short)v;
            p = end;
        }
    }
    fclose(f);
    return c->dist_size > 0 ? 0 : -1;
}

static int load_trace(const char *path, struct config *c)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "delayline: cannot open trace %s: %s\n", path, strerror(errno));
        return -1;
    }
    size_t cap = 4096;
    c->trace = malloc(cap * sizeof *c->trace);
    c->trace_len = 0;
    unsigned long t, previous = 0;
    while (c->trace && fscanf(f, "%lu", &t) == 1) {
        if (t < previous || t > UINT32_MAX) break;
        if (c->trace_len == cap) {
            uint32_t *grown = realloc(c->trace, (cap *= 2) * sizeof *c->trace);
            if (!grown) break;
            c->trace = grown;
        }
        c->trace[c->trace_len++] = (uint32_t)(previous = t);
    }
    int complete = feof(f) && c->trace && c->trace_len > 0 && c->trace[c->trace_len - 1] > 0;
    fclose(f);
    if (!complete) {
        fprintf(stderr, "delayline: bad trace %s (Mahimahi's format, lasting > 0 ms)\n", path);
        free(c->trace);
        c->trace = NULL;
        return -1;
    }
    return 0;
}

static int read_config(const char *path, struct config *c)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "delayline: cannot open %s: %s\n", path, strerror(errno));
        return -1;
    }
    memset(c, 0, sizeof *c);
    c->limit = 1000;
    c->link_limit_bytes = 1500000;
    char line[512];
    int rc = 0;
    while (rc == 0 && fgets(line, sizeof line, f)) {
        char key[64], value[400];
        if (line[0] == '#' || line[0] == '\n') continue;
        if (sscanf(line, "%63[^=]=%399s", key, value) != 2) {
            fprintf(stderr, "delayline: bad line in %s: %s", path, line);
            rc = -1;
        } else if (!strcmp(key, "delay_us")) c->delay_ns = (int64_t)(atof(value) * 1000);
        else if (!strcmp(key, "jitter_us")) c->jitter_ns = (int64_t)(atof(value) * 1000);
        else if (!strcmp(key, "distribution")) rc = strcmp(value, "uniform") ? load_dist(value, c) : 0;
        else if (!strcmp(key, "loss_pct")) c->loss = threshold(atof(value));
        else if (!strcmp(key, "ge_p")) { c->gemodel = 1; c->ge_p = threshold(atof(value)); }
        else if (!strcmp(key, "ge_r")) c->ge_r = threshold(atof(value));
        else if (!strcmp(key, "ge_loss_bad")) c->ge_h = threshold(100 - atof(value));
        else if (!strcmp(key, "ge_loss_good")) c->ge_k1 = threshold(atof(value));
        else if (!strcmp(key, "reorder_pct")) c->reorder = threshold(atof(value));
        else if (!strcmp(key, "duplicate_pct")) c->duplicate = threshold(atof(value));
        else if (!strcmp(key, "limit")) c->limit = atol(value);
        else if (!strcmp(key, "seed")) c->seed = strtoull(value, NULL, 10);
        else if (!strcmp(key, "generation")) c->generation = atol(value);
        else if (!strcmp(key, "trace")) {
            snprintf(c->trace_path, sizeof c->trace_path, "%s", value);
            rc = load_trace(value, c);
        } else if (!strcmp(key, "link_limit_bytes")) c->link_limit_bytes = atol(value);
        else {
            fprintf(stderr, "delayline: unknown key %s in %s\n", key, path);
            rc = -1;
        }
    }
    fclose(f);
    if (c->limit < 1 || c->limit > POOL_SLOTS - BATCH) c->limit = POOL_SLOTS - BATCH;
    if (c->link_limit_bytes < OPPORTUNITY_BYTES) c->link_limit_bytes = OPPORTUNITY_BYTES;
    if (rc) {
        free(c->trace);
        c->trace = NULL;
    }
    return rc;
}

static void write_applied(const char *path)
{
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (!f) return;
    fprintf(f, "generation=%ld\nrx_a=%llu\nrx_b=%llu\ntx_a=%llu\ntx_b=%llu\nlost=%llu\n"
               "over_limit=%llu\nduplicated=%llu\nreordered=%llu\nsend_errors=%llu\n"
               "queued=%d\nlink_dropped=%llu\nlink_queued=%d\nopportunities=%llu\n"
               "trace_start_ns=%llu\nrealtime=%d\n",
            cfg.generation, count.rx_a, count.rx_b, count.tx_a, count.tx_b, count.lost,
            count.over_limit, count.duplicated, count.reordered, count.send_errors, heap_len,
            count.link_dropped, fifo_len, count.opportunities,
            cfg.trace ? (unsigned long long)trace_base_ns : 0ull, realtime);
    fclose(f);
    rename(tmp, path);
}

/* netem's tabledist(): mu + sigma * table value / DIST_SCALE, or uniform without a table. */
static int64_t tabledist(int64_t mu, int64_t sigma)
{
    if (sigma == 0) return mu;
    uint32_t rnd = draw();
    if (cfg.dist_size == 0) return (int64_t)(rnd % (uint64_t)(2 * sigma)) + mu - sigma;
    int64_t t = cfg.dist[rnd % (uint32_t)cfg.dist_size];
    int64_t x = (sigma % DIST_SCALE) * t;
    x += x >= 0 ? DIST_SCALE / 2 : -DIST_SCALE / 2;
    return x / DIST_SCALE + (sigma / DIST_SCALE) * t + mu;
}

/* netem's loss_event(): random, or the Gilbert-Elliott chain (state moves, then decides). */
static int loss_event(void)
{
    if (!cfg.gemodel) return cfg.loss && cfg.loss >= draw();
    if (!ge_bad) {
        if (draw() < cfg.ge_p) ge_bad = 1;
        if (draw() < cfg.ge_k1) return 1;
    } else {
        if (draw() < cfg.ge_r) ge_bad = 0;
        if (draw() > cfg.ge_h) return 1;
    }
    return 0;
}

/* Due first; equal times leave in arrival order. */
static int earlier(const struct entry *a, const struct entry *b)
{
    return a->due_ns < b->due_ns || (a->due_ns == b->due_ns && a->seq < b->seq);
}

static void heap_push(struct entry e)
{
    int i = heap_len++;
    while (i > 0) {
        int parent = (i - 1) / 2;
        if (earlier(&heap[parent], &e)) break;
        heap[i] = heap[parent];
        i = parent;
    }
    heap[i] = e;
}

static struct entry heap_pop(void)
{
    struct entry top = heap[0], last = heap[--heap_len];
    int i = 0;
    for (;;) {
        int child = 2 * i + 1;
        if (child >= heap_len) break;
        if (child + 1 < heap_len && earlier(&heap[child + 1], &heap[child])) child++;
        if (earlier(&last, &heap[child])) break;
        heap[i] = heap[child];
        i = child;
    }
    heap[i] = last;
    return top;
}

/* One copy into the delay line: netem's limit, then reorder-or-delay. */
static void enqueue(uint32_t slot, uint32_t len, uint64_t now)
{
    if (heap_len >= cfg.limit) {
        count.over_limit++;
        free_slots[free_top++] = slot;
        return;
    }
    uint64_t due;
    if (cfg.reorder && cfg.delay_ns && cfg.reorder >= draw()) {
        due = now; /* netem sends these at once, ahead of the delayed ones */
        count.reordered++;
    } else {
        int64_t delay = tabledist(cfg.delay_ns, cfg.jitter_ns);
        due = now + (uint64_t)(delay > 0 ? delay : 0);
    }
    heap_push((struct entry){due, next_seq++, slot, len});
}

/* netem_enqueue()'s order: duplicate?, loss takes one copy, the clone gets its own draws. */
static void impair(uint32_t slot, uint32_t len, uint64_t now)
{
    int copies = 1 + (cfg.duplicate && cfg.duplicate >= draw());
    if (loss_event()) copies--;
    if (copies == 0) {
        count.lost++;
        free_slots[free_top++] = slot;
        return;
    }
    if (copies > 1 && free_top > 0) {
        if (!loss_event()) {
            uint32_t clone = free_slots[--free_top];
            memcpy(pool + (size_t)clone * SLOT_BYTES, pool + (size_t)slot * SLOT_BYTES, len);
            count.duplicated++;
            enqueue(clone, len, now);
        } else {
            count.lost++;
        }
    }
    enqueue(slot, len, now);
}

static int open_socket(const char *ifname)
{
    int fd = socket(AF_PACKET, SOCK_RAW, htons(ETH_P_ALL));
    if (fd < 0) { perror("delayline: socket"); return -1; }
    int on = 1, size = SOCKET_BUFFER;
    if (setsockopt(fd, SOL_PACKET, PACKET_VNET_HDR, &on, sizeof on) ||
        setsockopt(fd, SOL_PACKET, PACKET_IGNORE_OUTGOING, &on, sizeof on) ||
        setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &size, sizeof size) ||
        setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &size, sizeof size)) {
        perror("delayline: setsockopt");
        close(fd);
        return -1;
    }
    struct sockaddr_ll addr = {0};
    addr.sll_family = AF_PACKET;
    addr.sll_protocol = htons(ETH_P_ALL);
    addr.sll_ifindex = (int)if_nametoindex(ifname);
    if (addr.sll_ifindex == 0 || bind(fd, (struct sockaddr *)&addr, sizeof addr)) {
        fprintf(stderr, "delayline: cannot bind to %s: %s\n", ifname, strerror(errno));
        close(fd);
        return -1;
    }
    return fd;
}

/* One message per iovec, for recvmmsg/sendmmsg. */
static void point_msgs(struct mmsghdr *msgs, struct iovec *iov, int n)
{
    for (int i = 0; i < n; i++) {
        memset(&msgs[i], 0, sizeof msgs[i]);
        msgs[i].msg_hdr.msg_iov = &iov[i];
        msgs[i].msg_hdr.msg_iovlen = 1;
    }
}

static void send_batch(int fd, struct mmsghdr *msgs, struct iovec *iov, int n,
                       unsigned long long *sent)
{
    point_msgs(msgs, iov, n);
    int done = 0;
    while (done < n) {
        int r = sendmmsg(fd, msgs + done, (unsigned)(n - done), 0);
        if (r < 0) {
            if (errno == EINTR) continue;
            count.send_errors++; /* the frame is lost, as on a full device queue */
            done++;
            continue;
        }
        done += r;
        *sent += (unsigned long long)r;
    }
}

/* Frames read on b pass to a unchanged: only the direction out of the router is emulated. */
static void pass_through(int from, int to)
{
    static unsigned char buf[BATCH][SLOT_BYTES];
    struct mmsghdr msgs[BATCH];
    struct iovec iov[BATCH];
    for (int i = 0; i < BATCH; i++)
        iov[i] = (struct iovec){buf[i], SLOT_BYTES};
    point_msgs(msgs, iov, BATCH);
    int n = recvmmsg(from, msgs, BATCH, MSG_DONTWAIT, NULL);
    if (n <= 0) return;
    count.rx_b += (unsigned long long)n;
    for (int i = 0; i < n; i++) iov[i].iov_len = msgs[i].msg_len;
    send_batch(to, msgs, iov, n, &count.tx_a);
}

static void take_in(int from)
{
    struct mmsghdr msgs[BATCH];
    struct iovec iov[BATCH];
    uint32_t slots[BATCH];
    int want = free_top < BATCH ? free_top : BATCH;
    static unsigned char spill[SLOT_BYTES];
    if (want == 0) { /* pool full: read one and drop it, as netem over its limit */
        if (recv(from, spill, sizeof spill, MSG_DONTWAIT) > 0) { count.rx_a++; count.over_limit++; }
        return;
    }
    for (int i = 0; i < want; i++) {
        slots[i] = free_slots[--free_top];
        iov[i] = (struct iovec){pool + (size_t)slots[i] * SLOT_BYTES, SLOT_BYTES};
    }
    point_msgs(msgs, iov, want);
    int n = recvmmsg(from, msgs, (unsigned)want, MSG_DONTWAIT, NULL);
    uint64_t now = now_ns();
    for (int i = 0; i < want; i++) {
        if (i < n) {
            count.rx_a++;
            impair(slots[i], msgs[i].msg_len, now);
        } else {
            free_slots[free_top++] = slots[i];
        }
    }
}

/* The delay is over: into the trace's link queue (drop-tail), or out when there is no trace. */
static void to_link(struct entry e)
{
    uint32_t ip = e.len > L2_BYTES ? e.len - (uint32_t)L2_BYTES : 1;
    if (fifo_bytes + ip > cfg.link_limit_bytes) {
        count.link_dropped++;
        free_slots[free_top++] = e.slot;
        return;
    }
    fifo_bytes += ip;
    link_fifo[(fifo_head + fifo_len++) % POOL_SLOTS] = (struct queued){e.slot, e.len, ip};
}

/* mm-link sees IP packets only (a TUN device): ARP, which an Ethernet LAN adds, skips the
 * trace's queue, or a full queue would starve the router's neighbour probes and stall the
 * path for a second at a time. */
static int is_ip(struct entry e)
{
    const unsigned char *frame = pool + (size_t)e.slot * SLOT_BYTES + sizeof(struct virtio_net_hdr);
    if (e.len < L2_BYTES) return 0;
    uint16_t type = (uint16_t)(frame[12] << 8 | frame[13]);
    return type == ETH_P_IP || type == ETH_P_IPV6;
}

static uint64_t opportunity_ns(uint64_t k)
{
    uint64_t period = cfg.trace[cfg.trace_len - 1];
    uint64_t ms = (k / cfg.trace_len) * period + cfg.trace[k % cfg.trace_len];
    return trace_base_ns + ms * 1000000ull;
}

/* mm-link's use_a_delivery_opportunity(), for every opportunity up to now. */
static void serve_link(int to, uint64_t now)
{
    struct mmsghdr msgs[BATCH];
    struct iovec iov[BATCH];
    uint32_t slots[BATCH];
    int n = 0;
    while (opportunity_ns(next_opportunity) <= now) {
        next_opportunity++;
        count.opportunities++;
        uint32_t budget = OPPORTUNITY_BYTES;
        while (budget > 0 && fifo_len > 0) {
            struct queued *q = &link_fifo[fifo_head];
            if (q->left > budget) {
                q->left -= budget;
                break;
            }
            budget -= q->left;
            fifo_bytes -= q->len > L2_BYTES ? q->len - (uint32_t)L2_BYTES : 1;
            slots[n] = q->slot;
            iov[n] = (struct iovec){pool + (size_t)q->slot * SLOT_BYTES, q->len};
            fifo_head = (fifo_head + 1) % POOL_SLOTS;
            fifo_len--;
            if (++n == BATCH) {
                send_batch(to, msgs, iov, n, &count.tx_b);
                for (int i = 0; i < n; i++) free_slots[free_top++] = slots[i];
                n = 0;
            }
        }
    }
    send_batch(to, msgs, iov, n, &count.tx_b);
    for (int i = 0; i < n; i++) free_slots[free_top++] = slots[i];
}

static void send_due(int to, uint64_t now)
{
    struct mmsghdr msgs[BATCH];
    struct iovec iov[BATCH];
    uint32_t slots[BATCH];
    if (cfg.trace) {
        while (heap_len > 0 && heap[0].due_ns <= now) {
            struct entry e = heap_pop();
            if (is_ip(e)) {
                to_link(e);
                continue;
            }
            struct iovec one = {pool + (size_t)e.slot * SLOT_BYTES, e.len};
            send_batch(to, msgs, &one, 1, &count.tx_b);
            free_slots[free_top++] = e.slot;
        }
        serve_link(to, now);
        return;
    }
    while (heap_len > 0 && heap[0].due_ns <= now) {
        int n = 0;
        while (n < BATCH && heap_len > 0 && heap[0].due_ns <= now) {
            struct entry e = heap_pop();
            slots[n] = e.slot;
            iov[n] = (struct iovec){pool + (size_t)e.slot * SLOT_BYTES, e.len};
            n++;
        }
        send_batch(to, msgs, iov, n, &count.tx_b);
        for (int i = 0; i < n; i++) free_slots[free_top++] = slots[i];
    }
}

/* Frames still in the trace's queue when the trace goes away leave at once. */
static void flush_link(int to)
{
    struct mmsghdr msgs[1];
    while (fifo_len > 0) {
        struct queued q = link_fifo[fifo_head];
        struct iovec iov = {pool + (size_t)q.slot * SLOT_BYTES, q.len};
        send_batch(to, msgs, &iov, 1, &count.tx_b);
        free_slots[free_top++] = q.slot;
        fifo_head = (fifo_head + 1) % POOL_SLOTS;
        fifo_len--;
    }
    fifo_bytes = 0;
}

static int apply_config(const char *config_path, const char *applied_path, int to)
{
    struct config next;
    if (read_config(config_path, &next)) return -1;
    int reseed = next.seed != cfg.seed || cfg.generation == 0;
    if (!next.trace) flush_link(to);
    free(cfg.trace);
    cfg = next;
    trace_base_ns = now_ns();
    next_opportunity = 0;
    if (reseed) prng_state = cfg.seed ? cfg.seed : (uint64_t)now_ns();
    if (applied_path) write_applied(applied_path);
    return 0;
}

static void usage(void)
{
    fprintf(stderr, "usage: quicbed-delayline --a IFACE --b IFACE --config FILE "
                    "[--applied FILE]\n");
}

/* The link must not wait for the endpoints' CPU. At the default priority, three busy loops
 * on this 2-core host held its wake-ups back: ping's 99th percentile on an 80 ms path rose to
 * +3.0 ms (max +3.7), where netem, which runs in softirq, waits for no task. As SCHED_FIFO it
 * stays within 0.1 ms. Without the privilege it runs anyway and says so (--applied). */
static void take_realtime(void)
{
    struct sched_param sp = {.sched_priority = 50};
    realtime = sched_setscheduler(0, SCHED_FIFO, &sp) == 0;
    if (!realtime)
        fprintf(stderr, "delayline: no real-time priority (%s): busy endpoints can delay packets\n",
                strerror(errno));
}

int main(int argc, char **argv)
{
    const char *a_name = NULL, *b_name = NULL, *config_path = NULL, *applied_path = NULL;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--a")) a_name = argv[i + 1];
        else if (!strcmp(argv[i], "--b")) b_name = argv[i + 1];
        else if (!strcmp(argv[i], "--config")) config_path = argv[i + 1];
        else if (!strcmp(argv[i], "--applied")) applied_path = argv[i + 1];
        else { usage(); return 2; }
    }
    if (!a_name || !b_name || !config_path) { usage(); return 2; }
    if (apply_config(config_path, NULL, -1)) return 2;

    pool = malloc((size_t)POOL_SLOTS * SLOT_BYTES);
    if (!pool) { perror("delayline: malloc"); return 1; }
    for (int i = POOL_SLOTS - 1; i >= 0; i--) free_slots[free_top++] = (uint32_t)i;

    int a = open_socket(a_name), b = open_socket(b_name);
    if (a < 0 || b < 0) return 1;
    prctl(PR_SET_TIMERSLACK, 1UL); /* wake on time: the default 50 us slack is jitter */
    take_realtime();

    /* Signals are only taken inside ppoll, so a SIGHUP is never missed between checks. */
    sigset_t blocked, during_poll;
    sigemptyset(&blocked);
    sigaddset(&blocked, SIGHUP);
    sigaddset(&blocked, SIGTERM);
    sigaddset(&blocked, SIGINT);
    sigprocmask(SIG_BLOCK, &blocked, &during_poll);
    struct sigaction sa = {0};
    sa.sa_handler = on_hup;
    sigaction(SIGHUP, &sa, NULL);
    sa.sa_handler = on_term;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    if (applied_path) write_applied(applied_path);

    struct pollfd fds[2] = {{.fd = a, .events = POLLIN}, {.fd = b, .events = POLLIN}};
    while (!stop_requested) {
        if (reload_requested) {
            reload_requested = 0;
            if (apply_config(config_path, applied_path, b))
                fprintf(stderr, "delayline: keeping the previous settings\n");
        }
        uint64_t now = now_ns();
        send_due(b, now);
        struct timespec wait, *timeout = NULL;
        uint64_t wake = heap_len > 0 ? heap[0].due_ns : UINT64_MAX;
        if (cfg.trace && fifo_len > 0 && opportunity_ns(next_opportunity) < wake)
            wake = opportunity_ns(next_opportunity);
        if (wake != UINT64_MAX) {
            uint64_t left = wake > now ? wake - now : 0;
            wait.tv_sec = (time_t)(left / 1000000000ull);
            wait.tv_nsec = (long)(left % 1000000000ull);
            timeout = &wait;
        }
        int r = ppoll(fds, 2, timeout, &during_poll);
        if (r < 0) {
            if (errno == EINTR) continue;
            perror("delayline: ppoll");
            return 1;
        }
        if (fds[0].revents & POLLIN) take_in(a);
        if (fds[1].revents & POLLIN) pass_through(b, a);
    }
    if (applied_path) write_applied(applied_path);
    return 0;
}
