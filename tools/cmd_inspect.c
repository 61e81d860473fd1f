/* `ssmstate inspect PAGE`: prints a state page's header (docs/pages.md) and
 * verifies its checksums, without a config or a context. It reads no more
 * than the page its header describes (so /dev/zero or a pipe cannot make it
 * read without end), and counts any bytes after it. Exit 0: a valid page;
 * 1: not a valid page (the reason on one line); 2: bad usage or an
 * unreadable file. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"

static const char usage[] = "ssmstate inspect PAGE";

/* A page's header, of format version 1 (docs/pages.md). */
enum { PAGE_HEADER_BYTES = 96 };

/* Trailing bytes of a stream are counted up to this many. */
#define TRAILING_COUNTED ((uint64_t)1 << 30)

/* The page in `path` into a malloc'ed buffer, read no further than its
 * header says the page goes: the header first (ssm_page_read_header), then
 * the page's own length. *trailing counts the bytes after it (at least
 * that many when *more is set: a stream that goes on). NULL after printing
 * the error; *exit_code says which: 1, not a valid page (header), or 2, an
 * unreadable file. */
static void *read_page(const char *path, size_t *bytes, uint64_t *trailing, int *more,
                       int *exit_code)
{
    *exit_code = CLI_EXIT_USAGE;
    *trailing = 0;
    *more = 0;
    FILE *f = fopen(path, "rb");
    if (!f) {
        cli_fail("cannot open '%s'", path);
        return NULL;
    }
    unsigned char header[PAGE_HEADER_BYTES];
    size_t got = fread(header, 1, sizeof header, f);
    ssm_page_info info;
    if (ferror(f)) {
        fclose(f);
        cli_fail("cannot read '%s'", path);
        return NULL;
    }
    if (ssm_page_read_header(header, got, &info) != SSM_OK) {
        fclose(f);
        fprintf(stderr, "ssmstate: %s: %s\n", path, ssm_last_error());
        *exit_code = CLI_EXIT_CHECK_FAILED;
        return NULL;
    }
    /* A regular file may be shorter than its header says: read what is there. */
    struct stat st;
    uint64_t want = info.page_bytes;
    const int regular = fstat(fileno(f), &st) == 0 && S_ISREG(st.st_mode);
    if (regular && (uint64_t)st.st_size < want)
        want = (uint64_t)st.st_size;
    unsigned char *data = want <= SIZE_MAX ? malloc((size_t)want) : NULL;
    if (!data) {
        fclose(f);
        cli_fail("'%s': out of memory for a page of %llu bytes", path,
                 (unsigned long long)info.page_bytes);
        return NULL;
    }
    memcpy(data, header, got);
    size_t used = got + fread(data + got, 1, (size_t)want - got, f);
    if (regular && (uint64_t)st.st_size > info.page_bytes) {
        *trailing = (uint64_t)st.st_size - info.page_bytes;
    } else {
        unsigned char scratch[1 << 16];
        size_t n;
        while (*trailing < TRAILING_COUNTED && (n = fread(scratch, 1, sizeof scratch, f)) > 0)
            *trailing += n;
        *more = *trailing >= TRAILING_COUNTED;
    }
    int failed = ferror(f);
    fclose(f);
    if (failed) {
        free(data);
        cli_fail("cannot read '%s'", path);
        return NULL;
    }
    *bytes = used;
    return data;
}

static const char *dtype_name(ssm_dtype t)
{
    return t == SSM_DTYPE_F32 ? "f32" : t == SSM_DTYPE_BF16 ? "bf16" : "?";
}

int cmd_inspect(int argc, char **argv)
{
    if (argc == 2 && (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help"))) {
        printf("usage: %s\n", usage);
        return CLI_EXIT_OK;
    }
    if (argc != 2 || argv[1][0] == '-') /* name the argument that is wrong */
        return cli_usage(usage, argc > 2 ? argv[argv[1][0] == '-' ? 1 : 2]
                                : argc > 1 ? argv[1] : NULL);
    size_t bytes = 0;
    uint64_t trailing = 0;
    int more = 0, exit_code = CLI_EXIT_OK;
    void *page = read_page(argv[1], &bytes, &trailing, &more, &exit_code);
    if (!page)
        return exit_code;
    ssm_page_info info;
    ssm_status status = ssm_page_inspect(page, bytes, &info);
    free(page);
    if (status != SSM_OK) {
        fprintf(stderr, "ssmstate: %s: %s\n", argv[1], ssm_last_error());
        return CLI_EXIT_CHECK_FAILED;
    }
    if (trailing) { /* the words ssm_page_inspect has for a buffer that runs on */
        fprintf(stderr,
                "ssmstate: %s: %s%llu bytes after the page's payload: its header says %llu "
                "bytes, the file holds more (a page file is one page)\n",
                argv[1], more ? "at least " : "", (unsigned long long)trailing,
                (unsigned long long)info.page_bytes);
        return CLI_EXIT_CHECK_FAILED;
    }
    const ssm_model_dims *m = &info.model;
    char size[32];
    printf("page            %s\n", argv[1]);
    printf("format          %u (written by ssmstate %u.%u.%u)\n", (unsigned)info.format_version,
           (unsigned)(info.library_version >> 16) & 0xFF,
           (unsigned)(info.library_version >> 8) & 0xFF, (unsigned)info.library_version & 0xFF);
    printf("model           %s, layers %d, H %d, HV %d, K %d, V %d, W %d",
           m->kind == SSM_MODEL_KDA ? "kda" : "gdn", m->layers, m->heads, m->value_heads,
           m->key_dim, m->value_dim, m->conv_width);
    if (m->has_lower_bound)
        printf(", lower bound %g", (double)m->lower_bound);
    printf("\ndtypes          state %s, activations %s\n", dtype_name(info.state_dtype),
           dtype_name(info.activation_dtype));
    printf("value heads     [%d, %d) of %d\n", info.head_first, info.head_end, m->value_heads);
    printf("payload         %s (%llu bytes), CRC32C 0x%08x\n",
           cli_format_bytes(info.payload_bytes, size, sizeof size),
           (unsigned long long)info.payload_bytes, (unsigned)info.payload_crc);
    printf("checksums       ok\n");
    return CLI_EXIT_OK;
}
