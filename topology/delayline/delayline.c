/*
 * quicbed-delayline: netem's delay stage in user space, for kernels without sch_netem.
 *
 * It joins two interfaces with AF_PACKET sockets. Frames read on --a (the router's egress)
 * are impaired the way netem impairs them (delay, jitter from the same iproute2 tables,
 * random or Gilbert-Elliott loss, reordering, duplication, a delay-line limit) and sent on
 * --b when due; frames read on --b go back to --a at once (or, with `--return kernel`, the
 * caller has the kernel redirect them, tc mirred, and --b is only written). The rate stage
 * (htb) stays in the host kernel, after this one, exactly as with netem.
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
 *
 * Super-frames: where the path's offloads are on, the kernel hands over GSO frames (up to
 * 64 KB: one TCP or UDP header and the payload of many wire packets, the wire packet size in
 * the vnet header's gso_size). With only a delay configured, no decision is per packet, so a
 * super-frame is delayed whole and sent on whole, counted as the wire packets it carries
 * (counters, limit), and htb after it charges each wire packet's bytes (qdisc_pkt_len). Where
 * a per-packet decision is configured (loss, jitter, reordering, duplication, a trace), it is
 * cut here into the wire packets the kernel's GSO would send, and each gets its own draws,
 * exactly as a path without offloads.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <endian.h>
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

#ifndef VIRTIO_NET_HDR_GSO_UDP_L4
#define VIRTIO_NET_HDR_GSO_UDP_L4 5 /* Linux 6.2's uapi; the kernel sends it since 4.18 */
#endif
#ifndef PACKET_IGNORE_OUTGOING
#define PACKET_IGNORE_OUTGOING 23
#endif

#define SLOT_BYTES 2048 /* a vnet header and one MTU-sized frame */
#define SMALL_SLOTS 32768
/* A vnet header and a GSO super-frame: 64 KB of IP packet and its Ethernet header. */
#define BIG_BYTES (sizeof(struct virtio_net_hdr) + ETH_HLEN + 65536 + 64)
#define BIG_SLOTS 1024 /* 64 MB: at 1 Gbit/s, half a second of delay line in super-frames */
#define POOL_SLOTS (SMALL_SLOTS + BIG_SLOTS)
#define VNET_BYTES sizeof(struct virtio_net_hdr)
#define BATCH 64
#define DIST_SCALE 8192 /* netem's NETEM_DIST_SCALE */
#define DIST_MAX 16384
#define SOCKET_BUFFER (8 << 20)
/* At high packet rates a wake-up per frame was most of the delay line's CPU (in this VM, 2/3
 * of it in context switches at 20k frames/s). Once awake it sleeps at least this long before
 * it lets an arrival wake it again, and reads what came meanwhile in batches; the kernel's
 * receive timestamps date each frame, so its delay counts from its arrival. Departures are
 * timed by the clock as before, gap or not; an idle link sleeps until an arrival. */
#ifndef WAKE_GAP_NS
#define WAKE_GAP_NS 250000ull
#endif

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
    uint32_t slot, len, segs; /* segs: wire packets in the frame (1 unless a super-frame) */
};

struct counters {
    unsigned long long rx_a, rx_b, tx_a, tx_b, lost, over_limit, duplicated, reordered,
        send_errors, link_dropped, opportunities, super_frames, segmented;
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
/* Slots 0..SMALL_SLOTS-1 hold one wire frame each, the rest a super-frame each. */
static unsigned char *small_pool, *big_pool;
static uint32_t free_small[SMALL_SLOTS], free_big[BIG_SLOTS];
static int small_top, big_top;
static struct entry heap[POOL_SLOTS];
static int heap_len;
static long heap_segs; /* wire packets in the delay line: what netem's limit counts */
static uint64_t next_seq;
static uint64_t prng_state;
static int ge_bad;
static struct queued link_fifo[POOL_SLOTS];
static int fifo_head, fifo_len;
static int realtime; /* 1 when it runs SCHED_FIFO (take_realtime) */
static long fifo_bytes;
static uint64_t trace_base_ns, next_opportunity;

static unsigned char *slot_ptr(uint32_t slot)
{
    return slot < SMALL_SLOTS ? small_pool + (size_t)slot * SLOT_BYTES
                              : big_pool + (size_t)(slot - SMALL_SLOTS) * BIG_BYTES;
}

static void release(uint32_t slot)
{
    if (slot < SMALL_SLOTS) free_small[small_top++] = slot;
    else free_big[big_top++] = slot - SMALL_SLOTS;
}

/* A free slot, big or small (UINT32_MAX: none left). */
static uint32_t take_slot(int big)
{
    if (big) return big_top > 0 ? free_big[--big_top] + SMALL_SLOTS : UINT32_MAX;
    return small_top > 0 ? free_small[--small_top] : UINT32_MAX;
}

static void on_hup(int sig) { (void)sig; reload_requested = 1; }
static void on_term(int sig) { (void)sig; stop_requested = 1; }
/* Nothing to do but return: handled, a SIGCONT ends ppoll with EINTR (below). */
static void on_cont(int sig) { (void)sig; }

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
               "trace_start_ns=%llu\nrealtime=%d\nsuper_frames=%llu\nsegmented=%llu\n",
            cfg.generation, count.rx_a, count.rx_b, count.tx_a, count.tx_b, count.lost,
            count.over_limit, count.duplicated, count.reordered, count.send_errors, (int)heap_segs,
            count.link_dropped, fifo_len, count.opportunities,
            cfg.trace ? (unsigned long long)trace_base_ns : 0ull, realtime, count.super_frames,
            count.segmented);
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

/* One copy into the delay line: netem's limit (in wire packets), then reorder-or-delay. */
static void enqueue(uint32_t slot, uint32_t len, uint32_t segs, uint64_t now)
{
    if (heap_segs + segs > cfg.limit) {
        count.over_limit += segs;
        release(slot);
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
    heap_segs += segs;
    heap_push((struct entry){due, next_seq++, slot, len, segs});
}

/* netem_enqueue()'s order: duplicate?, loss takes one copy, the clone gets its own draws.
 * A super-frame only comes here when none of these is configured (per_packet). */
static void impair(uint32_t slot, uint32_t len, uint32_t segs, uint64_t now)
{
    int copies = 1 + (cfg.duplicate && cfg.duplicate >= draw());
    if (loss_event()) copies--;
    if (copies == 0) {
        count.lost++;
        release(slot);
        return;
    }
    if (copies > 1 && small_top > 0) {
        if (!loss_event()) {
            uint32_t clone = take_slot(0);
            memcpy(slot_ptr(clone), slot_ptr(slot), len);
            count.duplicated++;
            enqueue(clone, len, 1, now);
        } else {
            count.lost++;
        }
    }
    enqueue(slot, len, segs, now);
}

/* Whether a frame needs its own decision: then super-frames are cut into wire packets. */
static int per_packet(void)
{
    return cfg.loss || cfg.gemodel || cfg.jitter_ns || cfg.reorder || cfg.duplicate ||
           cfg.trace != NULL;
}

/* A GSO super-frame's layout, from its vnet header and headers (NULL-safe checks: a frame
 * that is not one the kernel's TCP or UDP GSO would make is passed on as it is). */
struct gso_frame {
    uint32_t l3, l4, payload, gso_size, segs; /* offsets from the Ethernet header */
    int ipv4, tcp;
};

static uint16_t get16(const unsigned char *p) { return (uint16_t)(p[0] << 8 | p[1]); }
static void put16(unsigned char *p, uint32_t v) { p[0] = (unsigned char)(v >> 8); p[1] = (unsigned char)v; }

static int parse_gso(const unsigned char *frame, uint32_t len, struct gso_frame *g)
{
    const struct virtio_net_hdr *vh = (const struct virtio_net_hdr *)frame;
    const unsigned char *eth = frame + VNET_BYTES;
    uint32_t eth_len = len > VNET_BYTES ? len - (uint32_t)VNET_BYTES : 0;
    uint8_t type = vh->gso_type & (uint8_t)~VIRTIO_NET_HDR_GSO_ECN;
    g->gso_size = le16toh(vh->gso_size);
    if (type == VIRTIO_NET_HDR_GSO_NONE || g->gso_size == 0 || eth_len < ETH_HLEN + 40) return 0;
    g->tcp = type == VIRTIO_NET_HDR_GSO_TCPV4 || type == VIRTIO_NET_HDR_GSO_TCPV6;
    if (!g->tcp && type != VIRTIO_NET_HDR_GSO_UDP_L4) return 0;
    uint16_t ethertype = get16(eth + 12);
    g->ipv4 = ethertype == ETH_P_IP;
    if (!g->ipv4 && ethertype != ETH_P_IPV6) return 0;
    g->l3 = ETH_HLEN;
    if (vh->flags & VIRTIO_NET_HDR_F_NEEDS_CSUM) g->l4 = le16toh(vh->csum_start);
    else g->l4 = g->ipv4 ? ETH_HLEN + (uint32_t)(eth[ETH_HLEN] & 0x0f) * 4 : ETH_HLEN + 40;
    if (g->l4 + 20 > eth_len) return 0;
    g->payload = g->l4 + (g->tcp ? (uint32_t)(eth[g->l4 + 12] >> 4) * 4 : 8);
    if (g->payload >= eth_len || VNET_BYTES + g->payload + g->gso_size > SLOT_BYTES) return 0;
    g->segs = (eth_len - g->payload + g->gso_size - 1) / g->gso_size;
    return 1;
}

/* How many wire packets a frame stands for. */
static uint32_t wire_packets(const unsigned char *frame, uint32_t len)
{
    struct gso_frame g;
    return parse_gso(frame, len, &g) ? g.segs : 1;
}

static uint32_t sum16(const unsigned char *p, uint32_t n, uint32_t sum)
{
    for (uint32_t i = 0; i + 1 < n; i += 2) sum += get16(p + i);
    if (n & 1) sum += (uint32_t)p[n - 1] << 8;
    return sum;
}

static uint16_t fold(uint32_t sum)
{
    while (sum >> 16) sum = (sum & 0xffff) + (sum >> 16);
    return (uint16_t)sum;
}

/* One wire packet of a super-frame, as tcp_gso_segment/__udp_gso_segment and
 * inet_gso_segment make it: its own IP length (and IPv4 id and header checksum), TCP sequence
 * number, FIN/PSH on the last packet only and CWR on the first only, UDP length; the L4
 * checksum left to the kernel (CHECKSUM_PARTIAL) over the pseudo-header of its own length. */
static uint32_t cut_segment(unsigned char *out, const unsigned char *in, uint32_t len,
                            const struct gso_frame *g, uint32_t i)
{
    const unsigned char *eth = in + VNET_BYTES;
    uint32_t eth_len = len - (uint32_t)VNET_BYTES, offset = g->payload + i * g->gso_size;
    uint32_t chunk = eth_len - offset < g->gso_size ? eth_len - offset : g->gso_size;
    uint32_t seg_len = g->payload + chunk;
    struct virtio_net_hdr vh = {.flags = VIRTIO_NET_HDR_F_NEEDS_CSUM,
                                .gso_type = VIRTIO_NET_HDR_GSO_NONE,
                                .hdr_len = htole16((uint16_t)g->payload),
                                .csum_start = htole16((uint16_t)g->l4),
                                .csum_offset = htole16(g->tcp ? 16 : 6)};
    memcpy(out, &vh, sizeof vh);
    unsigned char *seg = out + VNET_BYTES, *ip = seg + g->l3, *l4 = seg + g->l4;
    memcpy(seg, eth, g->payload);
    memcpy(seg + g->payload, eth + offset, chunk);
    uint32_t l4_len = seg_len - g->l4, pseudo;
    if (g->ipv4) {
        uint32_t ihl = (uint32_t)(ip[0] & 0x0f) * 4;
        put16(ip + 2, seg_len - g->l3);
        put16(ip + 4, get16(eth + g->l3 + 4) + i);
        put16(ip + 10, 0);
        put16(ip + 10, (uint16_t)~fold(sum16(ip, ihl, 0)));
        pseudo = sum16(ip + 12, 8, 0);
    } else {
        put16(ip + 4, seg_len - g->l3 - 40);
        pseudo = sum16(ip + 8, 32, 0);
    }
    pseudo += (g->tcp ? 6u : 17u) + l4_len;
    if (g->tcp) {
        uint32_t seq = (uint32_t)get16(l4 + 4) << 16 | get16(l4 + 6);
        seq += i * g->gso_size;
        put16(l4 + 4, seq >> 16);
        put16(l4 + 6, seq & 0xffff);
        if (i + 1 < g->segs) l4[13] &= (unsigned char)~0x09; /* FIN, PSH: last only */
        if (i > 0) l4[13] &= (unsigned char)~0x80;           /* CWR: first only */
        put16(l4 + 16, fold(pseudo));
    } else {
        put16(l4 + 4, l4_len);
        put16(l4 + 6, fold(pseudo));
    }
    return VNET_BYTES + seg_len;
}

/* A received frame into the delay line: whole, or cut into wire packets where each needs its
 * own decision. It was read into a small slot and, past its first SLOT_BYTES, a big one
 * (take_in): a wire frame stays in the small one, a super-frame is joined in the big one. */
static void admit(uint32_t small, uint32_t big, uint32_t len, uint64_t now)
{
    uint32_t slot = small;
    if (len > SLOT_BYTES) {
        memcpy(slot_ptr(big), slot_ptr(small), SLOT_BYTES);
        release(small);
        slot = big;
    } else {
        release(big);
    }
    const unsigned char *frame = slot_ptr(slot);
    struct gso_frame g;
    if (!parse_gso(frame, len, &g)) {
        count.rx_a++;
        impair(slot, len, 1, now);
        return;
    }
    count.rx_a += g.segs;
    if (!per_packet()) {
        count.super_frames++;
        impair(slot, len, g.segs, now);
        return;
    }
    count.segmented++;
    for (uint32_t i = 0; i < g.segs; i++) {
        uint32_t wire = take_slot(0);
        if (wire == UINT32_MAX) { count.over_limit += g.segs - i; break; }
        impair(wire, cut_segment(slot_ptr(wire), frame, len, &g, i), 1, now);
    }
    release(slot);
}

/* A packet socket on ifname; `receive` 0: for sending only (bound to no protocol, it is
 * handed no frames). */
static int open_socket(const char *ifname, int receive)
{
    int on = 1, size = SOCKET_BUFFER;
    uint16_t protocol = receive ? htons(ETH_P_ALL) : 0;
    int fd = socket(AF_PACKET, SOCK_RAW, protocol);
    if (fd < 0) { perror("delayline: socket"); return -1; }
    if (setsockopt(fd, SOL_PACKET, PACKET_VNET_HDR, &on, sizeof on) ||
        setsockopt(fd, SOL_SOCKET, SO_TIMESTAMPNS, &on, sizeof on) ||
        setsockopt(fd, SOL_PACKET, PACKET_IGNORE_OUTGOING, &on, sizeof on) ||
        setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &size, sizeof size) ||
        setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &size, sizeof size)) {
        perror("delayline: setsockopt");
        close(fd);
        return -1;
    }
    struct sockaddr_ll addr = {0};
    addr.sll_family = AF_PACKET;
    addr.sll_protocol = protocol;
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

/* Sends n frames; `sent` counts the wire packets of those that went (segs: each frame's,
 * NULL: one each). */
static void send_batch(int fd, struct mmsghdr *msgs, struct iovec *iov, const uint32_t *segs,
                       int n, unsigned long long *sent)
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
        for (int i = done; i < done + r; i++) *sent += segs ? segs[i] : 1;
        done += r;
    }
}

/* Each message read into two pieces: SLOT_BYTES, then the rest of a super-frame, so a wire
 * frame lands in a small buffer and only super-frames touch a big one. */
static void point_split(struct mmsghdr *msgs, struct iovec (*iov)[2], unsigned char *const *small,
                        unsigned char *const *big, int n)
{
    for (int i = 0; i < n; i++) {
        iov[i][0] = (struct iovec){small[i], SLOT_BYTES};
        iov[i][1] = (struct iovec){big[i] + SLOT_BYTES, BIG_BYTES - SLOT_BYTES};
        memset(&msgs[i], 0, sizeof msgs[i]);
        msgs[i].msg_hdr.msg_iov = iov[i];
        msgs[i].msg_hdr.msg_iovlen = 2;
    }
}

/* Frames read on b pass to a unchanged (super-frames whole): only the direction out of the
 * router is emulated. Returns whether it filled the batch. */
static int pass_through(int from, int to)
{
    static unsigned char small_buf[BATCH][SLOT_BYTES], big_buf[BATCH][BIG_BYTES];
    unsigned char *small[BATCH], *big[BATCH];
    struct mmsghdr msgs[BATCH];
    struct iovec iov[BATCH][2];
    for (int i = 0; i < BATCH; i++) {
        small[i] = small_buf[i];
        big[i] = big_buf[i];
    }
    point_split(msgs, iov, small, big, BATCH);
    int n = recvmmsg(from, msgs, BATCH, MSG_DONTWAIT, NULL);
    if (n <= 0) return 0;
    struct iovec out[BATCH];
    uint32_t segs[BATCH];
    for (int i = 0; i < n; i++) {
        uint32_t len = msgs[i].msg_len;
        if (len > SLOT_BYTES) memcpy(big[i], small[i], SLOT_BYTES);
        out[i] = (struct iovec){len > SLOT_BYTES ? big[i] : small[i], len};
        segs[i] = wire_packets(out[i].iov_base, len);
        count.rx_b += segs[i];
    }
    send_batch(to, msgs, out, segs, n, &count.tx_a);
    return n == BATCH;
}

/* When the kernel received a frame (SO_TIMESTAMPNS, CLOCK_REALTIME), on CLOCK_MONOTONIC;
 * `now` where it gives none or an implausible one. */
static uint64_t arrival_ns(struct msghdr *msg, uint64_t now, int64_t realtime_offset)
{
    for (struct cmsghdr *c = CMSG_FIRSTHDR(msg); c; c = CMSG_NXTHDR(msg, c)) {
        if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_TIMESTAMPNS) continue;
        struct timespec ts;
        memcpy(&ts, CMSG_DATA(c), sizeof ts);
        int64_t at = (int64_t)ts.tv_sec * 1000000000ll + ts.tv_nsec - realtime_offset;
        if (at > 0 && (uint64_t)at <= now && now - (uint64_t)at < 1000000000ull) return (uint64_t)at;
    }
    return now;
}

/* Reads a batch: each message into a small slot and, for a super-frame, a big one. Returns
 * whether it filled the batch (more may be waiting). */
static int take_in(int from)
{
    struct mmsghdr msgs[BATCH];
    struct iovec iov[BATCH][2];
    uint32_t small[BATCH], big[BATCH];
    unsigned char *small_at[BATCH], *big_at[BATCH];
    static char control[BATCH][CMSG_SPACE(sizeof(struct timespec))];
    int want = big_top < BATCH ? big_top : BATCH;
    if (want > small_top) want = small_top;
    if (want == 0) { /* pool full: read one and drop it, as netem over its limit */
        static unsigned char spill[BIG_BYTES];
        ssize_t got = recv(from, spill, sizeof spill, MSG_DONTWAIT);
        if (got > 0) {
            uint32_t segs = wire_packets(spill, (uint32_t)got);
            count.rx_a += segs;
            count.over_limit += segs;
        }
        return got > 0;
    }
    for (int i = 0; i < want; i++) {
        small[i] = take_slot(0);
        big[i] = take_slot(1);
        small_at[i] = slot_ptr(small[i]);
        big_at[i] = slot_ptr(big[i]);
    }
    point_split(msgs, iov, small_at, big_at, want);
    for (int i = 0; i < want; i++) {
        msgs[i].msg_hdr.msg_control = control[i];
        msgs[i].msg_hdr.msg_controllen = sizeof control[i];
    }
    int n = recvmmsg(from, msgs, (unsigned)want, MSG_DONTWAIT, NULL);
    struct timespec real;
    clock_gettime(CLOCK_REALTIME, &real);
    uint64_t now = now_ns();
    int64_t offset = (int64_t)real.tv_sec * 1000000000ll + real.tv_nsec - (int64_t)now;
    for (int i = 0; i < want; i++) {
        if (i < n) {
            admit(small[i], big[i], msgs[i].msg_len, arrival_ns(&msgs[i].msg_hdr, now, offset));
        } else {
            release(small[i]);
            release(big[i]);
        }
    }
    return n == want;
}

/* The delay is over: into the trace's link queue (drop-tail), or out when there is no trace. */
static void to_link(struct entry e)
{
    uint32_t ip = e.len > L2_BYTES ? e.len - (uint32_t)L2_BYTES : 1;
    if (fifo_bytes + ip > cfg.link_limit_bytes) {
        count.link_dropped++;
        release(e.slot);
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
    const unsigned char *frame = slot_ptr(e.slot) + VNET_BYTES;
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
            iov[n] = (struct iovec){slot_ptr(q->slot), q->len};
            fifo_head = (fifo_head + 1) % POOL_SLOTS;
            fifo_len--;
            if (++n == BATCH) {
                send_batch(to, msgs, iov, NULL, n, &count.tx_b);
                for (int i = 0; i < n; i++) release(slots[i]);
                n = 0;
            }
        }
    }
    send_batch(to, msgs, iov, NULL, n, &count.tx_b);
    for (int i = 0; i < n; i++) release(slots[i]);
}

static void send_due(int to, uint64_t now)
{
    struct mmsghdr msgs[BATCH];
    struct iovec iov[BATCH];
    uint32_t slots[BATCH], segs[BATCH];
    if (cfg.trace) {
        while (heap_len > 0 && heap[0].due_ns <= now) {
            struct entry e = heap_pop();
            heap_segs -= e.segs;
            if (is_ip(e)) {
                to_link(e);
                continue;
            }
            struct iovec one = {slot_ptr(e.slot), e.len};
            send_batch(to, msgs, &one, &e.segs, 1, &count.tx_b);
            release(e.slot);
        }
        serve_link(to, now);
        return;
    }
    while (heap_len > 0 && heap[0].due_ns <= now) {
        int n = 0;
        while (n < BATCH && heap_len > 0 && heap[0].due_ns <= now) {
            struct entry e = heap_pop();
            heap_segs -= e.segs;
            slots[n] = e.slot;
            segs[n] = e.segs;
            iov[n] = (struct iovec){slot_ptr(e.slot), e.len};
            n++;
        }
        send_batch(to, msgs, iov, segs, n, &count.tx_b);
        for (int i = 0; i < n; i++) release(slots[i]);
    }
}

/* Frames still in the trace's queue when the trace goes away leave at once. */
static void flush_link(int to)
{
    struct mmsghdr msgs[1];
    while (fifo_len > 0) {
        struct queued q = link_fifo[fifo_head];
        struct iovec iov = {slot_ptr(q.slot), q.len};
        send_batch(to, msgs, &iov, NULL, 1, &count.tx_b);
        release(q.slot);
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
                    "[--applied FILE] [--return kernel]\n");
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
    int kernel_returns = 0; /* --return kernel: tc mirred carries b to a; only a is read */
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--a")) a_name = argv[i + 1];
        else if (!strcmp(argv[i], "--b")) b_name = argv[i + 1];
        else if (!strcmp(argv[i], "--config")) config_path = argv[i + 1];
        else if (!strcmp(argv[i], "--applied")) applied_path = argv[i + 1];
        else if (!strcmp(argv[i], "--return") && !strcmp(argv[i + 1], "kernel")) kernel_returns = 1;
        else { usage(); return 2; }
    }
    if (!a_name || !b_name || !config_path) { usage(); return 2; }
    if (apply_config(config_path, NULL, -1)) return 2;

    small_pool = malloc((size_t)SMALL_SLOTS * SLOT_BYTES);
    big_pool = malloc((size_t)BIG_SLOTS * BIG_BYTES); /* touched only as far as it is used */
    if (!small_pool || !big_pool) { perror("delayline: malloc"); return 1; }
    for (int i = SMALL_SLOTS - 1; i >= 0; i--) free_small[small_top++] = (uint32_t)i;
    for (int i = BIG_SLOTS - 1; i >= 0; i--) free_big[big_top++] = (uint32_t)i;

    int a = open_socket(a_name, 1), b = open_socket(b_name, !kernel_returns);
    if (a < 0 || b < 0) return 1;
    prctl(PR_SET_TIMERSLACK, 1UL); /* wake on time: the default 50 us slack is jitter */
    take_realtime();

    /* Signals are only taken inside ppoll, so a SIGHUP is never missed between checks. */
    sigset_t blocked, during_poll;
    sigemptyset(&blocked);
    sigaddset(&blocked, SIGHUP);
    sigaddset(&blocked, SIGTERM);
    sigaddset(&blocked, SIGINT);
    sigaddset(&blocked, SIGCONT);
    sigprocmask(SIG_BLOCK, &blocked, &during_poll);
    struct sigaction sa = {0};
    sa.sa_handler = on_hup;
    sigaction(SIGHUP, &sa, NULL);
    sa.sa_handler = on_term;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    /* A stop (SIGSTOP, a debugger, tests/topology/test_bringup_pauses_path.py) must make only
     * the frames due during it late, by no more than it lasted. Linux restarts a ppoll that a
     * stop interrupted with the time that was left when the stop came, so every wait across a
     * stop would last the whole stop longer (15 ms stops every 40 ms made every ping 21-42 ms
     * late). Handled, the SIGCONT ends the wait instead, and the loop sends what fell due. */
    sa.sa_handler = on_cont;
    sigaction(SIGCONT, &sa, NULL);
    if (applied_path) write_applied(applied_path);

    struct pollfd fds[2] = {{.fd = a, .events = POLLIN}, {.fd = kernel_returns ? -1 : b, .events = POLLIN}};
    uint64_t last_wake = 0;
    while (!stop_requested) {
        if (reload_requested) {
            reload_requested = 0;
            if (apply_config(config_path, applied_path, b))
                fprintf(stderr, "delayline: keeping the previous settings\n");
        }
        for (int batches = 0; batches < 64 && take_in(a); batches++) continue;
        if (!kernel_returns)
            for (int batches = 0; batches < 64 && pass_through(b, a); batches++) continue;
        uint64_t now = now_ns();
        send_due(b, now);
        uint64_t wake = heap_len > 0 ? heap[0].due_ns : UINT64_MAX;
        if (cfg.trace && fifo_len > 0 && opportunity_ns(next_opportunity) < wake)
            wake = opportunity_ns(next_opportunity);
        /* Within the gap after an arrival woke it, arrivals wait (read at the gap's end,
         * dated by the kernel); a departure due meanwhile still wakes it on time. */
        int watch = now >= last_wake + WAKE_GAP_NS;
        if (!watch && last_wake + WAKE_GAP_NS < wake) wake = last_wake + WAKE_GAP_NS;
        struct timespec wait, *timeout = NULL;
        if (wake != UINT64_MAX) {
            uint64_t left = wake > now ? wake - now : 0;
            wait.tv_sec = (time_t)(left / 1000000000ull);
            wait.tv_nsec = (long)(left % 1000000000ull);
            timeout = &wait;
        }
        int r = ppoll(fds, watch ? 2 : 0, timeout, &during_poll);
        if (r < 0 && errno != EINTR) {
            perror("delayline: ppoll");
            return 1;
        }
        /* Only an arrival opens a gap: a clock wake-up renewing it would make the loop a
         * 4 kHz poll at real-time priority, idle or not, beside the endpoints. */
        if (r > 0) last_wake = now_ns();
    }
    if (applied_path) write_applied(applied_path);
    return 0;
}
