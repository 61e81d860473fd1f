/* `ssmstate inspect PAGE`: prints a state page's header (docs/pages.md) and
 * verifies its checksums, without a config or a context. Exit 0: a valid
 * page; 1: not a valid page (the reason on one line); 2: bad usage or an
 * unreadable file. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static const char usage[] = "ssmstate inspect PAGE";

/* The whole file in a malloc'ed buffer; NULL after printing the error. */
static void *read_file(const char *path, size_t *bytes)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        cli_fail("cannot open '%s'", path);
        return NULL;
    }
    size_t capacity = 1 << 16, used = 0;
    unsigned char *data = malloc(capacity);
    while (data) {
        used += fread(data + used, 1, capacity - used, f);
        if (used < capacity)
            break;
        unsigned char *grown = realloc(data, capacity * 2);
        if (!grown) {
            free(data);
            data = NULL;
            break;
        }
        data = grown;
        capacity *= 2;
    }
    int failed = ferror(f);
    fclose(f);
    if (!data || failed) {
        free(data);
        cli_fail(data ? "cannot read '%s'" : "out of memory reading '%s'", path);
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
    void *page = read_file(argv[1], &bytes);
    if (!page)
        return CLI_EXIT_USAGE;
    ssm_page_info info;
    ssm_status status = ssm_page_inspect(page, bytes, &info);
    free(page);
    if (status != SSM_OK) {
        fprintf(stderr, "ssmstate: %s: %s\n", argv[1], ssm_last_error());
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
