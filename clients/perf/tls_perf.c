/* tls_perf: HTTP/1.1 or HTTP/2 over TLS 1.2 or 1.3 over TCP, through libcurl. */
#include "perf.h"

static const struct perf_backend *const backends[] = {&perf_backend_libcurl, NULL};

static const struct perf_tool tool = {
    .name = "tls_perf",
    .default_proto = PROTO_TLS13,
    .default_http = HTTP_2,
    .is_quic = 0,
    .backends = backends,
};

int main(int argc, char **argv)
{
    return perf_main(&tool, argc, argv);
}
