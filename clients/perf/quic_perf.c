/* quic_perf: HTTP/3 over QUIC. The backend interface lets a native QUIC library (lsquic as in
 * the paper, or ngtcp2) sit next to libcurl: --backend libcurl (default) or ngtcp2 (if built). */
#include "perf.h"

static const struct perf_backend *const backends[] = {
    &perf_backend_libcurl,
#ifdef HAVE_NGTCP2
    &perf_backend_ngtcp2,
#endif
    NULL,
};

static const struct perf_tool tool = {
    .name = "quic_perf",
    .default_proto = PROTO_QUIC,
    .default_http = HTTP_3,
    .is_quic = 1,
    .backends = backends,
};

int main(int argc, char **argv)
{
    return perf_main(&tool, argc, argv);
}
