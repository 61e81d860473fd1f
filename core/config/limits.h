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

#endif
