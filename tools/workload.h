/* The simulated session of `ssmstate run` (docs/config.md, "[workload]"):
 * how many requests, their prompt lengths, prefill chunks and verify
 * rounds, the draft acceptance and the seed. The library keeps the config's
 * [workload] section as text, as it keeps any section it does not
 * interpret; this reads it, with the library's rules for numbers and the
 * same "file:line: message" form of errors. */
#ifndef SSM_TOOLS_WORKLOAD_H
#define SSM_TOOLS_WORKLOAD_H

#include <stddef.h>
#include <stdint.h>

#include "ssmstate/ssmstate.h"

/* The section's name in a config file. */
#define WORKLOAD_SECTION "workload"

/* requests, prompt lengths, prefill chunks and rounds a request: each at
 * most WORKLOAD_MAX_COUNT; and the tokens of the whole session,
 * requests * (prompt_max + decode_steps * T), at most WORKLOAD_MAX_TOKENS
 * (a CPU run past it would not end in any useful time). */
#define WORKLOAD_MAX_COUNT (1 << 20)
#define WORKLOAD_MAX_TOKENS (1LL << 32)

typedef struct workload {
    int32_t requests;      /* requests served in the session */
    int32_t prompt_min;    /* prompt lengths are drawn uniformly in [min, max] */
    int32_t prompt_max;
    int32_t prefill_chunk; /* longest prefill chunk; prompts are split into chunks */
    int32_t decode_steps;  /* verify rounds per request */
    double acceptance;     /* probability that each draft token is accepted */
    uint64_t seed;
} workload;

/* The defaults, a session of a config without [workload]: 4 requests,
 * prompts of 8..32 tokens, prefill chunks of at most 64, 8 rounds,
 * acceptance 0.7, seed 1. */
void workload_defaults(workload *w);

/* The [workload] of `config` (a loaded config, or a struct with mode
 * sections) into *out: every key it sets, the defaults for the others, each
 * value read strictly and checked, then the session as a whole against
 * WORKLOAD_MAX_TOKENS with T = 1 + config->max_draft_tokens. Returns 0, or
 * -1 with the first error in err ("file:line: message", the line of the
 * key, or of the section header; no prefix when the config names no
 * source), *out untouched. */
int workload_from_config(const ssm_config *config, workload *out, char *err, size_t err_len);

#endif
