/* Two-GPU prefill-to-decode hand-off over NCCL (docs/pages.md,
 * "Two GPUs over NCCL"). One process, two GPUs:
 *
 * 1. GPU 0, a native context, prefills R requests (seeded prompt lengths,
 *    seeded inputs for every layer) in chunks, every layer, as an engine's
 *    prefill forwards would.
 * 2. GPU 0 exports the R slots' pages into device memory
 *    (ssm_slots_export_pages_device), ncclSend carries them to GPU 1, whose
 *    ncclRecv lands them in its buffer, and ssm_slots_import_pages_device
 *    loads them, on the same stream, into R slots of a replay context there.
 *    Every status must be SSM_PAGE_ACCEPTED.
 * 3. GPU 1 decodes N steps for every row and layer, seeded inputs.
 * 4. Reference: a second replay context on GPU 1 prefills the same prompts
 *    itself (the same chunks, inputs and weights) and decodes the same steps.
 *    Its pages must equal the received ones and every decode output the
 *    hand-off run's, bit for bit: the same kernels on the same kind of chip.
 * 5. Timing with CUDA events after a warm-up round, median of --reps: the
 *    hand-off (export + send/recv + import, total and per request), the
 *    same hand-off pipelined in --groups groups of requests (group j's
 *    export on a second stream of GPU 0 while group j - 1 is on the wire,
 *    its import on a second stream of GPU 1 once it has landed) and, in the
 *    same run, a plain ncclSend/ncclRecv of the same bytes. The pipelined
 *    round is each repetition's last, so the decode of step 3 runs on what
 *    it imported.
 *
 * NCCL is loaded at run time (dlopen, --nccl LIB), so the program builds
 * with or without NCCL's header (the few declarations it needs are below,
 * checked against nccl.h when that is on the include path) and exits 77
 * where NCCL is missing, as where two GPUs are. `make` builds it as
 * examples/nccl/handoff where configure found nccl.h (--with-nccl[=DIR]),
 * always against the header (SSM_REQUIRE_NCCL_H) and never linked with
 * libnccl; its default library is then SSM_NCCL_LIBRARY (DIR's
 * libnccl.so.2, else "libnccl.so.2"). tests/gpu/nccl_handoff.gpu runs it
 * small; examples/nccl/run.sh runs it (or builds it by hand) on the device
 * machine. The workload is the options' alone: a config's [workload]
 * section, the `ssmstate` command's, is not read.
 *
 * Exit: 0 pass, 1 a mismatch or a failure, 2 bad usage, 77 fewer than two
 * CUDA devices or no NCCL library. */
#define _GNU_SOURCE
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ssmstate/ssmstate.h"
#include "tools/rng.h"

#if defined(__has_include)
#if __has_include(<nccl.h>)
#include <nccl.h>
#define HAVE_NCCL_H 1
#endif
#endif
#if defined(SSM_REQUIRE_NCCL_H) && !defined(HAVE_NCCL_H)
#error "nccl.h is not on the include path (configure --with-nccl=DIR)"
#endif
#ifndef SSM_NCCL_LIBRARY
#define SSM_NCCL_LIBRARY "libnccl.so.2"
#endif
#ifndef HAVE_NCCL_H
/* The part of nccl.h this program uses; stable since NCCL 2.0. */
typedef struct ncclComm *ncclComm_t;
typedef enum { ncclSuccess = 0 } ncclResult_t;
typedef enum { ncclUint8 = 1 } ncclDataType_t;
#endif

enum { EXIT_PASS = 0, EXIT_FAIL = 1, EXIT_USAGE = 2, EXIT_SKIP = 77 };

enum {
    POOL_SLACK = 1024,  /* pool tokens past the longest call: room for offsets */
    PAGE_ALIGN = 256,   /* the page stride's multiple */
    MAX_REPS = 1000,
    MAX_GROUPS = 64     /* --groups */
};

/* ------------------------------------------------------------ options */

typedef struct options {
    const char *config;      /* the model's INI file */
    int32_t requests;        /* R */
    int32_t prompt_min, prompt_max;
    int32_t chunk;           /* prompt tokens a row advances per prefill forward */
    int32_t steps;           /* decode steps after the hand-off */
    int32_t reps;            /* timed repetitions */
    int32_t groups;          /* groups of the pipelined hand-off (1: one group) */
    uint64_t seed;
    ssm_dtype state;         /* state dtype; activations are bf16 */
    const char *json;        /* NULL: no JSON */
    const char *nccl;        /* the NCCL library dlopen loads */
} options;

static void usage(FILE *f)
{
    fprintf(f,
            "usage: nccl_handoff [CONFIG] [--requests R] [--prompt MIN:MAX] [--chunk N]\n"
            "                    [--steps N] [--reps N] [--seed S] [--state f32|bf16]\n"
            "                    [--groups G] [--json FILE] [--nccl LIBRARY]\n"
            "  CONFIG     model INI (default examples/qwen3-next.ini); its [model] and mode\n"
            "             sections are used, device, mode, dtypes and pool are set here\n"
            "  --requests requests handed off (default 32)\n"
            "  --prompt   prompt lengths, uniform in [MIN, MAX] (default 64:2048)\n"
            "  --chunk    prompt tokens per row per prefill forward (default 512)\n"
            "  --steps    decode steps on GPU 1 (default 16)\n"
            "  --reps     timed repetitions, after one warm-up (default 10)\n"
            "  --seed     seed of prompts, inputs and weights (default 1)\n"
            "  --state    state dtype (default f32); activations are bf16\n"
            "  --groups   groups of requests of the pipelined hand-off (default 4)\n"
            "  --json     also write the results as JSON to FILE\n"
            "  --nccl     NCCL library to load (default " SSM_NCCL_LIBRARY ")\n"
            "exit: 0 pass, 1 mismatch or failure, 2 bad usage, 77 no two GPUs or no NCCL\n");
}

/* Parses a decimal integer in [lo, hi] into *out; 1 on success. */
static int parse_int(const char *s, long long lo, long long hi, long long *out)
{
    char *end = NULL;
    long long v = strtoll(s, &end, 10);
    if (!*s || *end || v < lo || v > hi)
        return 0;
    *out = v;
    return 1;
}

/* Parses one "--name value" option at argv[*i] into o, advancing *i past
 * the value; 1 on success, 0 (after a message) for an unknown option or a
 * bad value. */
static int parse_option(int argc, char **argv, int *i, options *o)
{
    static const char *const known[] = {"--requests", "--prompt", "--chunk", "--steps",
                                        "--reps",     "--seed",   "--state", "--json",
                                        "--nccl",     "--groups"};
    const char *name = argv[*i];
    int found = 0;
    for (size_t k = 0; k < sizeof known / sizeof *known; k++)
        found |= !strcmp(name, known[k]);
    if (!found) {
        fprintf(stderr, "nccl_handoff: unknown option %s\n", name);
        return 0;
    }
    if (*i + 1 >= argc) {
        fprintf(stderr, "nccl_handoff: %s needs a value\n", name);
        return 0;
    }
    const char *value = argv[++*i];
    long long v = 0, w = 0;
    int ok = 1;
    if (!strcmp(name, "--requests") && (ok = parse_int(value, 1, 4096, &v)))
        o->requests = (int32_t)v;
    else if (!strcmp(name, "--chunk") && (ok = parse_int(value, 1, 1 << 20, &v)))
        o->chunk = (int32_t)v;
    else if (!strcmp(name, "--steps") && (ok = parse_int(value, 1, 4096, &v)))
        o->steps = (int32_t)v;
    else if (!strcmp(name, "--reps") && (ok = parse_int(value, 1, MAX_REPS, &v)))
        o->reps = (int32_t)v;
    else if (!strcmp(name, "--groups") && (ok = parse_int(value, 1, MAX_GROUPS, &v)))
        o->groups = (int32_t)v;
    else if (!strcmp(name, "--seed") && (ok = parse_int(value, 0, INT64_MAX, &v)))
        o->seed = (uint64_t)v;
    else if (!strcmp(name, "--json"))
        o->json = value;
    else if (!strcmp(name, "--nccl"))
        o->nccl = value;
    else if (!strcmp(name, "--state")) {
        ok = !strcmp(value, "f32") || !strcmp(value, "bf16");
        o->state = !strcmp(value, "bf16") ? SSM_DTYPE_BF16 : SSM_DTYPE_F32;
    } else if (!strcmp(name, "--prompt")) {
        char lo[32], hi[32];
        const char *colon = strchr(value, ':');
        ok = colon && colon - value < (long)sizeof lo && strlen(colon + 1) < sizeof hi;
        if (ok) {
            memcpy(lo, value, (size_t)(colon - value));
            lo[colon - value] = 0;
            strcpy(hi, colon + 1);
            ok = parse_int(lo, 1, 1 << 20, &v) && parse_int(hi, v, 1 << 20, &w);
        }
        o->prompt_min = (int32_t)v;
        o->prompt_max = (int32_t)w;
    }
    if (!ok)
        fprintf(stderr, "nccl_handoff: bad value for %s: '%s'\n", name, value);
    return ok;
}

/* Fills o from the command line. Returns EXIT_PASS to go on, EXIT_USAGE
 * after a message, or -1 after printing the help (exit 0). */
static int parse_options(int argc, char **argv, options *o)
{
    *o = (options){"examples/qwen3-next.ini", 32, 64, 2048, 512, 16, 10, 4, 1, SSM_DTYPE_F32,
                   NULL, SSM_NCCL_LIBRARY};
    int positional = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            usage(stdout);
            return -1;
        }
        if (!strncmp(argv[i], "--", 2)) {
            if (!parse_option(argc, argv, &i, o))
                return EXIT_USAGE;
        } else if (positional++ == 0) {
            o->config = argv[i];
        } else {
            fprintf(stderr, "nccl_handoff: one config file only ('%s')\n", argv[i]);
            return EXIT_USAGE;
        }
    }
    return EXIT_PASS;
}

/* ------------------------------------------------------------ NCCL */

/* The NCCL entry points the program calls, loaded by dlopen. */
typedef struct nccl_api {
    void *handle;
    ncclResult_t (*get_version)(int *version);
    ncclResult_t (*comm_init_all)(ncclComm_t *comm, int ndev, const int *devlist);
    ncclResult_t (*comm_destroy)(ncclComm_t comm);
    ncclResult_t (*group_start)(void);
    ncclResult_t (*group_end)(void);
    ncclResult_t (*send)(const void *buf, size_t count, ncclDataType_t type, int peer,
                         ncclComm_t comm, cudaStream_t stream);
    ncclResult_t (*recv)(void *buf, size_t count, ncclDataType_t type, int peer,
                         ncclComm_t comm, cudaStream_t stream);
    const char *(*error_string)(ncclResult_t result);
} nccl_api;

#ifdef HAVE_NCCL_H
/* The declarations above are nccl.h's, checked where the header is seen. */
#define SAME_TYPE(field, fn)                                                                       \
    _Static_assert(__builtin_types_compatible_p(__typeof__(((nccl_api *)0)->field),               \
                                                __typeof__(&fn)),                                  \
                   #fn " differs from nccl.h")
SAME_TYPE(get_version, ncclGetVersion);
SAME_TYPE(comm_init_all, ncclCommInitAll);
SAME_TYPE(comm_destroy, ncclCommDestroy);
SAME_TYPE(group_start, ncclGroupStart);
SAME_TYPE(group_end, ncclGroupEnd);
SAME_TYPE(send, ncclSend);
SAME_TYPE(recv, ncclRecv);
SAME_TYPE(error_string, ncclGetErrorString);
#endif

/* Looks up `name` into *slot (a function pointer's storage); 1 if found. */
static int nccl_symbol(void *handle, const char *name, void *slot)
{
    void *p = dlsym(handle, name);
    if (!p) {
        printf("nccl_handoff: SKIP: %s not in the NCCL library\n", name);
        return 0;
    }
    memcpy(slot, &p, sizeof p); /* POSIX: function pointers convert to and from void * */
    return 1;
}

/* Loads NCCL from `path` into *api. EXIT_PASS, or EXIT_SKIP after saying
 * why (no library, a missing entry point). */
static int nccl_load(const char *path, nccl_api *api)
{
    api->handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!api->handle) {
        printf("nccl_handoff: SKIP: cannot load NCCL (%s): %s\n", path, dlerror());
        return EXIT_SKIP;
    }
    int ok = nccl_symbol(api->handle, "ncclGetVersion", &api->get_version) &&
             nccl_symbol(api->handle, "ncclCommInitAll", &api->comm_init_all) &&
             nccl_symbol(api->handle, "ncclCommDestroy", &api->comm_destroy) &&
             nccl_symbol(api->handle, "ncclGroupStart", &api->group_start) &&
             nccl_symbol(api->handle, "ncclGroupEnd", &api->group_end) &&
             nccl_symbol(api->handle, "ncclSend", &api->send) &&
             nccl_symbol(api->handle, "ncclRecv", &api->recv) &&
             nccl_symbol(api->handle, "ncclGetErrorString", &api->error_string);
    return ok ? EXIT_PASS : EXIT_SKIP;
}

/* 1 if r is ncclSuccess; otherwise prints what failed and returns 0. */
static int nccl_ok(const nccl_api *api, ncclResult_t r, const char *what)
{
    if (r == ncclSuccess)
        return 1;
    fprintf(stderr, "nccl_handoff: %s: %s (%d)\n", what, api->error_string(r), (int)r);
    return 0;
}

/* ------------------------------------------------------------ CUDA */

/* 1 if e is cudaSuccess; otherwise prints what failed and returns 0. */
static int cuda_ok(cudaError_t e, const char *what)
{
    if (e == cudaSuccess)
        return 1;
    fprintf(stderr, "nccl_handoff: %s: %s: %s\n", what, cudaGetErrorName(e),
            cudaGetErrorString(e));
    return 0;
}

/* 1 if s is SSM_OK; otherwise prints the call and the library's message. */
static int ssm_ok(ssm_status s, const char *what)
{
    if (s == SSM_OK)
        return 1;
    fprintf(stderr, "nccl_handoff: %s: %s: %s\n", what, ssm_status_name(s), ssm_last_error());
    return 0;
}

/* cudaMalloc of `bytes` on `device`, then a copy of `src` (NULL: zeros). */
static int device_alloc(int device, void **dst, size_t bytes, const void *src)
{
    if (!cuda_ok(cudaSetDevice(device), "cudaSetDevice") ||
        !cuda_ok(cudaMalloc(dst, bytes ? bytes : 1), "cudaMalloc"))
        return 0;
    return src ? cuda_ok(cudaMemcpy(*dst, src, bytes, cudaMemcpyHostToDevice), "cudaMemcpy")
               : cuda_ok(cudaMemset(*dst, 0, bytes), "cudaMemset");
}

/* cudaFree on `device`; NULL allowed, errors ignored (teardown). */
static void device_free(int device, void *p)
{
    if (p && cudaSetDevice(device) == cudaSuccess)
        cudaFree(p);
}

/* ------------------------------------------------------------ seeded numbers */

enum {
    STREAM_PROMPT = 1,
    STREAM_POOL = 2,
    STREAM_WEIGHTS = 3,
    STREAM_OFFSETS = 4,
    STREAM_NORMALS = 5
};

/* Uniform integer in [lo, hi]. */
static int64_t rng_range(rng *r, int64_t lo, int64_t hi)
{
    int64_t span = hi - lo + 1, pick = (int64_t)(rng_uniform(r) * (double)span);
    return lo + (pick < span ? pick : span - 1);
}

enum { NORMALS = 1 << 16 };

/* NORMALS samples of N(0, 1) into table (Box-Muller in pairs), seeded. */
static void normal_table(uint64_t seed, float *table)
{
    rng r = rng_at(seed, STREAM_NORMALS, 0, 0);
    for (int64_t i = 0; i < NORMALS; i += 2) {
        double radius = sqrt(-2.0 * log(1.0 - rng_uniform(&r)));
        double angle = 6.283185307179586 * rng_uniform(&r);
        table[i] = (float)(radius * cos(angle));
        table[i + 1] = (float)(radius * sin(angle));
    }
}

/* n numbers ~ N(mean, std^2) into dst (fp32): entries of the normal table
 * picked by r, four picks per 64-bit number. Fast enough for the hundreds
 * of millions of inputs a long batch needs (Box-Muller per number took 11 s
 * for the default batch); 65536 levels are finer than bf16 inputs see. */
static void fill_normal(const float *table, rng *r, float *dst, int64_t n, double mean,
                        double std)
{
    uint64_t bits = 0;
    for (int64_t i = 0; i < n; i++) {
        if (i % 4 == 0)
            bits = rng_next(r);
        dst[i] = (float)(mean + std * table[bits & (NORMALS - 1)]);
        bits >>= 16;
    }
}

/* f rounded to bf16, to nearest even (NaN stays NaN). */
static uint16_t bf16_of(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((u >> 16) | 0x40);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

static float float_of_bf16(uint16_t b)
{
    uint32_t u = (uint32_t)b << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* ------------------------------------------------------------ the workload */

/* What both runs do, a pure function of the options and the model: the
 * prompts, the prefill forwards (each row advances by up to `chunk` tokens
 * per forward; finished rows leave the batch) and where in the input pool
 * each call's tokens start. */
typedef struct plan {
    int32_t requests, layers, steps, calls;
    int32_t *prompt;       /* [requests] */
    int32_t *rows;         /* [calls] rows of each prefill forward */
    int32_t *longest;      /* [calls] its longest row */
    int32_t *row_start;    /* [calls] its first entry in request_of */
    int32_t *offset_start; /* [calls] its first entry in offsets */
    int32_t *request_of;   /* the request of every prefill row, call after call */
    int32_t *offsets;      /* every call's token_offsets (rows + 1 each) */
    int64_t *prefill_at;   /* [calls][layers] pool token of the call's first token */
    int64_t *decode_at;    /* [steps][layers] pool token of the step's row 0 */
    int64_t prompt_tokens, longest_call, pool_tokens;
} plan;

static void plan_free(plan *p)
{
    free(p->prompt);
    free(p->rows);
    free(p->longest);
    free(p->row_start);
    free(p->offset_start);
    free(p->request_of);
    free(p->offsets);
    free(p->prefill_at);
    free(p->decode_at);
}

/* Lays the prefill forwards out in p (prompts and calls already sized);
 * 1 on success, 0 when out of memory. */
static int plan_calls(plan *p, int32_t chunk)
{
    int32_t *left = malloc(sizeof *left * (size_t)p->requests);
    int32_t row = 0, offset = 0;
    if (!left)
        return 0;
    memcpy(left, p->prompt, sizeof *left * (size_t)p->requests);
    for (int32_t c = 0; c < p->calls; c++) {
        p->row_start[c] = row;
        p->offset_start[c] = offset;
        p->rows[c] = p->longest[c] = 0;
        p->offsets[offset] = 0;
        for (int32_t r = 0; r < p->requests; r++) {
            if (!left[r])
                continue;
            int32_t n = left[r] < chunk ? left[r] : chunk;
            left[r] -= n;
            p->request_of[row++] = r;
            p->offsets[offset + p->rows[c] + 1] = p->offsets[offset + p->rows[c]] + n;
            p->rows[c]++;
            p->longest[c] = n > p->longest[c] ? n : p->longest[c];
        }
        int64_t tokens = p->offsets[offset + p->rows[c]];
        p->longest_call = tokens > p->longest_call ? tokens : p->longest_call;
        offset += p->rows[c] + 1;
    }
    free(left);
    return 1;
}

/* Builds the plan; 1 on success, 0 when out of memory. */
static int plan_make(const options *o, int32_t layers, plan *p)
{
    *p = (plan){.requests = o->requests, .layers = layers, .steps = o->steps};
    p->prompt = malloc(sizeof *p->prompt * (size_t)o->requests);
    if (!p->prompt)
        return 0;
    int32_t longest_prompt = 0;
    int64_t rows = 0;
    for (int32_t r = 0; r < o->requests; r++) {
        rng g = rng_at(o->seed, STREAM_PROMPT, (uint64_t)r, 0);
        p->prompt[r] = (int32_t)rng_range(&g, o->prompt_min, o->prompt_max);
        p->prompt_tokens += p->prompt[r];
        longest_prompt = p->prompt[r] > longest_prompt ? p->prompt[r] : longest_prompt;
        rows += (p->prompt[r] + o->chunk - 1) / o->chunk;
    }
    p->calls = (longest_prompt + o->chunk - 1) / o->chunk;
    size_t calls = (size_t)p->calls;
    p->rows = malloc(sizeof(int32_t) * calls);
    p->longest = malloc(sizeof(int32_t) * calls);
    p->row_start = malloc(sizeof(int32_t) * calls);
    p->offset_start = malloc(sizeof(int32_t) * calls);
    p->request_of = malloc(sizeof(int32_t) * (size_t)rows);
    p->offsets = malloc(sizeof(int32_t) * ((size_t)rows + calls));
    p->prefill_at = malloc(sizeof(int64_t) * calls * (size_t)layers);
    p->decode_at = malloc(sizeof(int64_t) * (size_t)o->steps * (size_t)layers);
    if (!p->rows || !p->longest || !p->row_start || !p->offset_start || !p->request_of ||
        !p->offsets || !p->prefill_at || !p->decode_at || !plan_calls(p, o->chunk))
        return 0;
    int64_t widest = p->longest_call > o->requests ? p->longest_call : o->requests;
    p->pool_tokens = widest + POOL_SLACK;
    for (int32_t c = 0; c < p->calls; c++)
        for (int32_t l = 0; l < layers; l++) {
            rng g = rng_at(o->seed, STREAM_OFFSETS, (uint64_t)c, (uint64_t)l);
            int64_t tokens = p->offsets[p->offset_start[c] + p->rows[c]];
            p->prefill_at[(size_t)c * layers + l] = rng_range(&g, 0, p->pool_tokens - tokens);
        }
    for (int32_t s = 0; s < o->steps; s++)
        for (int32_t l = 0; l < layers; l++) {
            rng g = rng_at(o->seed, STREAM_OFFSETS, (uint64_t)(p->calls + s), (uint64_t)l);
            p->decode_at[(size_t)s * layers + l] = rng_range(&g, 0, p->pool_tokens - o->requests);
        }
    return 1;
}

/* Host copies of what both GPUs read: a pool of seeded token inputs (bf16,
 * laid out as ssm_step_io's; a call reads `tokens` consecutive ones from its
 * plan offset) and every layer's weights (fp32: conv weight, conv bias,
 * A_log, dt_bias, layer after layer). */
typedef struct host_data {
    uint16_t *x, *gate, *beta;
    float *weights;
    int64_t d, gate_width, value_heads, dt_count, per_layer;
} host_data;

static void host_data_free(host_data *h)
{
    free(h->x);
    free(h->gate);
    free(h->beta);
    free(h->weights);
}

/* n bf16 numbers into dst, entries of `levels` (NORMALS of them) picked by
 * r as fill_normal picks. */
static void fill_bf16(const uint16_t *levels, rng *r, uint16_t *dst, int64_t n)
{
    uint64_t bits = 0;
    for (int64_t i = 0; i < n; i++) {
        if (i % 4 == 0)
            bits = rng_next(r);
        dst[i] = levels[bits & (NORMALS - 1)];
        bits >>= 16;
    }
}

/* The table scaled by `std` and rounded to bf16, into levels. */
static void bf16_levels(const float *table, double std, uint16_t *levels)
{
    for (int64_t i = 0; i < NORMALS; i++)
        levels[i] = bf16_of((float)(std * table[i]));
}

/* Fills h for model m: x ~ N(0, 1), gate ~ N(0, 1), beta ~ N(0, 1.5^2) per
 * pool token; conv weight ~ N(0, 1/W), bias ~ N(0, 0.05^2), A_log =
 * log(U[1, 16]), dt_bias ~ N(-2, 0.5^2) per layer (tools/synth.c's
 * statistics). 1 on success, 0 when out of memory. */
static int host_data_make(const ssm_model_dims *m, const plan *p, uint64_t seed, host_data *h)
{
    static float table[NORMALS];
    static uint16_t unit[NORMALS], wide[NORMALS];
    normal_table(seed, table);
    bf16_levels(table, 1.0, unit);
    bf16_levels(table, 1.5, wide);
    *h = (host_data){.d = ssm_conv_channels(m), .gate_width = ssm_gate_width(m),
                     .value_heads = m->value_heads};
    h->dt_count = m->kind == SSM_MODEL_KDA ? h->value_heads * m->key_dim : h->value_heads;
    h->per_layer = h->d * m->conv_width + h->d + h->value_heads + h->dt_count;
    size_t tokens = (size_t)p->pool_tokens;
    h->x = malloc(sizeof(uint16_t) * tokens * (size_t)h->d);
    h->gate = malloc(sizeof(uint16_t) * tokens * (size_t)h->gate_width);
    h->beta = malloc(sizeof(uint16_t) * tokens * (size_t)h->value_heads);
    h->weights = malloc(sizeof(float) * (size_t)(h->per_layer * m->layers));
    if (!h->x || !h->gate || !h->beta || !h->weights)
        return 0;
    for (int64_t t = 0; t < p->pool_tokens; t++) {
        rng g = rng_at(seed, STREAM_POOL, (uint64_t)t, 0);
        fill_bf16(unit, &g, h->x + t * h->d, h->d);
        fill_bf16(unit, &g, h->gate + t * h->gate_width, h->gate_width);
        fill_bf16(wide, &g, h->beta + t * h->value_heads, h->value_heads);
    }
    for (int32_t l = 0; l < m->layers; l++) {
        float *w = h->weights + (int64_t)l * h->per_layer;
        float *bias = w + h->d * m->conv_width, *a_log = bias + h->d;
        rng g = rng_at(seed, STREAM_WEIGHTS, (uint64_t)l, 0);
        fill_normal(table, &g, w, h->d * m->conv_width, 0.0,
                    1.0 / sqrt((double)m->conv_width));
        fill_normal(table, &g, bias, h->d, 0.0, 0.05);
        for (int64_t i = 0; i < h->value_heads; i++)
            a_log[i] = (float)log(1.0 + 15.0 * rng_uniform(&g));
        fill_normal(table, &g, a_log + h->value_heads, h->dt_count, -2.0, 0.5);
    }
    return 1;
}

/* ------------------------------------------------------------ per GPU */

/* What one GPU holds: its stream, the input pool, the weights, a prefill
 * output buffer and the pages buffer (allocated once a context tells the
 * page size). */
typedef struct gpu {
    int device;
    cudaStream_t stream;
    char *x, *gate, *beta;       /* pool, bf16 */
    float *weights;
    ssm_layer_weights *layer;    /* host [layers], pointing at `weights` */
    void *prefill_out;           /* [longest call][HV][V] bf16 */
    void *pages;                 /* [requests][stride] */
} gpu;

/* Creates g's stream on `device`, uploads h there and allocates the
 * prefill output; 1 on success. */
static int gpu_open(gpu *g, int device, const ssm_model_dims *m, const plan *p,
                    const host_data *h)
{
    size_t tokens = (size_t)p->pool_tokens;
    g->device = device;
    g->layer = calloc((size_t)m->layers, sizeof *g->layer);
    if (!g->layer || !cuda_ok(cudaSetDevice(device), "cudaSetDevice") ||
        !cuda_ok(cudaStreamCreateWithFlags(&g->stream, cudaStreamNonBlocking),
                 "cudaStreamCreate") ||
        !device_alloc(device, (void **)&g->x, tokens * (size_t)h->d * 2, h->x) ||
        !device_alloc(device, (void **)&g->gate, tokens * (size_t)h->gate_width * 2, h->gate) ||
        !device_alloc(device, (void **)&g->beta, tokens * (size_t)h->value_heads * 2, h->beta) ||
        !device_alloc(device, (void **)&g->weights,
                      sizeof(float) * (size_t)(h->per_layer * m->layers), h->weights) ||
        !device_alloc(device, &g->prefill_out,
                      (size_t)p->longest_call * (size_t)(h->value_heads * m->value_dim) * 2,
                      NULL))
        return 0;
    for (int32_t l = 0; l < m->layers; l++) {
        float *w = g->weights + (int64_t)l * h->per_layer;
        float *bias = w + h->d * m->conv_width, *a_log = bias + h->d;
        g->layer[l] = (ssm_layer_weights){w, bias, a_log, a_log + h->value_heads};
    }
    return 1;
}

static void gpu_close(gpu *g)
{
    if (g->stream && cudaSetDevice(g->device) == cudaSuccess) {
        cudaStreamSynchronize(g->stream);
        cudaStreamDestroy(g->stream);
    }
    device_free(g->device, g->x);
    device_free(g->device, g->gate);
    device_free(g->device, g->beta);
    device_free(g->device, g->weights);
    device_free(g->device, g->prefill_out);
    device_free(g->device, g->pages);
    free(g->layer);
}

/* ------------------------------------------------------------ contexts */

/* One context on one GPU with the batch metadata of the plan in its slots:
 * request r lives in slot[r]; prefill rows and decode rows name those. */
typedef struct lane {
    ssm_ctx *ctx;
    gpu *g;
    int32_t *slot;             /* host [requests] */
    int32_t *prefill_slots;    /* host, one per prefill row of the plan */
    int32_t *d_slots;          /* device [requests]: decode rows */
    int32_t *d_prefill_slots;  /* device, as prefill_slots */
    int32_t *d_offsets;        /* device copy of the plan's offsets */
} lane;

/* `loaded` with this run's mode, device, dtypes and pool: no drafts (the
 * hand-off decodes), bf16 activations, the state dtype of the options. */
static ssm_config config_for(const ssm_config *loaded, const options *o, const char *mode,
                             int device)
{
    ssm_config c = *loaded; /* shallow: strings stay the loaded config's */
    c.mode = mode;
    c.device = (ssm_device){SSM_DEVICE_CUDA, device};
    c.state_dtype = o->state;
    c.activation_dtype = SSM_DTYPE_BF16;
    c.max_requests = o->requests;
    c.max_draft_tokens = 0;
    return c;
}

/* Creates the context of `mode` on g's device, acquires a slot per request
 * and uploads the plan's metadata in those slots. 1 on success. */
static int lane_open(lane *l, gpu *g, const ssm_config *loaded, const options *o,
                     const char *mode, const plan *p)
{
    ssm_config c = config_for(loaded, o, mode, g->device);
    int64_t rows = p->calls ? p->row_start[p->calls - 1] + p->rows[p->calls - 1] : 0;
    int64_t offsets = rows + p->calls;
    l->g = g;
    l->slot = malloc(sizeof(int32_t) * (size_t)p->requests);
    l->prefill_slots = malloc(sizeof(int32_t) * (size_t)(rows ? rows : 1));
    if (!l->slot || !l->prefill_slots) {
        fprintf(stderr, "nccl_handoff: out of memory\n");
        return 0;
    }
    char what[64];
    snprintf(what, sizeof what, "ssm_ctx_create (%s, GPU %d)", mode, g->device);
    if (!ssm_ok(ssm_ctx_create(&c, &l->ctx), what))
        return 0;
    for (int32_t r = 0; r < p->requests; r++)
        if (!ssm_ok(ssm_slot_acquire(l->ctx, &l->slot[r]), "ssm_slot_acquire"))
            return 0;
    for (int64_t i = 0; i < rows; i++)
        l->prefill_slots[i] = l->slot[p->request_of[i]];
    return device_alloc(g->device, (void **)&l->d_slots, sizeof(int32_t) * (size_t)p->requests,
                        l->slot) &&
           device_alloc(g->device, (void **)&l->d_prefill_slots, sizeof(int32_t) * (size_t)rows,
                        l->prefill_slots) &&
           device_alloc(g->device, (void **)&l->d_offsets, sizeof(int32_t) * (size_t)offsets,
                        p->offsets);
}

static void lane_close(lane *l)
{
    if (l->g) {
        if (l->g->stream && cudaSetDevice(l->g->device) == cudaSuccess)
            cudaStreamSynchronize(l->g->stream);
        device_free(l->g->device, l->d_slots);
        device_free(l->g->device, l->d_prefill_slots);
        device_free(l->g->device, l->d_offsets);
    }
    ssm_ctx_destroy(l->ctx);
    free(l->slot);
    free(l->prefill_slots);
}

/* The io of `tokens` pool tokens from `at`, outputs to `out`. */
static ssm_step_io pool_io(const gpu *g, const host_data *h, int64_t at, void *out)
{
    return (ssm_step_io){g->x + at * h->d * 2, g->gate + at * h->gate_width * 2,
                         g->beta + at * h->value_heads * 2, out};
}

/* Queues the plan's prefill on l's stream: forward after forward, every
 * layer of each. 1 when every call was accepted. */
static int lane_prefill(lane *l, const plan *p, const host_data *h)
{
    for (int32_t c = 0; c < p->calls; c++) {
        int32_t r0 = p->row_start[c], o0 = p->offset_start[c];
        ssm_prefill_batch batch = {p->rows[c], l->d_prefill_slots + r0, l->d_offsets + o0,
                                   p->longest[c], l->prefill_slots + r0, p->offsets + o0};
        for (int32_t layer = 0; layer < p->layers; layer++) {
            ssm_step_io io = pool_io(l->g, h, p->prefill_at[(size_t)c * p->layers + layer],
                                     l->g->prefill_out);
            if (!ssm_ok(ssm_prefill(l->ctx, layer, &batch, &l->g->layer[layer], &io,
                                    l->g->stream),
                        "ssm_prefill"))
                return 0;
        }
    }
    return 1;
}

/* Bytes of one decode step's outputs for one layer, all rows. */
static size_t step_out_bytes(const ssm_model_dims *m, int32_t rows)
{
    return (size_t)rows * (size_t)m->value_heads * (size_t)m->value_dim * 2;
}

/* Queues the plan's decode steps on l's stream, every layer, all requests;
 * step s of layer `layer` writes block (s * layers + layer) of `out`. */
static int lane_decode(lane *l, const plan *p, const host_data *h, const ssm_model_dims *m,
                       char *out)
{
    ssm_batch batch = {p->requests, 1, l->d_slots, l->slot};
    size_t block = step_out_bytes(m, p->requests);
    for (int32_t s = 0; s < p->steps; s++)
        for (int32_t layer = 0; layer < p->layers; layer++) {
            size_t k = (size_t)s * p->layers + layer;
            ssm_step_io io = pool_io(l->g, h, p->decode_at[k], out + k * block);
            if (!ssm_ok(ssm_decode(l->ctx, layer, &batch, &l->g->layer[layer], &io,
                                   l->g->stream),
                        "ssm_decode"))
                return 0;
        }
    return 1;
}

/* 1 when no slot of l's context has raised a flag (NaN input, refused
 * page, ...); waits for the device. */
static int lane_clean(const lane *l, const char *name)
{
    ssm_ctx_report report;
    if (!ssm_ok(ssm_ctx_status(l->ctx, &report), "ssm_ctx_status"))
        return 0;
    if (report.flags)
        fprintf(stderr, "nccl_handoff: %s context: flags 0x%x on %d slots (first %d)\n", name,
                (unsigned)report.flags, (int)report.flagged_slots, (int)report.first_flagged);
    return report.flags == 0;
}

/* ------------------------------------------------------------ the run */

enum { /* on GPU 0 */ EV_PREFILL_START, EV_PREFILL_END, EV_EXPORT_START, EV_EXPORT_END,
       /* on GPU 1 */ EV_START, EV_RECEIVED, EV_END, EV_PLAIN_START, EV_PLAIN_END, EVENTS };
#define GPU0_EVENTS EV_START

/* Milliseconds of each timed repetition: the export on GPU 0's clock; the
 * send/recv as GPU 1 sees it (from its start mark to the end of the
 * receive, less the export); the import; the whole hand-off from the start
 * mark to the end of the import; and the plain transfer. */
typedef struct timings {
    float prefill;
    float exported[MAX_REPS], sent[MAX_REPS], imported[MAX_REPS], handoff[MAX_REPS];
    float plain[MAX_REPS], pipelined[MAX_REPS];
} timings;

/* Everything the program holds; zero is "nothing yet", which close_all
 * accepts at any point. */
typedef struct run {
    options o;
    ssm_config *loaded;
    ssm_model_dims m;
    plan p;
    host_data h;
    nccl_api nccl;
    ncclComm_t comm[2];
    gpu g[2];
    lane native, handoff, ref;
    size_t page_bytes, stride, bytes;
    int32_t *d_status;           /* GPU 1 [requests] */
    void *ref_pages;             /* GPU 1 [requests][stride]: plain transfers, then the
                                    reference's pages */
    char *out_handoff, *out_ref; /* GPU 1 decode outputs */
    size_t out_bytes;
    cudaEvent_t ev[EVENTS];
    /* The pipelined hand-off: GPU 0's export stream and GPU 1's import
     * stream; per group, its export done (GPU 0) and its pages landed
     * (GPU 1); its start (GPU 1's main stream) and end (GPU 1's import
     * stream). */
    cudaStream_t side[2];
    cudaEvent_t exported[MAX_GROUPS], landed[MAX_GROUPS], pipe_start, pipe_end;
    int32_t groups;              /* o.groups, at most the requests */
    timings t;
    int32_t pages_differ_at;     /* first page unequal to the reference's, or -1 */
    long long outputs_differ;    /* decode outputs unequal to the reference's */
    char name[2][256];           /* the GPUs */
    int nccl_version;
} run;

static int event_device(int e)
{
    return e < GPU0_EVENTS ? 0 : 1;
}

/* Records event e on its GPU's stream. */
static int record(run *r, int e)
{
    gpu *g = &r->g[event_device(e)];
    return cuda_ok(cudaSetDevice(g->device), "cudaSetDevice") &&
           cuda_ok(cudaEventRecord(r->ev[e], g->stream), "cudaEventRecord");
}

/* Makes GPU 0's stream wait for event e of GPU 1: GPU 0's part of a timed
 * round starts after GPU 1's start mark. */
static int gpu0_waits(run *r, int e)
{
    return cuda_ok(cudaSetDevice(r->g[0].device), "cudaSetDevice") &&
           cuda_ok(cudaStreamWaitEvent(r->g[0].stream, r->ev[e], 0), "cudaStreamWaitEvent");
}

/* Milliseconds from event a to event b (same GPU, both done). */
static float elapsed(const run *r, int a, int b)
{
    float ms = 0;
    cuda_ok(cudaEventElapsedTime(&ms, r->ev[a], r->ev[b]), "cudaEventElapsedTime");
    return ms;
}

/* Waits for both GPUs' streams, the pipeline's too. */
static int sync_both(run *r)
{
    for (int i = 0; i < 2; i++)
        if (!cuda_ok(cudaSetDevice(r->g[i].device), "cudaSetDevice") ||
            !cuda_ok(cudaStreamSynchronize(r->g[i].stream), "cudaStreamSynchronize") ||
            (r->side[i] &&
             !cuda_ok(cudaStreamSynchronize(r->side[i]), "cudaStreamSynchronize (pipeline)")))
            return 0;
    return 1;
}

/* Queues the NCCL transfer of `bytes` bytes from GPU 0's `from` to GPU 1's
 * `to`: rank 0 sends on GPU 0's stream, rank 1 receives on GPU 1's, one
 * group. */
static int transfer(run *r, const void *from, void *to, size_t bytes)
{
    const nccl_api *n = &r->nccl;
    if (!nccl_ok(n, n->group_start(), "ncclGroupStart"))
        return 0;
    int ok = nccl_ok(n, n->send(from, bytes, ncclUint8, 1, r->comm[0], r->g[0].stream),
                     "ncclSend") &&
             nccl_ok(n, n->recv(to, bytes, ncclUint8, 0, r->comm[1], r->g[1].stream),
                     "ncclRecv");
    return nccl_ok(n, n->group_end(), "ncclGroupEnd") && ok;
}

/* Queues one hand-off with its events: GPU 1 marks the start and GPU 0
 * waits for it; GPU 0 exports every request's page (timed alone); NCCL
 * carries the pages; GPU 1 imports them into the hand-off context, writing
 * a status per page. */
static int handoff_enqueue(run *r)
{
    gpu *g0 = &r->g[0], *g1 = &r->g[1];
    if (!cuda_ok(cudaSetDevice(g1->device), "cudaSetDevice") ||
        !cuda_ok(cudaMemsetAsync(r->d_status, 0x7F, sizeof(int32_t) * (size_t)r->o.requests,
                                 g1->stream),
                 "cudaMemsetAsync") ||
        !record(r, EV_START) || !gpu0_waits(r, EV_START) || !record(r, EV_EXPORT_START) ||
        !ssm_ok(ssm_slots_export_pages_device(r->native.ctx, r->o.requests, r->native.slot,
                                              g0->pages, r->stride, g0->stream),
                "ssm_slots_export_pages_device") ||
        !record(r, EV_EXPORT_END) || !transfer(r, g0->pages, g1->pages, r->bytes) ||
        !record(r, EV_RECEIVED))
        return 0;
    return ssm_ok(ssm_slots_import_pages_device(r->handoff.ctx, r->o.requests, r->handoff.slot,
                                                g1->pages, r->stride, r->d_status, g1->stream),
                  "ssm_slots_import_pages_device") &&
           record(r, EV_END);
}

/* 1 when every page of the last import was SSM_PAGE_ACCEPTED (waits for
 * GPU 1); otherwise prints the first refusals. */
static int statuses_accepted(run *r)
{
    int32_t *status = malloc(sizeof *status * (size_t)r->o.requests);
    int bad = 0;
    if (!status || !cuda_ok(cudaSetDevice(r->g[1].device), "cudaSetDevice") ||
        !cuda_ok(cudaMemcpy(status, r->d_status, sizeof *status * (size_t)r->o.requests,
                            cudaMemcpyDeviceToHost),
                 "cudaMemcpy (status)")) {
        free(status);
        return 0;
    }
    for (int32_t k = 0; k < r->o.requests; k++)
        if (status[k] != SSM_PAGE_ACCEPTED && bad++ < 5)
            fprintf(stderr, "nccl_handoff: page %d (request %d): status %d, not accepted\n",
                    (int)k, (int)k, (int)status[k]);
    free(status);
    return bad == 0;
}

/* One hand-off, waited for and checked; its times go to repetition `rep`
 * (-1: the warm-up, not kept). */
static int handoff_round(run *r, int rep)
{
    if (!handoff_enqueue(r) || !sync_both(r) || !statuses_accepted(r))
        return 0;
    if (rep >= 0) {
        r->t.exported[rep] = elapsed(r, EV_EXPORT_START, EV_EXPORT_END);
        r->t.imported[rep] = elapsed(r, EV_RECEIVED, EV_END);
        r->t.handoff[rep] = elapsed(r, EV_START, EV_END);
        float sent = elapsed(r, EV_START, EV_RECEIVED) - r->t.exported[rep];
        r->t.sent[rep] = sent > 0 ? sent : 0;
    }
    return 1;
}

/* One plain NCCL transfer of the same bytes (GPU 0's pages into GPU 1's
 * spare buffer), waited for; its time goes to repetition `rep` (-1: not
 * kept). */
static int plain_round(run *r, int rep)
{
    if (!record(r, EV_PLAIN_START) || !gpu0_waits(r, EV_PLAIN_START) ||
        !transfer(r, r->g[0].pages, r->ref_pages, r->bytes) || !record(r, EV_PLAIN_END) ||
        !sync_both(r))
        return 0;
    if (rep >= 0)
        r->t.plain[rep] = elapsed(r, EV_PLAIN_START, EV_PLAIN_END);
    return 1;
}

/* Makes stream s (of the current device) wait for event e. */
static int waits(cudaStream_t s, cudaEvent_t e)
{
    return cuda_ok(cudaStreamWaitEvent(s, e, 0), "cudaStreamWaitEvent");
}

/* Group j of the pipelined hand-off: its first request and how many. The
 * requests are spread evenly (sizes differ by at most one), so no group is
 * empty while groups <= requests and the run has the groups it says. */
static void group_of(const run *r, int32_t j, int32_t *first, int32_t *count)
{
    int64_t R = r->o.requests, G = r->groups;
    *first = (int32_t)(j * R / G);
    *count = (int32_t)((j + 1) * R / G - *first);
}

/* Group j through the pipeline: export on GPU 0's export stream, the send
 * on GPU 0's stream once it is done (the receive on GPU 1's), the import on
 * GPU 1's import stream once the pages have landed. */
static int pipeline_group(run *r, int32_t j)
{
    gpu *g0 = &r->g[0], *g1 = &r->g[1];
    int32_t first, count;
    group_of(r, j, &first, &count);
    if (count <= 0)
        return 1;
    size_t at = (size_t)first * r->stride, bytes = (size_t)count * r->stride;
    char *from = (char *)g0->pages + at, *to = (char *)g1->pages + at;
    if (!cuda_ok(cudaSetDevice(g0->device), "cudaSetDevice") ||
        !ssm_ok(ssm_slots_export_pages_device(r->native.ctx, count, r->native.slot + first, from,
                                              r->stride, r->side[0]),
                "ssm_slots_export_pages_device (pipelined)") ||
        !cuda_ok(cudaEventRecord(r->exported[j], r->side[0]), "cudaEventRecord") ||
        !waits(g0->stream, r->exported[j]) || !transfer(r, from, to, bytes) ||
        !cuda_ok(cudaSetDevice(g1->device), "cudaSetDevice") ||
        !cuda_ok(cudaEventRecord(r->landed[j], g1->stream), "cudaEventRecord") ||
        !waits(r->side[1], r->landed[j]))
        return 0;
    return ssm_ok(ssm_slots_import_pages_device(r->handoff.ctx, count, r->handoff.slot + first,
                                                to, r->stride, r->d_status + first, r->side[1]),
                  "ssm_slots_import_pages_device (pipelined)");
}

/* Queues the pipelined hand-off: GPU 1 clears the statuses and marks the
 * start, both side streams wait for it, then every group; GPU 1's import
 * stream marks the end. */
static int pipelined_enqueue(run *r)
{
    gpu *g1 = &r->g[1];
    if (!cuda_ok(cudaSetDevice(g1->device), "cudaSetDevice") ||
        !cuda_ok(cudaMemsetAsync(r->d_status, 0x7F, sizeof(int32_t) * (size_t)r->o.requests,
                                 g1->stream),
                 "cudaMemsetAsync") ||
        !cuda_ok(cudaEventRecord(r->pipe_start, g1->stream), "cudaEventRecord") ||
        !waits(r->side[1], r->pipe_start) ||
        !cuda_ok(cudaSetDevice(r->g[0].device), "cudaSetDevice") ||
        !waits(r->side[0], r->pipe_start))
        return 0;
    for (int32_t j = 0; j < r->groups; j++)
        if (!pipeline_group(r, j))
            return 0;
    return cuda_ok(cudaSetDevice(g1->device), "cudaSetDevice") &&
           cuda_ok(cudaEventRecord(r->pipe_end, r->side[1]), "cudaEventRecord");
}

/* One pipelined hand-off, waited for and checked; its time goes to
 * repetition `rep` (-1: not kept). */
static int pipelined_round(run *r, int rep)
{
    if (!pipelined_enqueue(r) || !sync_both(r) || !statuses_accepted(r))
        return 0;
    if (rep >= 0 &&
        !cuda_ok(cudaEventElapsedTime(&r->t.pipelined[rep], r->pipe_start, r->pipe_end),
                 "cudaEventElapsedTime"))
        return 0; /* no 0 ms sample in the median */
    return 1;
}

/* The pipeline's streams and events: 1 on success. */
static int pipeline_open(run *r)
{
    r->groups = r->o.groups < r->o.requests ? r->o.groups : r->o.requests;
    for (int i = 0; i < 2; i++) {
        if (!cuda_ok(cudaSetDevice(r->g[i].device), "cudaSetDevice") ||
            !cuda_ok(cudaStreamCreateWithFlags(&r->side[i], cudaStreamNonBlocking),
                     "cudaStreamCreate"))
            return 0;
        for (int32_t j = 0; j < r->groups; j++)
            if (!cuda_ok(cudaEventCreateWithFlags(i ? &r->landed[j] : &r->exported[j],
                                                  cudaEventDisableTiming),
                         "cudaEventCreate"))
                return 0;
    }
    return cuda_ok(cudaEventCreate(&r->pipe_start), "cudaEventCreate") &&
           cuda_ok(cudaEventCreate(&r->pipe_end), "cudaEventCreate");
}

/* Releases what pipeline_open made (any part of it). */
static void pipeline_close(run *r)
{
    for (int i = 0; i < 2; i++) {
        if (cudaSetDevice(r->g[i].device) != cudaSuccess)
            continue;
        for (int32_t j = 0; j < MAX_GROUPS; j++) {
            cudaEvent_t *e = i ? &r->landed[j] : &r->exported[j];
            if (*e)
                cudaEventDestroy(*e);
            *e = NULL;
        }
        if (i == 1 && r->pipe_start)
            cudaEventDestroy(r->pipe_start);
        if (i == 1 && r->pipe_end)
            cudaEventDestroy(r->pipe_end);
        if (r->side[i]) {
            cudaStreamSynchronize(r->side[i]);
            cudaStreamDestroy(r->side[i]);
        }
        r->side[i] = NULL;
    }
    r->pipe_start = r->pipe_end = NULL;
}

/* ------------------------------------------------------------ checks */

/* Compares the received pages (GPU 1's buffer) with the reference's, page
 * by page on the host; sets r->pages_differ_at and prints the first
 * difference. 1 when the copies worked. */
static int compare_pages(run *r)
{
    unsigned char *a = malloc(r->page_bytes), *b = malloc(r->page_bytes);
    int ok = a && b && cuda_ok(cudaSetDevice(r->g[1].device), "cudaSetDevice");
    r->pages_differ_at = -1;
    for (int32_t k = 0; ok && k < r->o.requests && r->pages_differ_at < 0; k++) {
        size_t at = (size_t)k * r->stride;
        ok = cuda_ok(cudaMemcpy(a, (char *)r->g[1].pages + at, r->page_bytes,
                                cudaMemcpyDeviceToHost),
                     "cudaMemcpy (page)") &&
             cuda_ok(cudaMemcpy(b, (char *)r->ref_pages + at, r->page_bytes,
                                cudaMemcpyDeviceToHost),
                     "cudaMemcpy (page)");
        for (size_t i = 0; ok && i < r->page_bytes; i++)
            if (a[i] != b[i]) {
                r->pages_differ_at = k;
                printf("MISMATCH: page of request %d, byte %zu of %zu: received 0x%02x, "
                       "reference 0x%02x\n",
                       (int)k, i, r->page_bytes, a[i], b[i]);
                break;
            }
    }
    free(a);
    free(b);
    return ok;
}

/* Compares every decode output of the hand-off run with the reference's,
 * bit for bit; sets r->outputs_differ and prints the first difference (step,
 * layer, request, element). Also refuses outputs that are all zero or hold
 * a NaN or Inf (the comparison would prove nothing). 1 when the copies
 * worked and the outputs are plausible. */
static int compare_outputs(run *r)
{
    size_t n = r->out_bytes / 2, per_row = (size_t)r->m.value_heads * r->m.value_dim;
    uint16_t *a = malloc(r->out_bytes), *b = malloc(r->out_bytes);
    int ok = a && b && cuda_ok(cudaSetDevice(r->g[1].device), "cudaSetDevice") &&
             cuda_ok(cudaMemcpy(a, r->out_handoff, r->out_bytes, cudaMemcpyDeviceToHost),
                     "cudaMemcpy (outputs)") &&
             cuda_ok(cudaMemcpy(b, r->out_ref, r->out_bytes, cudaMemcpyDeviceToHost),
                     "cudaMemcpy (outputs)");
    size_t nonzero = 0, nonfinite = 0;
    r->outputs_differ = 0;
    for (size_t i = 0; ok && i < n; i++) {
        nonzero += (a[i] & 0x7fff) != 0;
        nonfinite += (a[i] & 0x7f80) == 0x7f80;
        if (a[i] == b[i] || r->outputs_differ++ > 0) /* print the first only */
            continue;
        size_t row = i / per_row, block = row / (size_t)r->o.requests;
        printf("MISMATCH: decode step %zu, layer %zu, request %zu, element %zu: hand-off "
               "%.9g (0x%04x), reference %.9g (0x%04x)\n",
               block / (size_t)r->m.layers, block % (size_t)r->m.layers,
               row % (size_t)r->o.requests, i % per_row, float_of_bf16(a[i]), a[i],
               float_of_bf16(b[i]), b[i]);
    }
    if (ok && (nonzero == 0 || nonfinite))
        fprintf(stderr, "nccl_handoff: implausible decode outputs: %zu nonzero, %zu NaN/Inf "
                        "of %zu\n",
                nonzero, nonfinite, n);
    free(a);
    free(b);
    return ok && nonzero > 0 && nonfinite == 0;
}

/* ------------------------------------------------------------ report */

static int compare_floats(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

/* Median of n values (n >= 1); v is reordered. */
static float median(float *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, compare_floats);
    return n % 2 ? v[n / 2] : 0.5f * (v[n / 2 - 1] + v[n / 2]);
}

/* The medians the report prints. */
typedef struct summary {
    float exported, sent, imported, handoff, plain, pipelined;
    double handoff_gbps, plain_gbps, pipelined_gbps;
} summary;

static double gbps(size_t bytes, float ms)
{
    return ms > 0 ? (double)bytes / (ms * 1e-3) / 1e9 : 0.0;
}

static summary summarize(run *r)
{
    int n = r->o.reps;
    summary s = {median(r->t.exported, n),  median(r->t.sent, n),  median(r->t.imported, n),
                 median(r->t.handoff, n),   median(r->t.plain, n), median(r->t.pipelined, n),
                 0,
                 0,
                 0};
    s.handoff_gbps = gbps(r->bytes, s.handoff);
    s.plain_gbps = gbps(r->bytes, s.plain);
    s.pipelined_gbps = gbps(r->bytes, s.pipelined);
    return s;
}

/* The table on stdout. */
static void print_report(const run *r, const summary *s, int passed)
{
    const options *o = &r->o;
    double per = 1.0 / o->requests;
    printf("nccl_handoff: %s: %s, %d layers, H %d, HV %d, K %d, V %d; state %s, activations "
           "bf16\n",
           o->config, ssm_model_kind_name(r->m.kind), (int)r->m.layers, (int)r->m.heads,
           (int)r->m.value_heads, (int)r->m.key_dim, (int)r->m.value_dim,
           ssm_dtype_name(o->state));
    int v = r->nccl_version; /* 2.9 and later: major * 10000 + minor * 100 + patch */
    printf("GPU 0: %s (native, prefill); GPU 1: %s (replay, decode); NCCL %d.%d.%d\n",
           r->name[0], r->name[1], v / 10000, v / 100 % 100, v % 100);
    printf("%d requests, prompts %d..%d (%lld tokens, %d forwards of up to %d tokens a row, "
           "prefill %.1f ms on GPU 0), %d decode steps\n",
           (int)o->requests, (int)o->prompt_min, (int)o->prompt_max,
           (long long)r->p.prompt_tokens, (int)r->p.calls, (int)o->chunk, r->t.prefill,
           (int)o->steps);
    printf("page %zu bytes, stride %zu; %zu bytes a hand-off; median of %d after a warm-up\n\n",
           r->page_bytes, r->stride, r->bytes, (int)o->reps);
    printf("%-34s %10s %14s %8s\n", "", "ms", "ms a request", "GB/s");
    printf("%-34s %10.3f %14.4f\n", "export (GPU 0)", s->exported, s->exported * per);
    printf("%-34s %10.3f %14.4f\n", "send/recv", s->sent, s->sent * per);
    printf("%-34s %10.3f %14.4f\n", "import (GPU 1)", s->imported, s->imported * per);
    printf("%-34s %10.3f %14.4f %8.1f\n", "hand-off (export+send/recv+import)", s->handoff,
           s->handoff * per, s->handoff_gbps);
    char pipelined[64];
    snprintf(pipelined, sizeof pipelined, "hand-off, pipelined in %d groups", (int)r->groups);
    printf("%-34s %10.3f %14.4f %8.1f\n", pipelined, s->pipelined, s->pipelined * per,
           s->pipelined_gbps);
    printf("%-34s %10.3f %14.4f %8.1f\n", "plain ncclSend/ncclRecv", s->plain, s->plain * per,
           s->plain_gbps);
    printf("%-34s %10.3f\n", "hand-off / plain bandwidth",
           s->plain_gbps > 0 ? s->handoff_gbps / s->plain_gbps : 0.0);
    printf("%-34s %10.3f\n\n", "pipelined / plain bandwidth",
           s->plain_gbps > 0 ? s->pipelined_gbps / s->plain_gbps : 0.0);
    printf("check: %d pages accepted; pages %s the reference's; %d x %d x %d decode outputs: "
           "%lld differ\n",
           (int)o->requests, r->pages_differ_at < 0 ? "equal" : "differ from",
           (int)o->steps, (int)r->m.layers, (int)o->requests, r->outputs_differ);
    printf("%s\n", passed ? "PASS" : "FAIL");
}

/* Writes "key": "value", with value's quotes, backslashes and control
 * characters escaped. */
static void json_string(FILE *f, const char *key, const char *value)
{
    fprintf(f, "\"%s\": \"", key);
    for (const unsigned char *c = (const unsigned char *)value; *c; c++)
        if (*c == '"' || *c == '\\')
            fprintf(f, "\\%c", *c);
        else if (*c < 0x20)
            fprintf(f, "\\u%04x", *c);
        else
            fputc(*c, f);
    fputs("\", ", f);
}

/* The same as JSON into o->json; 1 on success. */
static int write_json(const run *r, const summary *s, int passed)
{
    const options *o = &r->o;
    FILE *f = fopen(o->json, "w");
    if (!f) {
        perror(o->json);
        return 0;
    }
    fputs("{\n  ", f);
    json_string(f, "config", o->config);
    json_string(f, "model", ssm_model_kind_name(r->m.kind));
    fprintf(f, "\"layers\": %d, ", (int)r->m.layers);
    json_string(f, "state_dtype", ssm_dtype_name(o->state));
    fputs("\"activation_dtype\": \"bf16\",\n  ", f);
    json_string(f, "gpu0", r->name[0]);
    json_string(f, "gpu1", r->name[1]);
    fprintf(f, "\"nccl_version\": %d,\n", r->nccl_version);
    fprintf(f,
            "  \"requests\": %d, \"prompt_min\": %d, \"prompt_max\": %d, \"prompt_tokens\": "
            "%lld, \"chunk\": %d,\n  \"decode_steps\": %d, \"reps\": %d, \"seed\": %llu,\n",
            (int)o->requests, (int)o->prompt_min, (int)o->prompt_max,
            (long long)r->p.prompt_tokens, (int)o->chunk, (int)o->steps, (int)o->reps,
            (unsigned long long)o->seed);
    fprintf(f,
            "  \"page_bytes\": %zu, \"stride\": %zu, \"bytes\": %zu, \"prefill_ms\": %.4f,\n"
            "  \"export_ms\": %.4f, \"send_recv_ms\": %.4f, \"import_ms\": %.4f,\n"
            "  \"handoff_ms\": %.4f, \"handoff_ms_per_request\": %.5f, \"handoff_gbps\": %.3f,\n"
            "  \"plain_ms\": %.4f, \"plain_gbps\": %.3f, \"ratio\": %.4f,\n",
            r->page_bytes, r->stride, r->bytes, r->t.prefill, s->exported, s->sent, s->imported,
            s->handoff, (double)s->handoff / o->requests, s->handoff_gbps, s->plain, s->plain_gbps,
            s->plain_gbps > 0 ? s->handoff_gbps / s->plain_gbps : 0.0);
    fprintf(f,
            "  \"groups\": %d, \"pipelined_ms\": %.4f, \"pipelined_ms_per_request\": %.5f, "
            "\"pipelined_gbps\": %.3f, \"pipelined_ratio\": %.4f,\n",
            (int)r->groups, s->pipelined, (double)s->pipelined / o->requests, s->pipelined_gbps,
            s->plain_gbps > 0 ? s->pipelined_gbps / s->plain_gbps : 0.0);
    fprintf(f, "  \"pages_equal\": %s, \"outputs_differ\": %lld, \"pass\": %s\n}\n",
            r->pages_differ_at < 0 ? "true" : "false", r->outputs_differ,
            passed ? "true" : "false");
    return fclose(f) == 0;
}

/* ------------------------------------------------------------ setup and steps */

/* Loads the config and checks that GPUs and NCCL are there. EXIT_PASS,
 * EXIT_FAIL (a bad config), or EXIT_SKIP after saying why. */
static int preflight(run *r)
{
    if (!ssm_ok(ssm_config_load(r->o.config, &r->loaded), "ssm_config_load"))
        return EXIT_FAIL;
    r->m = r->loaded->model;
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess || count < 2) {
        printf("nccl_handoff: SKIP: needs two CUDA devices, found %d%s%s\n",
               e == cudaSuccess ? count : 0, e == cudaSuccess ? "" : ": ",
               e == cudaSuccess ? "" : cudaGetErrorString(e));
        return EXIT_SKIP;
    }
    /* Point-to-point needs no NVLink multicast, and on shared hosts it must
     * stay off (a multicast fault can take the host's GPUs out). */
    setenv("NCCL_NVLS_ENABLE", "0", 1);
    int code = nccl_load(r->o.nccl, &r->nccl);
    if (code != EXIT_PASS)
        return code;
    if (!nccl_ok(&r->nccl, r->nccl.get_version(&r->nccl_version), "ncclGetVersion"))
        return EXIT_FAIL;
    for (int i = 0; i < 2; i++) {
        struct cudaDeviceProp prop;
        if (!cuda_ok(cudaGetDeviceProperties(&prop, i), "cudaGetDeviceProperties"))
            return EXIT_FAIL;
        snprintf(r->name[i], sizeof r->name[i], "%s", prop.name);
    }
    if (strcmp(r->name[0], r->name[1]))
        printf("nccl_handoff: note: two kinds of GPU (%s, %s): bit-for-bit equality assumes "
               "one\n",
               r->name[0], r->name[1]);
    return EXIT_PASS;
}

/* The workload, the data on both GPUs, NCCL's communicators, the events
 * and the native and hand-off contexts. 1 on success. */
static int setup(run *r)
{
    const int devices[2] = {0, 1};
    fprintf(stderr, "nccl_handoff: generating inputs...\n");
    if (!plan_make(&r->o, r->m.layers, &r->p) ||
        !host_data_make(&r->m, &r->p, r->o.seed, &r->h)) {
        fprintf(stderr, "nccl_handoff: out of memory\n");
        return 0;
    }
    r->out_bytes =
        step_out_bytes(&r->m, r->o.requests) * (size_t)r->o.steps * (size_t)r->m.layers;
    if (!gpu_open(&r->g[0], 0, &r->m, &r->p, &r->h) ||
        !gpu_open(&r->g[1], 1, &r->m, &r->p, &r->h) ||
        !lane_open(&r->native, &r->g[0], r->loaded, &r->o, "native", &r->p) ||
        !lane_open(&r->handoff, &r->g[1], r->loaded, &r->o, "replay", &r->p))
        return 0;
    r->page_bytes = ssm_page_bytes(r->native.ctx);
    r->stride = (r->page_bytes + PAGE_ALIGN - 1) / PAGE_ALIGN * PAGE_ALIGN;
    r->bytes = r->stride * (size_t)r->o.requests;
    if (!device_alloc(0, &r->g[0].pages, r->bytes, NULL) ||
        !device_alloc(1, &r->g[1].pages, r->bytes, NULL) ||
        !device_alloc(1, &r->ref_pages, r->bytes, NULL) ||
        !device_alloc(1, (void **)&r->d_status, sizeof(int32_t) * (size_t)r->o.requests, NULL) ||
        !device_alloc(1, (void **)&r->out_handoff, r->out_bytes, NULL) ||
        !device_alloc(1, (void **)&r->out_ref, r->out_bytes, NULL))
        return 0;
    for (int e = 0; e < EVENTS; e++)
        if (!cuda_ok(cudaSetDevice(event_device(e)), "cudaSetDevice") ||
            !cuda_ok(cudaEventCreate(&r->ev[e]), "cudaEventCreate"))
            return 0;
    if (!pipeline_open(r))
        return 0;
    return nccl_ok(&r->nccl, r->nccl.comm_init_all(r->comm, 2, devices), "ncclCommInitAll");
}

/* Steps 1 to 3: GPU 0 prefills; a warm-up round and the timed rounds of
 * hand-off, plain transfer and pipelined hand-off (each hand-off re-imports
 * the same pages; the pipelined one is last, so the decode and the checks
 * run on its import); GPU 1 decodes the hand-off context. 1 on success. */
static int handoff_run(run *r)
{
    fprintf(stderr, "nccl_handoff: prefill on GPU 0...\n");
    if (!record(r, EV_PREFILL_START) || !lane_prefill(&r->native, &r->p, &r->h) ||
        !record(r, EV_PREFILL_END) || !sync_both(r))
        return 0;
    r->t.prefill = elapsed(r, EV_PREFILL_START, EV_PREFILL_END);
    fprintf(stderr, "nccl_handoff: hand-off, %d rounds...\n", (int)r->o.reps + 1);
    if (!handoff_round(r, -1) || !plain_round(r, -1) || !pipelined_round(r, -1))
        return 0;
    for (int rep = 0; rep < r->o.reps; rep++)
        if (!handoff_round(r, rep) || !plain_round(r, rep) || !pipelined_round(r, rep))
            return 0;
    fprintf(stderr, "nccl_handoff: decode on GPU 1...\n");
    return lane_decode(&r->handoff, &r->p, &r->h, &r->m, r->out_handoff) && sync_both(r) &&
           lane_clean(&r->native, "native") && lane_clean(&r->handoff, "hand-off");
}

/* Step 4: a fresh replay context on GPU 1 prefills the same prompts, exports
 * its pages into the spare buffer and decodes the same steps. 1 on success. */
static int reference_run(run *r)
{
    fprintf(stderr, "nccl_handoff: reference on GPU 1...\n");
    return lane_open(&r->ref, &r->g[1], r->loaded, &r->o, "replay", &r->p) &&
           lane_prefill(&r->ref, &r->p, &r->h) &&
           ssm_ok(ssm_slots_export_pages_device(r->ref.ctx, r->o.requests, r->ref.slot,
                                                r->ref_pages, r->stride, r->g[1].stream),
                  "ssm_slots_export_pages_device (reference)") &&
           lane_decode(&r->ref, &r->p, &r->h, &r->m, r->out_ref) && sync_both(r) &&
           lane_clean(&r->ref, "reference");
}

/* Releases everything r holds, whatever was reached. */
static void close_all(run *r)
{
    if (r->g[0].stream || r->g[1].stream)
        sync_both(r);
    lane_close(&r->ref);
    lane_close(&r->handoff);
    lane_close(&r->native);
    for (int i = 0; i < 2; i++)
        if (r->comm[i])
            r->nccl.comm_destroy(r->comm[i]);
    for (int e = 0; e < EVENTS; e++)
        if (r->ev[e] && cudaSetDevice(event_device(e)) == cudaSuccess)
            cudaEventDestroy(r->ev[e]);
    pipeline_close(r);
    device_free(1, r->ref_pages);
    device_free(1, r->d_status);
    device_free(1, r->out_handoff);
    device_free(1, r->out_ref);
    gpu_close(&r->g[0]);
    gpu_close(&r->g[1]);
    host_data_free(&r->h);
    plan_free(&r->p);
    if (r->nccl.handle)
        dlclose(r->nccl.handle);
    ssm_config_free(r->loaded);
}

/* Everything after the preflight: the runs, the checks, the report. */
static int execute(run *r)
{
    if (!setup(r) || !handoff_run(r) || !reference_run(r))
        return EXIT_FAIL;
    int checked = compare_pages(r);
    checked = compare_outputs(r) && checked;
    int passed = checked && r->pages_differ_at < 0 && r->outputs_differ == 0;
    summary s = summarize(r);
    print_report(r, &s, passed);
    if (r->o.json && !write_json(r, &s, passed))
        return EXIT_FAIL;
    return passed ? EXIT_PASS : EXIT_FAIL;
}

int main(int argc, char **argv)
{
    static run r; /* large (the timings); zero: nothing held yet */
    int code = parse_options(argc, argv, &r.o);
    if (code)
        return code < 0 ? EXIT_PASS : code;
    code = preflight(&r);
    if (code == EXIT_PASS)
        code = execute(&r);
    close_all(&r);
    return code;
}
