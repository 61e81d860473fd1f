/* Config keys and their limits, shared by the parser and the validator. */
#ifndef SSM_CORE_CONFIG_LIMITS_H
#define SSM_CORE_CONFIG_LIMITS_H

#define SSM_MAX_LAYERS 4096
#define SSM_MAX_HEAD_DIM 1024
#define SSM_MAX_HEADS 1024
#define SSM_MAX_CONV_WIDTH 16
#define SSM_MAX_DRAFT_TOKENS 15
#define SSM_MAX_REQUESTS (1 << 20)

#endif
