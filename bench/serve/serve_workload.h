/* The seeded workload of `ssmstate serve` (docs/serve.md): when requests
 * arrive, how long their prompts and outputs are, and how many tokens each
 * MTP round accepts. Every number is a pure function of the seed and its
 * coordinates (request, round), never of the order it is asked for, so every
 * mode and every concurrency level sees the same requests. */
#ifndef SSM_TOOLS_SERVE_WORKLOAD_H
#define SSM_TOOLS_SERVE_WORKLOAD_H

#include <stdint.h>

typedef struct serve_workload {
    uint64_t seed;
    double rate;                     /* mean arrivals per engine step (> 0) */
    int32_t prompt_min, prompt_max;  /* prompt lengths: log-uniform in [min, max] */
    int32_t output_min, output_max;  /* output lengths: uniform in [min, max] */
    double accept;                   /* chance that each draft token is accepted */
    int32_t tokens;                  /* T of a verify round: 1 + drafts */
} serve_workload;

/* The unit exponential E_i ~ Exp(1) of request i: request i arrives E_i / rate
 * engine steps after request i - 1 (request 0 after time 0), so arrivals form
 * a Poisson process of `rate` requests per step. Always > 0. */
double serve_unit_gap(uint64_t seed, int64_t request);

/* Prompt length of a request: exp(U[ln min, ln max]) rounded to the nearest
 * integer, clamped to [min, max]. */
int32_t serve_prompt_length(const serve_workload *w, int64_t request);

/* Output length of a request: uniform in [output_min, output_max]. */
int32_t serve_output_length(const serve_workload *w, int64_t request);

/* Accepted length of a request's round: 1 (the verified token) plus each
 * draft in turn accepted with probability w->accept until the first
 * rejection; in [1, w->tokens]. */
int32_t serve_accepted_length(const serve_workload *w, int64_t request, int32_t round);

/* The arrival process, walked forward in time. */
typedef struct serve_arrivals {
    const serve_workload *w;
    int64_t arrived;   /* requests 0 .. arrived-1 have arrived */
    double next_time;  /* arrival time of request `arrived`, in steps */
} serve_arrivals;

/* Time 0, nobody arrived yet. */
void serve_arrivals_init(serve_arrivals *a, const serve_workload *w);

/* Advances to `time` (non-decreasing between calls) and returns how many
 * requests have arrived at or before it. */
int64_t serve_arrivals_until(serve_arrivals *a, double time);

#endif
