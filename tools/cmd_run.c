/* `ssmstate run CONFIG [--dump DIR] [--quiet]`: the simulated serving
 * session, its summary, and the verdict as the exit code. With --modes LIST
 * the session runs once per mode, side by side (cmd_run_modes.c). The
 * session runs on the config's device, or on the one --device names: on a
 * CUDA context with device buffers, checked against the CPU reference.
 *
 * Checkpoints: --stop-after N --save DIR stops after N forwards and saves
 * the session (session_checkpoint.c); --load DIR resumes one, in any mode.
 * --hashes FILE writes a line per output block (request, layer, its first
 * token) and per finished request and layer (its exported window and
 * state), each with a 64-bit FNV-1a hash, so two runs (one of them resumed)
 * can be compared bit for bit. */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ssmstate/ssmstate.h"
#include "bound.h"
#include "cli.h"
#include "session.h"

static void print_summary(const ssm_config *c, const ssm_plan *plan, const char *plugin_path,
                          const session_summary *s, int pass)
{
    const int64_t tokens = s->prefill_tokens + s->accepted_tokens;
    char a[32], b[32];
    printf("session     mode %s (%s), %s %d layers, state %s, activations %s\n", c->mode,
           plugin_path, ssm_model_kind_name(c->model.kind), c->model.layers,
           ssm_dtype_name(c->state_dtype), ssm_dtype_name(c->activation_dtype));
    if (c->device.type == SSM_DEVICE_CUDA)
        printf("device      cuda:%d (batch buffers in device memory, checked against the CPU)\n",
               (int)c->device.index);
    else
        printf("device      cpu\n");
    printf("requests    %d (at most %d at once, slots reused)\n", s->requests, s->lanes);
    printf("forwards    %lld\n", (long long)s->forwards);
    printf("prefill     %lld tokens\n", (long long)s->prefill_tokens);
    if (s->tokens_per_row > 1)
        printf("verify      %lld rows, %lld tokens (T = %d), %lld padding rows\n",
               (long long)s->rounds, (long long)s->round_tokens, s->tokens_per_row,
               (long long)s->padding_rows);
    else
        printf("decode      %lld rows, %lld padding rows\n", (long long)s->rounds,
               (long long)s->padding_rows);
    printf("accepted    %lld tokens, mean accepted length %.2f\n", (long long)s->accepted_tokens,
           s->rounds ? (double)s->accepted_tokens / (double)s->rounds : 0.0);
    printf("wall time   %.3f s (library calls %.3f s; the rest is mostly the reference check)\n",
           s->wall_seconds, s->library_seconds);
    printf("tokens/s    %.0f (prefill + accepted tokens over wall time; %.0f over library time)\n",
           s->wall_seconds > 0 ? (double)tokens / s->wall_seconds : 0.0,
           s->library_seconds > 0 ? (double)tokens / s->library_seconds : 0.0);
    printf("state       %s per request (plan bytes per slot), pool %s\n",
           cli_format_bytes(plan->bytes_per_slot, a, sizeof a),
           cli_format_bytes(plan->pool_bytes, b, sizeof b));
    printf("checked     %lld output blocks against the CPU reference (bound: %s over each "
           "layer's whole output), %lld final states\n",
           (long long)s->output_blocks, s->bound, (long long)s->final_states);
    printf("max error   outputs: relative RMS %.3g (the worst layer)", s->max_rel_error);
    char ulps[32];
    if (c->activation_dtype == SSM_DTYPE_BF16)
        printf(", elements at most %s bf16 ulps apart (not bounded)",
               bound_ulps_text(s->max_ulps, ulps, sizeof ulps));
    printf("; final states: relative RMS %.3g\n", s->max_state_rel_error);
    if (s->violations)
        printf("violations  %lld; first: %s\n", (long long)s->violations, s->first_violation);
    if (s->status_flags)
        printf("flags       ssm_ctx_status reports flags 0x%x\n", s->status_flags);
    printf("verdict     %s\n", pass ? "PASS" : "FAIL");
}

static const char usage_line[] =
    "ssmstate run CONFIG [--dump DIR | --modes native,compact,replay|all] [--quiet]\n"
    "       [--device auto|cpu|cuda|cuda:N] [--stop-after N --save DIR] [--load DIR]\n"
    "       [--hashes FILE]";

/* --device TEXT into *out: "cpu", "cuda" (cuda:0), "cuda:N", or "auto":
 * cuda:0 when the build has CUDA and a GPU is visible, else the CPU. A
 * named GPU that is missing is the context's error, in the library's
 * words. Returns CLI_EXIT_OK or a usage error. */
static int pick_device(const char *text, ssm_device *out)
{
    if (!strcmp(text, "auto")) {
        const ssm_device gpu = {SSM_DEVICE_CUDA, 0};
        *out = ssm_device_check(&gpu) == SSM_OK ? gpu : (ssm_device){SSM_DEVICE_CPU, 0};
        return CLI_EXIT_OK;
    }
    if (!strcmp(text, "cpu")) {
        *out = (ssm_device){SSM_DEVICE_CPU, 0};
        return CLI_EXIT_OK;
    }
    if (!strcmp(text, "cuda")) {
        *out = (ssm_device){SSM_DEVICE_CUDA, 0};
        return CLI_EXIT_OK;
    }
    char *end = NULL;
    errno = 0;
    long index = strncmp(text, "cuda:", 5) == 0 && text[5] ? strtol(text + 5, &end, 10) : -1;
    if (index < 0 || index > 1023 || !end || *end || errno == ERANGE)
        return cli_fail("--device %s: give auto, cpu, cuda or cuda:N", text);
    *out = (ssm_device){SSM_DEVICE_CUDA, (int32_t)index};
    return CLI_EXIT_OK;
}

/* The context of CONFIG, on `device` when it is not NULL (asked for as
 * --device `text`), and the config's [workload] into *w. */
static int create_context(const char *path, const ssm_device *device, const char *text,
                          ssm_ctx **ctx, workload *w)
{
    ssm_config *config = NULL;
    int exit_code = cli_load_config(path, &config, w);
    if (exit_code != CLI_EXIT_OK)
        return exit_code;
    if (device)
        config->device = *device;
    ssm_status status = ssm_ctx_create(config, ctx);
    ssm_config_free(config);
    if (status == SSM_OK)
        return CLI_EXIT_OK;
    return device ? cli_fail("--device %s: %s", text, ssm_last_error()) : cli_fail_library();
}

/* FNV-1a, 64 bits. */
static unsigned long long fnv1a(const void *data, size_t bytes)
{
    const unsigned char *p = data;
    unsigned long long h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < bytes; i++)
        h = (h ^ p[i]) * 0x100000001b3ull;
    return h;
}

typedef struct hashes {
    FILE *file;
    size_t window_bytes, state_bytes, token_bytes;
} hashes;

static void write_output(void *user, const session_block *b)
{
    hashes *h = user;
    fprintf(h->file, "output request %d layer %d token %d tokens %d keep %d %016llx\n",
            (int)b->request, (int)b->layer, (int)b->first, (int)b->tokens, (int)b->keep,
            fnv1a(b->out, (size_t)b->tokens * h->token_bytes));
}

static void write_final_state(void *user, int32_t request, int32_t layer, const void *window,
                              const void *state)
{
    hashes *h = user;
    fprintf(h->file, "final request %d layer %d window %016llx state %016llx\n", (int)request,
            (int)layer, fnv1a(window, h->window_bytes), fnv1a(state, h->state_bytes));
}

int cmd_run(int argc, char **argv)
{
    static const struct option options[] = {
        {"dump", required_argument, NULL, 'd'},
        {"modes", required_argument, NULL, 'm'},
        {"quiet", no_argument, NULL, 'q'},
        {"save", required_argument, NULL, 's'},
        {"load", required_argument, NULL, 'l'},
        {"stop-after", required_argument, NULL, 'n'},
        {"hashes", required_argument, NULL, 'f'},
        {"device", required_argument, NULL, 'D'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    session_options opt = {.dump_dir = NULL, .show_progress = 1, .observer = NULL};
    const char *modes = NULL, *hashes_path = NULL;
    ssm_device device;
    const char *device_text = NULL;
    char *end = NULL;
    int o;
    while ((o = getopt_long(argc, argv, "d:m:qh", options, NULL)) != -1) {
        switch (o) {
        case 'd': opt.dump_dir = optarg; break;
        case 'm': modes = optarg; break;
        case 'q': opt.show_progress = 0; break;
        case 's': opt.save_dir = optarg; break;
        case 'l': opt.load_dir = optarg; break;
        case 'f': hashes_path = optarg; break;
        case 'D':
            if (pick_device(optarg, &device) != CLI_EXIT_OK)
                return CLI_EXIT_USAGE;
            device_text = optarg;
            break;
        case 'n':
            errno = 0;
            opt.stop_after = strtoll(optarg, &end, 10);
            if (!*optarg || *end || errno == ERANGE || opt.stop_after < 1)
                return cli_fail("--stop-after %s: give a number of forwards, 1 or more", optarg);
            break;
        case 'h': printf("usage: %s\n", usage_line); return CLI_EXIT_OK;
        default: return cli_usage(usage_line, argv[optind - 1]);
        }
    }
    if (optind != argc - 1) /* no CONFIG, or a second one */
        return cli_usage(usage_line, optind < argc ? argv[optind + 1] : NULL);
    if (modes && opt.dump_dir)
        return cli_fail("--dump and --modes cannot be combined (dump one mode at a time)");
    if (modes && (opt.save_dir || opt.load_dir || hashes_path))
        return cli_fail("--modes runs whole sessions: no --save, --load or --hashes");
    if (modes)
        return cmd_run_modes(argv[optind], modes, opt.show_progress,
                             device_text ? &device : NULL);
    if (!opt.save_dir != !opt.stop_after)
        return cli_fail("--save and --stop-after go together (stop after N forwards, then save)");
    if (opt.dump_dir && (opt.save_dir || opt.load_dir))
        return cli_fail("--dump covers whole sessions: it cannot be combined with --save or "
                        "--load");

    ssm_ctx *ctx = NULL;
    workload work;
    int created = create_context(argv[optind], device_text ? &device : NULL, device_text, &ctx,
                                 &work);
    if (created != CLI_EXIT_OK)
        return created;
    opt.workload = &work;
    ssm_plan plan;
    if (ssm_ctx_plan(ctx, &plan) != SSM_OK) {
        ssm_ctx_destroy(ctx);
        return cli_fail_library();
    }
    const ssm_config *c = ssm_ctx_config(ctx);
    const size_t act = ssm_dtype_size(c->activation_dtype);
    hashes h = {NULL, (size_t)((c->model.conv_width - 1) * ssm_conv_channels(&c->model)) * act,
                (size_t)c->model.value_heads * c->model.value_dim * c->model.key_dim *
                    ssm_dtype_size(c->state_dtype),
                (size_t)c->model.value_heads * c->model.value_dim * act};
    session_observer observer = {&h, write_output, write_final_state};
    /* The hashes go to FILE.tmp, renamed over FILE only when the run
     * succeeds: a failed run leaves an earlier FILE as it was. */
    char hashes_temp[4096];
    if (hashes_path) {
        int n = snprintf(hashes_temp, sizeof hashes_temp, "%s.tmp", hashes_path);
        if (n < 0 || (size_t)n >= sizeof hashes_temp || !(h.file = fopen(hashes_temp, "w"))) {
            ssm_ctx_destroy(ctx);
            return cli_fail("cannot write %s.tmp: %s", hashes_path,
                            n < 0 || (size_t)n >= sizeof hashes_temp ? "path too long"
                                                                     : strerror(errno));
        }
        opt.observer = &observer;
    }
    session_summary summary;
    int exit_code = session_run(ctx, &opt, &summary);
    if (h.file && fclose(h.file) != 0 && exit_code == CLI_EXIT_OK)
        exit_code = cli_fail("cannot write %s", hashes_temp);
    if (h.file && exit_code == CLI_EXIT_OK && rename(hashes_temp, hashes_path) != 0)
        exit_code = cli_fail("cannot rename %s to %s: %s", hashes_temp, hashes_path,
                             strerror(errno));
    if (h.file && exit_code != CLI_EXIT_OK)
        unlink(hashes_temp);
    if (exit_code == CLI_EXIT_OK) {
        int pass = session_passed(&summary);
        print_summary(c, &plan, ssm_ctx_plugin_path(ctx), &summary, pass);
        if (opt.load_dir)
            printf("resumed     from %s (the checks above cover this run's forwards)\n",
                   opt.load_dir);
        if (opt.save_dir)
            printf("saved       after %lld forwards to %s (resume with --load)\n",
                   (long long)summary.forwards, opt.save_dir);
        exit_code = pass ? CLI_EXIT_OK : CLI_EXIT_CHECK_FAILED;
    }
    ssm_ctx_destroy(ctx);
    return exit_code;
}
