/* The seeded workload (see serve_workload.h): a splitmix64 stream per
 * (seed, purpose, request, round). */
#include <math.h>

#include "serve_workload.h"

/* One stream per purpose, so a request's prompt never correlates with its
 * arrival or its acceptances. */
enum { STREAM_GAP = 11, STREAM_PROMPT = 12, STREAM_OUTPUT = 13, STREAM_ACCEPT = 14 };

static uint64_t mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* The first state of the stream keyed by (seed, stream, a, b). */
static uint64_t stream_at(uint64_t seed, uint64_t stream, uint64_t a, uint64_t b)
{
    uint64_t h = mix64(seed + 0x9e3779b97f4a7c15ull * stream);
    h = mix64(h ^ (a + 0x632be59bd9b4e019ull));
    return mix64(h ^ (b + 0x8cb92ba72f3d8dd7ull));
}

/* The next uniform number in [0, 1) of a stream. */
static double next_uniform(uint64_t *state)
{
    *state += 0x9e3779b97f4a7c15ull;
    return (double)(mix64(*state) >> 11) * 0x1.0p-53;
}

double serve_unit_gap(uint64_t seed, int64_t request)
{
    uint64_t s = stream_at(seed, STREAM_GAP, (uint64_t)request, 0);
    double u = next_uniform(&s);
    return -log1p(-u) + 0x1.0p-60; /* u < 1, so finite; never 0 */
}

int32_t serve_prompt_length(const serve_workload *w, int64_t request)
{
    uint64_t s = stream_at(w->seed, STREAM_PROMPT, (uint64_t)request, 0);
    double lo = log((double)w->prompt_min), hi = log((double)w->prompt_max);
    double length = floor(exp(lo + (hi - lo) * next_uniform(&s)) + 0.5);
    if (length < w->prompt_min)
        return w->prompt_min;
    return length > w->prompt_max ? w->prompt_max : (int32_t)length;
}

int32_t serve_output_length(const serve_workload *w, int64_t request)
{
    uint64_t s = stream_at(w->seed, STREAM_OUTPUT, (uint64_t)request, 0);
    int64_t span = (int64_t)w->output_max - w->output_min + 1;
    int64_t pick = (int64_t)(next_uniform(&s) * (double)span);
    return w->output_min + (int32_t)(pick < span ? pick : span - 1);
}

int32_t serve_accepted_length(const serve_workload *w, int64_t request, int32_t round)
{
    uint64_t s = stream_at(w->seed, STREAM_ACCEPT, (uint64_t)request, (uint64_t)round);
    int32_t accepted = 1;
    while (accepted < w->tokens && next_uniform(&s) < w->accept)
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
