/* splitmix64, the one generator of seeded numbers: the command's synthetic
 * sessions (synth.c), serve's workload (serve_workload.c) and the tests'
 * seeds (tests/testutil.c) draw from it. Header-only.
 *
 * A keyed stream starts from a hash of (seed, stream, coordinates), one
 * coordinate mixed in at a time so that nearby tuples stay independent;
 * every number is then a pure function of its key and its place in the
 * stream, never of the order in which a program asks for it. */
#ifndef SSM_TOOLS_RNG_H
#define SSM_TOOLS_RNG_H

#include <stdint.h>

/* splitmix64's increment (2^64 / golden ratio). */
#define RNG_GAMMA 0x9e3779b97f4a7c15ull

typedef struct rng {
    uint64_t state;
} rng;

/* splitmix64's output function: a bijective mix of 64 bits. */
static inline uint64_t rng_mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* The next 64 bits of a stream. */
static inline uint64_t rng_next(rng *r)
{
    r->state += RNG_GAMMA;
    return rng_mix64(r->state);
}

/* 64 bits as a double in [0, 1): the top 53 bits. */
static inline double rng_unit(uint64_t bits)
{
    return (double)(bits >> 11) * 0x1.0p-53;
}

/* The next number of a stream, uniform in [0, 1). */
static inline double rng_uniform(rng *r)
{
    return rng_unit(rng_next(r));
}

/* The stream keyed by (seed, stream, a, b). */
static inline rng rng_at(uint64_t seed, uint64_t stream, uint64_t a, uint64_t b)
{
    uint64_t h = rng_mix64(seed + RNG_GAMMA * stream);
    h = rng_mix64(h ^ (a + 0x632be59bd9b4e019ull));
    return (rng){rng_mix64(h ^ (b + 0x8cb92ba72f3d8dd7ull))};
}

/* The stream keyed by (seed, stream, a, b, c): (seed, stream, a, b)'s key
 * with c mixed in. */
static inline rng rng_at3(uint64_t seed, uint64_t stream, uint64_t a, uint64_t b, uint64_t c)
{
    rng r = rng_at(seed, stream, a, b);
    return (rng){rng_mix64(r.state ^ (c + 0x3c6ef372fe94f82bull))};
}

#endif
