/* ssmstate: types shared by the engine API and every plugin ABI version.
 *
 * Enumerations here are append-only: a value, once published, keeps its number
 * forever, because frozen plugin ABI headers refer to them. */
#ifndef SSMSTATE_TYPES_H
#define SSMSTATE_TYPES_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Every fallible call returns one of these. SSM_OK is zero; everything else
 * is an error and leaves the objects involved as they were. The thread-local
 * message from ssm_last_error() says what exactly went wrong. */
typedef enum ssm_status {
    SSM_OK = 0,
    SSM_ERR_INVALID_ARGUMENT = 1,  /* NULL pointer, bad shape, bad length */
    SSM_ERR_CONFIG = 2,            /* config file or struct rejected (file:line in message) */
    SSM_ERR_PLUGIN = 3,            /* plugin missing, not a plugin, or wrong ABI */
    SSM_ERR_UNSUPPORTED = 4,       /* the mode or device does not offer this */
    SSM_ERR_OUT_OF_MEMORY = 5,     /* an allocation failed; the context stays usable */
    SSM_ERR_POOL_EXHAUSTED = 6,    /* no free slot */
    SSM_ERR_SLOT_RANGE = 7,        /* slot outside [0, capacity) and not -1 */
    SSM_ERR_SLOT_NOT_ACQUIRED = 8, /* slot is in range but free */
    SSM_ERR_VERIFY_PENDING = 9,    /* slot has a verify that is not committed yet */
    SSM_ERR_ACCEPTED_RANGE = 10,   /* accepted length outside [1, T] */
    SSM_ERR_TICKET_STALE = 11,     /* ticket of an older forward over these rows */
    SSM_ERR_TICKET_FOREIGN = 12,   /* ticket issued by another context, or forged */
    SSM_ERR_TICKET_REPEATED = 13,  /* ticket already committed */
    SSM_ERR_TICKET_INCOMPLETE = 14,/* commit before every layer was verified */
    SSM_ERR_PAGE_INVALID = 15,     /* state page: bad magic, version, dims, dtype, checksum */
    SSM_ERR_DEVICE = 16,           /* the accelerator runtime reported an error */
    SSM_ERR_INTERNAL = 17          /* a bug in ssmstate: please report it */
} ssm_status;

typedef enum ssm_model_kind {
    SSM_MODEL_GDN = 1, /* Gated DeltaNet: one scalar gate per value head */
    SSM_MODEL_KDA = 2  /* Kimi Delta Attention: one gate per value head and key channel */
} ssm_model_kind;

typedef enum ssm_dtype {
    SSM_DTYPE_F32 = 1,
    SSM_DTYPE_BF16 = 2,
    SSM_DTYPE_F16 = 3 /* reserved; not offered by the built-in modes yet */
} ssm_dtype;

typedef enum ssm_device_type {
    SSM_DEVICE_CPU = 1,
    SSM_DEVICE_CUDA = 2
} ssm_device_type;

/* Where a context's state lives and where its step calls run. All pointers
 * handed to step calls (inputs, outputs, batch metadata, weights) must be
 * addressable there: host memory for CPU, device memory for CUDA. */
typedef struct ssm_device {
    ssm_device_type type;
    int32_t index; /* CUDA ordinal; 0 for the CPU */
} ssm_device;

/* Shape of one linear-attention layer. */
typedef struct ssm_model_dims {
    ssm_model_kind kind;
    int32_t layers;      /* logical layers; one state per layer per slot */
    int32_t heads;       /* H: query/key heads */
    int32_t value_heads; /* HV: value heads, HV % H == 0 */
    int32_t key_dim;     /* K */
    int32_t value_dim;   /* V */
    int32_t conv_width;  /* W */
    int32_t has_lower_bound; /* KDA only: 1 = sigmoid gate with lower bound */
    float lower_bound;       /* KDA only: the (negative) bound when has_lower_bound */
} ssm_model_dims;

/* Layer parameters for one step call, fp32, in the context's memory space.
 * Shapes: conv_weight [D][W], conv_bias [D] or NULL, a_log [HV],
 * dt_bias [HV] (GDN) or [HV][K] (KDA). */
typedef struct ssm_layer_weights {
    const float *conv_weight;
    const float *conv_bias;
    const float *a_log;
    const float *dt_bias;
} ssm_layer_weights;

/* Per-token inputs and outputs of one step call, all in the activation dtype,
 * token-major: x [tokens][D], gate [tokens][HV] (GDN, "a") or
 * [tokens][HV][K] (KDA, "f"), beta [tokens][HV] (raw, before the sigmoid),
 * out [tokens][HV][V]. For decode/verify token (row r, position t) is
 * r*T + t; for prefill the tokens of row r are token_offsets[r] .. [r+1]-1. */
typedef struct ssm_step_io {
    const void *x;
    const void *gate;
    const void *beta;
    void *out;
} ssm_step_io;

/* Bits reported per slot and per context by ssm_ctx_status(). */
enum {
    SSM_FLAG_NONFINITE_INPUT = 1u << 0, /* a row's inputs held NaN or Inf */
    SSM_FLAG_BAD_ACCEPTED = 1u << 1,    /* device-side accepted length outside [1, T]: row skipped */
    SSM_FLAG_BAD_SLOT = 1u << 2,        /* device-side slot outside the pool: row skipped */
    SSM_FLAG_PAGE_REFUSED = 1u << 3     /* a device page import refused this slot's batch:
                                           the slot is as it was (ssm_slots_import_pages_device) */
};

/* Size in bytes of one element of a dtype; 0 for an unknown value. */
static inline size_t ssm_dtype_size(ssm_dtype t)
{
    return t == SSM_DTYPE_F32 ? 4 : (t == SSM_DTYPE_BF16 || t == SSM_DTYPE_F16) ? 2 : 0;
}

/* D: conv channels, q, k and v concatenated. */
static inline int64_t ssm_conv_channels(const ssm_model_dims *m)
{
    return 2 * (int64_t)m->heads * m->key_dim + (int64_t)m->value_heads * m->value_dim;
}

/* Number of gate inputs per token: HV (GDN) or HV*K (KDA). */
static inline int64_t ssm_gate_width(const ssm_model_dims *m)
{
    return m->kind == SSM_MODEL_KDA ? (int64_t)m->value_heads * m->key_dim : m->value_heads;
}

#ifdef __cplusplus
}
#endif
#endif
