/* `ssmstate run --dump DIR`: the session written as .npy files plus a
 * manifest.json describing them, enough to recompute every request from zero
 * state with an independent implementation (tests/recompute_dump.py).
 *
 * Every array is float32 ('<f4', C order). Activation- and state-dtype values
 * are widened exactly, so a reader sees the very numbers the library saw and
 * produced. */
#ifndef SSM_TOOLS_DUMP_H
#define SSM_TOOLS_DUMP_H

#include <stdint.h>

#include "ssmstate/ssmstate.h"
#include "workload.h"

/* Writes a float32 array as an NPY v1.0 file. Returns 0, or -1 with errno. */
int npy_write_f32(const char *path, const int64_t *shape, int ndim, const float *data);

typedef struct dump dump;

/* Creates dir (and missing parents) and starts its manifest with the model
 * and dtypes of `config` and the session's workload `w`. Returns
 * CLI_EXIT_OK or an exit code after printing the error. */
int dump_open(const char *dir, const ssm_config *config, const workload *w, dump **out);

/* One layer's weights (conv_bias may be NULL: recorded as absent). */
int dump_layer_weights(dump *d, int32_t layer, const ssm_layer_weights *w);

/* A finished request: its history, then dump_request_layer() for every layer
 * in order, then dump_request_end(). */
typedef struct dump_request_info {
    int32_t id;
    int32_t slot;             /* the slot it held, for the curious */
    int32_t prompt_tokens;
    int32_t committed_tokens; /* prompt + accepted decode tokens */
    int32_t rounds;           /* decode or verify rounds */
    const int32_t *accepted;  /* [rounds] accepted length of each round */
} dump_request_info;
int dump_request_begin(dump *d, const dump_request_info *info);

/* The committed tokens of one request in one layer, in order, as float32:
 * x [n][D], gate [n][HV] or [n][HV][K], beta [n][HV], the library's outputs
 * out [n][HV][V], and the slot's final state [HV][V][K] and conv window
 * [W-1][D] from ssm_slot_export_canonical(). */
typedef struct dump_layer_arrays {
    int32_t layer;
    int64_t tokens;
    const float *x, *gate, *beta, *out, *state, *conv_window;
} dump_layer_arrays;
int dump_request_layer(dump *d, const dump_layer_arrays *a);
int dump_request_end(dump *d);

/* Ends the manifest (`"complete": true` only when `complete`) and frees d.
 * Returns CLI_EXIT_OK or an exit code after printing the error. NULL is fine. */
int dump_close(dump *d, int complete);

#endif
