/* The response body: always counted, optionally hashed (--sha256) and kept (--output-body). */
#define _POSIX_C_SOURCE 200809L
#include <openssl/evp.h>
#include <string.h>

#include "perf.h"

int perf_sink_open(struct perf_sink *s, const struct perf_opts *o, struct perf_row *row)
{
    memset(s, 0, sizeof(*s));
    if (o->output_body && !(s->body = fopen(o->output_body, "wb"))) {
        snprintf(row->error, sizeof(row->error), "output: cannot open %.200s", o->output_body);
        return -1;
    }
    if (o->sha256) {
        EVP_MD_CTX *md = EVP_MD_CTX_new();
        s->md = md;
        if (!md || EVP_DigestInit_ex(md, EVP_sha256(), NULL) != 1) {
            snprintf(row->error, sizeof(row->error), "internal: sha256 init failed");
            return -1;
        }
    }
    return 0;
}

int perf_sink_write(struct perf_sink *s, struct perf_row *row, const void *data, size_t len)
{
    row->bytes += len;
    if (s->md)
        EVP_DigestUpdate(s->md, data, len);
    if (s->body && fwrite(data, 1, len, s->body) != len)
        return -1;
    return 0;
}

void perf_sink_close(struct perf_sink *s, struct perf_row *row)
{
    if (s->body)
        fclose(s->body);
    if (s->md) {
        unsigned char d[EVP_MAX_MD_SIZE];
        unsigned int n = 0;
        EVP_DigestFinal_ex(s->md, d, &n);
        for (unsigned int i = 0; i < n && i < 32; i++)
            snprintf(row->sha256 + 2 * i, 3, "%02x", d[i]);
        EVP_MD_CTX_free(s->md);
    }
    memset(s, 0, sizeof(*s));
}
