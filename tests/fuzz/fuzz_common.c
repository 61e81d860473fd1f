/* The harnesses' shared helpers (fuzz_common.h). */
#include <stdio.h>
#include <stdlib.h>

#include "tests/fuzz/fuzz_common.h"

uint8_t fuzz_u8(fuzz_in *in)
{
    if (in->n == 0)
        return 0;
    in->n--;
    return *in->p++;
}

uint32_t fuzz_u32(fuzz_in *in)
{
    uint32_t v = 0;
    for (int i = 0; i < 4; i++)
        v |= (uint32_t)fuzz_u8(in) << (8 * i);
    return v;
}

void fuzz_fail(const char *file, int line, const char *what)
{
    fprintf(stderr, "%s:%d: invariant failed: %s\n  last error: %s\n", file, line, what,
            ssm_last_error());
    abort();
}

ssm_ctx *fuzz_ctx(const ssm_model_dims *m, const char *mode, ssm_dtype state, ssm_dtype act,
                  int32_t capacity, int32_t drafts, const ssm_head_slice *head_slice)
{
    ssm_config c;
    ssm_config_defaults(&c);
    c.model = *m;
    c.mode = mode;
    c.state_dtype = state;
    c.activation_dtype = act;
    c.max_requests = capacity;
    c.max_draft_tokens = drafts;
    if (head_slice)
        c.head_slice = *head_slice;
    ssm_ctx *ctx = NULL;
    if (ssm_ctx_create(&c, &ctx) != SSM_OK) {
        fprintf(stderr, "fuzz setup: cannot create a '%s' context (is SSMSTATE_PLUGIN_PATH set "
                        "to the built plugins?): %s\n",
                mode, ssm_last_error());
        abort();
    }
    return ctx;
}

const char *const fuzz_modes[3] = {"native", "compact", "replay"};

void fuzz_pin_plugins(void)
{
    static ssm_ctx *pinned[3];
    if (pinned[0])
        return;
    ssm_model_dims m = {SSM_MODEL_GDN, 1, 1, 1, 4, 4, 2, 0, 0.0f};
    for (int i = 0; i < 3; i++)
        pinned[i] = fuzz_ctx(&m, fuzz_modes[i], SSM_DTYPE_F32, SSM_DTYPE_F32, 1, 1, NULL);
}
