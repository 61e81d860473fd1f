/* The device half of every built-in mode's check_config: what a config
 * with device = cuda needs from this build and from the CUDA kernels
 * (kernels/cuda/), in plain C so each plugin's check runs without CUDA. */
#ifndef SSM_COMMON_DEVICE_CHECK_H
#define SSM_COMMON_DEVICE_CHECK_H

#include <stddef.h>

#include "ssmstate/plugin.h"

/* Why the CUDA kernels cannot run params (a shape or dtype they do not
 * take), or NULL. Independent of the build. */
const char *ssm_gpu_unsupported(const ssm_mode_params_v2 *params);

/* SSM_OK on the CPU, and on CUDA when this build has the kernels and they
 * take params; else SSM_ERR_UNSUPPORTED with a one-line reason in why. */
ssm_status ssm_check_device(const ssm_mode_params_v2 *params, char *why, size_t why_len);

#endif
