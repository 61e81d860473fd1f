/* The seeded workload (see serve_workload.h): a splitmix64 stream (rng.h)
 * per (seed, purpose, request, round). */
#include <math.h>

#include "tools/rng.h"
#include "serve_workload.h"

/* One stream per purpose, so a request's prompt never correlates with its
 * arrival or its acceptances. */
enum { STREAM_GAP = 11, STREAM_PROMPT = 12, STREAM_OUTPUT = 13, STREAM_ACCEPT = 14 };

double serve_unit_gap(uint64_t seed, int64_t request)
{
    rng s = rng_at(seed, STREAM_GAP, (uint64_t)request, 0);
    double u = rng_uniform(&s);
    return -log1p(-u) + 0x1.0p-60; /* u < 1, so finite; never 0 */
}

int32_t serve_prompt_length(const serve_workload *w, int64_t request)
{
    rng s = rng_at(w->seed, STREAM_PROMPT, (uint64_t)request, 0);
    double lo = log((double)w->prompt_min), hi = log((double)w->prompt_max);
    double length = floor(exp(lo + (hi - lo) * rng_uniform(&s)) + 0.5);
    if (length < w->prompt_min)
        return w->prompt_min;
    return length > w->prompt_max ? w->prompt_max : (int32_t)length;
}

int32_t serve_output_length(const serve_workload *w, int64_t request)
{
    rng s = rng_at(w->seed, STREAM_OUTPUT, (uint64_t)request, 0);
    int64_t span = (int64_t)w->output_max - w->output_min + 1;
    int64_t pick = (int64_t)(rng_uniform(&s) * (double)span);
    return w->output_min + (int32_t)(pick < span ? pick : span - 1);
}

int32_t serve_accepted_length(const serve_workload *w, int64_t request, int32_t round)
{
    rng s = rng_at(w->seed, STREAM_ACCEPT, (uint64_t)request, (uint64_t)round);
    int32_t accepted = 1;
    while (accepted < w->tokens && rng_uniform(&s) < w->accept)
        accepted++;
    return accepted;
}

void serve_arrivals_init(serve_arrivals *a, const serve_workload *w)
{
    a->w = w;
    a->arrived = 0;
    a->next_time = serve_unit_gap(w->seed, 0) / w->rate;
}

int64_t serve_arrivals_until(serve_arrivals *a, double time)
{
    while (a->next_time <= time) {
        a->arrived++;
        a->next_time += serve_unit_gap(a->w->seed, a->arrived) / a->w->rate;
    }
    return a->arrived;
}
