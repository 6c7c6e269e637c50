/* mpd.c: what video_download reads from a DASH manifest. */
#ifndef MPD_H
#define MPD_H

#include <stddef.h>

#define MPD_MAX_REPS 32

enum mpd_kind { MPD_OTHER, MPD_VIDEO, MPD_AUDIO };

/* A number-based SegmentTemplate: segment k (0-based) is Number start_number + k and covers
 * media time [k, k + 1) * duration / timescale. */
struct mpd_template {
    char init[256], media[256];
    long timescale, duration, start_number;
};

struct mpd_rep {
    char id[32];
    enum mpd_kind kind;
    long bandwidth, height;
    struct mpd_template tpl;
};

struct mpd {
    struct mpd_rep reps[MPD_MAX_REPS];
    int n;
    double total_s;               /* mediaPresentationDuration */
};

/* 0, or -1 with a reason in err. */
int mpd_parse(const char *xml, struct mpd *m, char *err, size_t n);
/* The highest-rate Representation of a kind, or the one named ("720p" or its id); NULL. */
const struct mpd_rep *mpd_pick(const struct mpd *m, enum mpd_kind kind, const char *name);
/* "720p" for video with a height, else the id. */
void mpd_label(const struct mpd_rep *r, char *out, size_t size);
double mpd_segment_s(const struct mpd_rep *r);
/* Absolute URL of the init segment (index -1) or media segment index (0-based). */
int mpd_segment_url(const struct mpd_rep *r, int index, const char *manifest_url, char *out,
                    size_t size);

#endif
