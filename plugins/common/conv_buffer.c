#include <string.h>

#include "plugins/common/conv_buffer.h"

static size_t row_bytes(const ssm_model_dims *m, ssm_dtype act)
{
    return (size_t)ssm_conv_channels(m) * ssm_dtype_size(act);
}

void *ssm_conv_buffer_stage(const ssm_model_dims *m, ssm_dtype act, void *buffer, const void *x,
                            int32_t tokens)
{
    char *tail = (char *)buffer + (size_t)(m->conv_width - 1) * row_bytes(m, act);
    memcpy(tail, x, (size_t)tokens * row_bytes(m, act));
    return tail;
}

void ssm_conv_buffer_commit(const ssm_model_dims *m, ssm_dtype act, void *buffer,
                            int32_t accepted)
{
    size_t row = row_bytes(m, act);
    memmove(buffer, (char *)buffer + (size_t)accepted * row, (size_t)(m->conv_width - 1) * row);
}
