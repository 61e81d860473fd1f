/* Capability bits that depend on how this tree was configured: a plugin
 * offers SSM_CAP_CUDA only when its CUDA path was compiled in. */
#ifndef SSM_COMMON_BUILD_CAPS_H
#define SSM_COMMON_BUILD_CAPS_H

#include "config.h"
#include "ssmstate/plugin.h"

#ifdef HAVE_CUDA
#define SSM_CAP_CUDA_IF_BUILT SSM_CAP_CUDA
#else
#define SSM_CAP_CUDA_IF_BUILT 0
#endif

#endif
