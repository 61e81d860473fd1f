/* The data every context of one model reads in `ssmstate serve`: the weights
 * of every layer (tools/synth.h statistics) and a pool of synthetic token
 * inputs (x, gate, beta in the activation dtype), made on the host from the
 * seed and copied to the device once. A batch of n tokens reads n
 * consecutive pool tokens from an offset that depends on the step, the
 * layer and the batch kind (serve_pool_offset), so consecutive steps and
 * layers see different inputs and any call can be rebuilt on the host. */
#ifndef SSM_TOOLS_SERVE_DATA_H
#define SSM_TOOLS_SERVE_DATA_H

#include <stdint.h>

#include "ssmstate/ssmstate.h"
#include "tools/device.h"
#include "tools/synth.h"

typedef struct serve_data {
    ssm_model_dims model;
    ssm_dtype act;
    int64_t pool_tokens;
    synth_weights host_weights;        /* host, every layer */
    ssm_layer_weights *weights;        /* [layers] of device pointers (host ones on the CPU) */
    float *weight_storage;             /* device copy of host_weights.storage; NULL on the CPU */
    void *host_x, *host_gate, *host_beta; /* [pool_tokens][...] */
    void *x, *gate, *beta;             /* the device's (the host's on the CPU) */
} serve_data;

/* Makes the weights and a pool of `pool_tokens` tokens from `seed`. Returns
 * 0, or -1 with a message and nothing allocated. */
int serve_data_create(const cli_device *d, const ssm_model_dims *m, ssm_dtype act,
                      uint64_t seed, int64_t pool_tokens, serve_data *out, char *error,
                      size_t len);
void serve_data_destroy(const cli_device *d, serve_data *data);

/* The first pool token of a batch of `need` tokens (need <= pool_tokens) in
 * step `step`, layer `layer`, kind `kind` (0 prefill, 1 verify): a multiple
 * of 8 chosen by a hash of the three, so that the batch fits in the pool. */
int64_t serve_pool_offset(int64_t step, int32_t layer, int32_t kind, int64_t need,
                          int64_t pool_tokens);

/* x, gate and beta from pool token `first` on (device pointers when `host`
 * is 0, host ones otherwise), with `out` as the output. */
ssm_step_io serve_pool_io(const serve_data *data, int64_t first, void *out, int host);

#endif
