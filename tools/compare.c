/* Mode against mode (see compare.h). The baseline keeps one forward's items
 * in the order they came, in one growing byte buffer; another mode's item is
 * found by its key (request, layer, kind), unique within a forward. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/reference.h"
#include "compare.h"

typedef enum item_kind { ITEM_OUTPUT, ITEM_FINAL_STATE } item_kind;

typedef struct item {
    item_kind kind;
    int32_t request, layer;
    int64_t elements; /* ITEM_OUTPUT: outputs in the block */
    size_t offset;    /* into bytes */
} item;

struct compare_baseline {
    ssm_model_dims model;
    ssm_dtype state_dtype, act;
    bound output_bound, state_bound;
    size_t window_bytes, state_bytes; /* one layer's final state: window, then state */
    item *items;
    size_t count, capacity;
    unsigned char *bytes;
    size_t used, reserved;
    int failed; /* an allocation failed: the comparison is incomplete */
};

int compare_baseline_create(const ssm_model_dims *m, ssm_dtype state_dtype, ssm_dtype act,
                            bound_relation relation, compare_baseline **out)
{
    compare_baseline *b = calloc(1, sizeof *b);
    if (!b)
        return -1;
    b->model = *m;
    b->state_dtype = state_dtype;
    b->act = act;
    b->output_bound = bound_for_outputs(relation, state_dtype, act);
    b->state_bound = bound_for_states(relation, state_dtype);
    b->window_bytes = (size_t)ssm_ref_window_elems(m) * ssm_dtype_size(act);
    b->state_bytes = (size_t)ssm_ref_state_elems(m) * ssm_dtype_size(state_dtype);
    *out = b;
    return 0;
}

void compare_baseline_destroy(compare_baseline *b)
{
    if (!b)
        return;
    free(b->items);
    free(b->bytes);
    free(b);
}

int compare_baseline_ok(const compare_baseline *b)
{
    return !b->failed;
}

void compare_next_forward(compare_baseline *b)
{
    b->count = 0;
    b->used = 0;
}

/* Appends an item with room for `size` bytes; NULL (and b->failed) when out
 * of memory. Buffers grow by doubling, so a session settles after a few
 * forwards. */
static unsigned char *append(compare_baseline *b, item key, size_t size)
{
    if (b->count == b->capacity) {
        size_t capacity = b->capacity ? 2 * b->capacity : 64;
        item *items = realloc(b->items, capacity * sizeof *items);
        if (!items) {
            b->failed = 1;
            return NULL;
        }
        b->items = items;
        b->capacity = capacity;
    }
    if (b->used + size > b->reserved) {
        size_t reserved = b->reserved ? b->reserved : 1 << 16;
        while (reserved < b->used + size)
            reserved *= 2;
        unsigned char *bytes = realloc(b->bytes, reserved);
        if (!bytes) {
            b->failed = 1;
            return NULL;
        }
        b->bytes = bytes;
        b->reserved = reserved;
    }
    key.offset = b->used;
    b->items[b->count++] = key;
    b->used += size;
    return b->bytes + key.offset;
}

static int64_t block_elements(const compare_baseline *b, const session_block *block)
{
    return (int64_t)block->tokens * b->model.value_heads * b->model.value_dim;
}

void compare_keep_output(compare_baseline *b, const session_block *block)
{
    const int64_t n = block_elements(b, block);
    const size_t size = (size_t)n * ssm_dtype_size(b->act);
    unsigned char *dst = append(b, (item){ITEM_OUTPUT, block->request, block->layer, n, 0}, size);
    if (dst)
        memcpy(dst, block->out, size);
}

void compare_keep_final_state(compare_baseline *b, int32_t request, int32_t layer,
                              const void *window, const void *state)
{
    unsigned char *dst = append(b, (item){ITEM_FINAL_STATE, request, layer, 0, 0},
                                b->window_bytes + b->state_bytes);
    if (!dst)
        return;
    memcpy(dst, window, b->window_bytes);
    memcpy(dst + b->window_bytes, state, b->state_bytes);
}

static const item *find(const compare_baseline *b, item_kind kind, int32_t request, int32_t layer)
{
    for (size_t i = 0; i < b->count; i++)
        if (b->items[i].kind == kind && b->items[i].request == request &&
            b->items[i].layer == layer)
            return &b->items[i];
    return NULL;
}

void compare_difference_init(compare_difference *d)
{
    memset(d, 0, sizeof *d);
    d->outputs_identical = d->outputs_within_bound = 1;
    d->states_identical = d->windows_identical = d->states_within_bound = 1;
}

void compare_output(const compare_baseline *b, compare_difference *d, const session_block *block)
{
    const item *kept = find(b, ITEM_OUTPUT, block->request, block->layer);
    const int64_t n = block_elements(b, block);
    if (!kept || kept->elements != n) {
        d->unmatched++;
        return;
    }
    const unsigned char *ref = b->bytes + kept->offset;
    bound_result r = bound_add(&d->outputs, block->out, ref, b->act, n);
    d->blocks++;
    if (memcmp(block->out, ref, (size_t)n * ssm_dtype_size(b->act)) != 0)
        d->outputs_identical = 0;
    if (!r.pass) { /* a non-finite value: NaN never passes */
        d->outputs_within_bound = 0;
        d->max_output_rel_rms = NAN;
    }
    if (r.max_ulps > d->max_output_ulps)
        d->max_output_ulps = r.max_ulps;
}

void compare_final_state(const compare_baseline *b, compare_difference *d, int32_t request,
                         int32_t layer, const void *window, const void *state)
{
    const item *kept = find(b, ITEM_FINAL_STATE, request, layer);
    if (!kept) {
        d->unmatched++;
        return;
    }
    const unsigned char *ref_window = b->bytes + kept->offset;
    const unsigned char *ref_state = ref_window + b->window_bytes;
    bound_result r = bound_compare(state, ref_state, b->state_dtype,
                                   ssm_ref_state_elems(&b->model), b->state_bound);
    d->states++;
    if (memcmp(window, ref_window, b->window_bytes) != 0)
        d->windows_identical = 0;
    if (memcmp(state, ref_state, b->state_bytes) != 0)
        d->states_identical = 0;
    if (!r.pass)
        d->states_within_bound = 0;
    bound_track_max(&d->max_state_rel_rms, r.rel_rms);
}

void compare_outputs_finish(const compare_baseline *b, compare_difference *d)
{
    if (!bound_total_pass(b->output_bound, &d->outputs))
        d->outputs_within_bound = 0;
    bound_track_max(&d->max_output_rel_rms, bound_total_rel_rms(&d->outputs));
}
