#include <stdio.h>

#include "config.h"
#include "plugins/common/device_check.h"

const char *ssm_gpu_unsupported(const ssm_mode_params_v2 *p)
{
    int32_t K = p->model.key_dim;
    if (K != 32 && K != 64 && K != 128)
        return "the CUDA kernels take key_dim 32, 64 or 128";
    if (p->model.value_dim % 4 != 0)
        return "the CUDA kernels take a value_dim that is a multiple of 4";
    if (p->state_dtype == SSM_DTYPE_F16 || p->activation_dtype == SSM_DTYPE_F16)
        return "the CUDA kernels take f32 and bf16 only";
    return NULL;
}

ssm_status ssm_check_device(const ssm_mode_params_v2 *p, char *why, size_t why_len)
{
    if (p->device.type != SSM_DEVICE_CUDA)
        return SSM_OK;
#ifdef HAVE_CUDA
    const char *reason = ssm_gpu_unsupported(p);
    if (!reason)
        return SSM_OK;
    snprintf(why, why_len, "device = cuda: %s", reason);
#else
    snprintf(why, why_len, "this build has no CUDA kernels");
#endif
    return SSM_ERR_UNSUPPORTED;
}
