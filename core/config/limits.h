/* Config keys and their limits, shared by the parser and the validator. */
#ifndef SSM_CORE_CONFIG_LIMITS_H
#define SSM_CORE_CONFIG_LIMITS_H

#define SSM_MAX_LAYERS 4096
#define SSM_MAX_HEAD_DIM 1024
#define SSM_MAX_HEADS 1024
#define SSM_MAX_CONV_WIDTH 16
#define SSM_MAX_DRAFT_TOKENS 15
/* [tuning] budget_ms: the most, and what 0 (unset) means. */
#define SSM_TUNING_MAX_BUDGET_MS 10000
#define SSM_TUNING_DEFAULT_BUDGET_MS 20
#define SSM_MAX_REQUESTS (1 << 20)
/* [workload], the command's simulated session: requests, prompt lengths,
 * prefill chunks and rounds a request, each at most this; and the tokens of
 * the whole session, requests * (prompt_max + decode_steps * T), at most
 * SSM_MAX_WORKLOAD_TOKENS (a CPU run past it would not end in any useful
 * time). */
#define SSM_MAX_WORKLOAD_COUNT (1 << 20)
#define SSM_MAX_WORKLOAD_TOKENS (1LL << 32)

#endif
