/* Session dump: NPY v1.0 writer and a streamed manifest.json (see dump.h). */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"
#include "dump.h"

struct dump {
    char *dir;
    FILE *manifest;
    ssm_model_dims model;
    int first_item; /* no comma before the next item of the open JSON list */
    int32_t request;
    int failed;     /* a write failed: dump_close reports it */
};

/* --------------------------------------------------------------- NPY v1.0 */

int npy_write_f32(const char *path, const int64_t *shape, int ndim, const float *data)
{
    /* Header: magic, version 1.0, little-endian u16 length, then a Python
     * dict literal padded with spaces and a final newline so that the data
     * starts at a multiple of 64 bytes. */
    char dict[256];
    int len = snprintf(dict, sizeof dict, "{'descr': '<f4', 'fortran_order': False, 'shape': (");
    int64_t count = 1;
    for (int i = 0; i < ndim; i++) {
        len += snprintf(dict + len, sizeof dict - (size_t)len, "%lld,%s", (long long)shape[i],
                        i + 1 < ndim ? " " : "");
        count *= shape[i];
    }
    if (ndim > 1)
        len--; /* "(3, 4,)" is valid Python, but numpy writes "(3, 4)" */
    len += snprintf(dict + len, sizeof dict - (size_t)len, "), }");
    const int preamble = 10; /* magic (6) + version (2) + header length (2) */
    int padded = (preamble + len + 1 + 63) / 64 * 64 - preamble;

    unsigned char head[10 + 256];
    memcpy(head, "\x93NUMPY\x01\x00", 8);
    head[8] = (unsigned char)(padded & 0xff);
    head[9] = (unsigned char)(padded >> 8);
    memcpy(head + preamble, dict, (size_t)len);
    memset(head + preamble + len, ' ', (size_t)(padded - len - 1));
    head[preamble + padded - 1] = '\n';

    FILE *f = fopen(path, "wb");
    if (!f)
        return -1;
    int ok = fwrite(head, 1, (size_t)(preamble + padded), f) == (size_t)(preamble + padded);
    unsigned char chunk[4096];
    for (int64_t i = 0; ok && i < count;) {
        size_t n = 0;
        for (; n + 4 <= sizeof chunk && i < count; i++, n += 4) {
            uint32_t bits;
            memcpy(&bits, &data[i], 4);
            chunk[n] = (unsigned char)bits;
            chunk[n + 1] = (unsigned char)(bits >> 8);
            chunk[n + 2] = (unsigned char)(bits >> 16);
            chunk[n + 3] = (unsigned char)(bits >> 24);
        }
        ok = fwrite(chunk, 1, n, f) == n;
    }
    int saved = errno;
    if (fclose(f) != 0)
        ok = 0;
    else
        errno = saved;
    return ok ? 0 : -1;
}

/* ------------------------------------------------------------ helpers */

static void json_string(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            fprintf(f, "\\%c", c);
        else if (c < 0x20)
            fprintf(f, "\\u%04x", c);
        else
            fputc(c, f);
    }
    fputc('"', f);
}

/* Separator before the next item of the JSON list being written. */
static void next_item(dump *d)
{
    fputs(d->first_item ? "\n" : ",\n", d->manifest);
    d->first_item = 0;
}

/* Writes DIR/<name>.npy and its manifest entry `"key": {"file", "shape"}`. */
static int write_array(dump *d, const char *key, const char *name, const int64_t *shape,
                       int ndim, const float *data, const char *indent)
{
    char file[256], path[PATH_MAX];
    int n = snprintf(file, sizeof file, "%s.npy", name);
    int m = snprintf(path, sizeof path, "%s/%s", d->dir, file);
    if (n < 0 || (size_t)n >= sizeof file || m < 0 || (size_t)m >= sizeof path) {
        d->failed = 1;
        return cli_fail("%s/%s.npy: path too long (at most %zu bytes)", d->dir, name,
                        sizeof path - 1);
    }
    if (npy_write_f32(path, shape, ndim, data) != 0) {
        d->failed = 1;
        return cli_fail("cannot write %s: %s", path, strerror(errno));
    }
    fprintf(d->manifest, "%s\"%s\": {\"file\": \"%s\", \"shape\": [", indent, key, file);
    for (int i = 0; i < ndim; i++)
        fprintf(d->manifest, "%s%lld", i ? ", " : "", (long long)shape[i]);
    fputs("]}", d->manifest);
    return CLI_EXIT_OK;
}

/* ------------------------------------------------------------ manifest */

static void write_preamble(dump *d, const ssm_config *c, const workload *w)
{
    const ssm_model_dims *m = &c->model;
    FILE *f = d->manifest;
    fprintf(f, "{\n  \"format\": \"ssmstate-dump\",\n  \"version\": 1,\n");
    fprintf(f, "  \"generator\": \"ssmstate %d.%d.%d run\",\n  \"config\": ",
            SSMSTATE_VERSION_MAJOR, SSMSTATE_VERSION_MINOR, SSMSTATE_VERSION_PATCH);
    json_string(f, c->source ? c->source : "");
    fprintf(f, ",\n  \"mode\": ");
    json_string(f, c->mode);
    fprintf(f, ",\n  \"model\": {\"kind\": \"%s\", \"layers\": %d, \"heads\": %d, "
               "\"value_heads\": %d, \"key_dim\": %d, \"value_dim\": %d, \"conv_width\": %d, "
               "\"conv_channels\": %lld, \"gate_width\": %lld, \"has_lower_bound\": %s, "
               "\"lower_bound\": ",
            ssm_model_kind_name(m->kind), m->layers, m->heads, m->value_heads, m->key_dim,
            m->value_dim, m->conv_width, (long long)ssm_conv_channels(m),
            (long long)ssm_gate_width(m), m->has_lower_bound ? "true" : "false");
    if (m->has_lower_bound)
        fprintf(f, "%.9g},\n", m->lower_bound);
    else
        fputs("null},\n", f);
    fprintf(f, "  \"state_dtype\": \"%s\",\n  \"activation_dtype\": \"%s\",\n",
            ssm_dtype_name(c->state_dtype), ssm_dtype_name(c->activation_dtype));
    fprintf(f, "  \"max_requests\": %d,\n  \"max_draft_tokens\": %d,\n", c->max_requests,
            c->max_draft_tokens);
    fprintf(f, "  \"workload\": {\"requests\": %d, \"prompt_min\": %d, \"prompt_max\": %d, "
               "\"prefill_chunk\": %d, \"decode_steps\": %d, \"acceptance\": %.9g, "
               "\"seed\": %llu},\n",
            w->requests, w->prompt_min, w->prompt_max, w->prefill_chunk, w->decode_steps,
            w->acceptance, (unsigned long long)w->seed);
    fputs("  \"storage\": \"every array is float32 ('<f4', C order) holding exactly the values "
          "the library consumed or produced: activation-dtype and state-dtype values widened "
          "losslessly\",\n"
          "  \"meaning\": {\n"
          "    \"conv_weight\": \"[D][W] fp32 short-conv weight, tap W-1 applies to the current "
          "token\",\n"
          "    \"conv_bias\": \"[D] fp32 conv bias (listed only when the session used one)\",\n"
          "    \"a_log\": \"[HV] fp32 A_log\",\n"
          "    \"dt_bias\": \"[HV] (gdn) or [HV][K] (kda) fp32 dt_bias\",\n"
          "    \"x\": \"[n][D] pre-conv inputs of the request's committed tokens in order (prompt, "
          "then accepted decode tokens)\",\n"
          "    \"gate\": \"[n][HV] raw gate input a (gdn) or [n][HV][K] raw f (kda)\",\n"
          "    \"beta\": \"[n][HV] raw beta input b, before the sigmoid\",\n"
          "    \"out\": \"[n][HV][V] the library's output o for each committed token\",\n"
          "    \"state\": \"[HV][V][K] final matrix state from ssm_slot_export_canonical, taken "
          "right before the slot was released\",\n"
          "    \"conv_window\": \"[W-1][D] final conv window (the last W-1 inputs x, oldest "
          "first) from ssm_slot_export_canonical\"\n"
          "  },\n",
          f);
}

int dump_open(const char *dir, const ssm_config *config, const workload *w, dump **out)
{
    dump *d = calloc(1, sizeof *d);
    if (!d || !(d->dir = strdup(dir))) {
        free(d);
        return cli_fail("out of memory");
    }
    d->model = config->model;
    char path[PATH_MAX];
    int n = snprintf(path, sizeof path, "%s/manifest.json", dir);
    if (n < 0 || (size_t)n >= sizeof path) {
        free(d->dir);
        free(d);
        return cli_fail("%s/manifest.json: path too long (at most %zu bytes)", dir,
                        sizeof path - 1);
    }
    if (cli_make_directories(dir) != 0 || !(d->manifest = fopen(path, "w"))) {
        int exit_code = cli_fail("cannot create %s: %s", path, strerror(errno));
        free(d->dir);
        free(d);
        return exit_code;
    }
    write_preamble(d, config, w);
    fputs("  \"layers\": [", d->manifest);
    d->first_item = 1;
    d->request = -1;
    *out = d;
    return CLI_EXIT_OK;
}

int dump_layer_weights(dump *d, int32_t layer, const ssm_layer_weights *w)
{
    const ssm_model_dims *m = &d->model;
    const int64_t conv_shape[2] = {ssm_conv_channels(m), m->conv_width};
    const int64_t bias_shape[1] = {ssm_conv_channels(m)};
    const int64_t a_shape[1] = {m->value_heads};
    const int64_t dt_shape[2] = {m->value_heads, m->key_dim};
    const int dt_ndim = m->kind == SSM_MODEL_KDA ? 2 : 1;
    char name[64];
    int rc;

    next_item(d);
    fprintf(d->manifest, "    {\"layer\": %d,\n", layer);
    snprintf(name, sizeof name, "layer%02d_conv_weight", layer);
    if ((rc = write_array(d, "conv_weight", name, conv_shape, 2, w->conv_weight, "     ")))
        return rc;
    if (w->conv_bias) {
        fputs(",\n", d->manifest);
        snprintf(name, sizeof name, "layer%02d_conv_bias", layer);
        if ((rc = write_array(d, "conv_bias", name, bias_shape, 1, w->conv_bias, "     ")))
            return rc;
    }
    fputs(",\n", d->manifest);
    snprintf(name, sizeof name, "layer%02d_a_log", layer);
    if ((rc = write_array(d, "a_log", name, a_shape, 1, w->a_log, "     ")))
        return rc;
    fputs(",\n", d->manifest);
    snprintf(name, sizeof name, "layer%02d_dt_bias", layer);
    if ((rc = write_array(d, "dt_bias", name, dt_shape, dt_ndim, w->dt_bias, "     ")))
        return rc;
    fputs("}", d->manifest);
    return CLI_EXIT_OK;
}

int dump_request_begin(dump *d, const dump_request_info *info)
{
    if (d->request == -1) { /* first request: close the layer list */
        fputs("\n  ],\n  \"requests\": [", d->manifest);
        d->first_item = 1;
    }
    d->request = info->id;
    next_item(d);
    fprintf(d->manifest,
            "    {\"id\": %d, \"slot\": %d, \"prompt_tokens\": %d, \"committed_tokens\": %d, "
            "\"rounds\": %d, \"accepted\": [",
            info->id, info->slot, info->prompt_tokens, info->committed_tokens, info->rounds);
    for (int32_t i = 0; i < info->rounds; i++)
        fprintf(d->manifest, "%s%d", i ? ", " : "", info->accepted[i]);
    fputs("],\n     \"layers\": [", d->manifest);
    d->first_item = 1;
    return CLI_EXIT_OK;
}

int dump_request_layer(dump *d, const dump_layer_arrays *a)
{
    const ssm_model_dims *m = &d->model;
    const int64_t n = a->tokens, hv = m->value_heads;
    const int64_t x_shape[2] = {n, ssm_conv_channels(m)};
    const int64_t gate_shape[3] = {n, hv, m->key_dim};
    const int gate_ndim = m->kind == SSM_MODEL_KDA ? 3 : 2;
    const int64_t beta_shape[2] = {n, hv};
    const int64_t out_shape[3] = {n, hv, m->value_dim};
    const int64_t state_shape[3] = {hv, m->value_dim, m->key_dim};
    const int64_t window_shape[2] = {m->conv_width - 1, ssm_conv_channels(m)};
    const struct {
        const char *key;
        const int64_t *shape;
        int ndim;
        const float *data;
    } arrays[] = {
        {"x", x_shape, 2, a->x},
        {"gate", gate_shape, gate_ndim, a->gate},
        {"beta", beta_shape, 2, a->beta},
        {"out", out_shape, 3, a->out},
        {"state", state_shape, 3, a->state},
        {"conv_window", window_shape, 2, a->conv_window},
    };

    next_item(d);
    fprintf(d->manifest, "       {\"layer\": %d", a->layer);
    for (size_t i = 0; i < sizeof arrays / sizeof arrays[0]; i++) {
        char name[96];
        snprintf(name, sizeof name, "req%04d_layer%02d_%s", d->request, a->layer, arrays[i].key);
        fputs(",\n", d->manifest);
        int rc = write_array(d, arrays[i].key, name, arrays[i].shape, arrays[i].ndim,
                             arrays[i].data, "        ");
        if (rc)
            return rc;
    }
    fputs("}", d->manifest);
    return CLI_EXIT_OK;
}

int dump_request_end(dump *d)
{
    fputs("\n     ]}", d->manifest);
    d->first_item = 0;
    return CLI_EXIT_OK;
}

int dump_close(dump *d, int complete)
{
    if (!d)
        return CLI_EXIT_OK;
    if (d->request == -1)
        fputs("\n  ],\n  \"requests\": [", d->manifest);
    fprintf(d->manifest, "\n  ],\n  \"complete\": %s\n}\n", complete ? "true" : "false");
    int exit_code = CLI_EXIT_OK;
    if ((ferror(d->manifest) | fclose(d->manifest)) && !d->failed)
        exit_code = cli_fail("cannot write %s/manifest.json", d->dir);
    else if (d->failed)
        exit_code = CLI_EXIT_USAGE; /* already reported */
    free(d->dir);
    free(d);
    return exit_code;
}
