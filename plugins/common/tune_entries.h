/* The tune_* entries of a built-in mode's table (plugin_v1.h;
 * docs/tuning.md), written once: on a CUDA context they call the mode's
 * <prefix>_cuda_tune_* functions (plugins/common/cuda/tune.cuh underneath); on a
 * CPU context, or in a build without CUDA, there is nothing to tune
 * (tune_space lists no family, the others answer SSM_ERR_UNSUPPORTED, which
 * the core never provokes, and tune_apply accepts only an empty list). */
#ifndef SSM_COMMON_TUNE_ENTRIES_H
#define SSM_COMMON_TUNE_ENTRIES_H

#include "config.h"
#include "ssmstate/plugin.h"

#define SSM_TUNE_CPU_BODY_(services)                                                          \
    return (services)->error((services)->core, SSM_ERR_UNSUPPORTED,                         \
                             "nothing to tune on a CPU context")

#ifdef HAVE_CUDA
#define SSM_TUNE_IF_GPU_(mode, call) \
    if (mode##_on_gpu(m))            \
        return call;
#define SSM_TUNE_IF_GPU_VOID_(mode, call) \
    if (mode##_on_gpu(m)) {               \
        call;                             \
        return;                           \
    }
#else
#define SSM_TUNE_IF_GPU_(mode, call)
#define SSM_TUNE_IF_GPU_VOID_(mode, call)
#endif

/* Defines static <mode>_tune_space, _tune_begin, _tune_run, _tune_end and
 * _tune_apply for the instance type `type` (starting with an ssm_mode_base),
 * `mode##_on_gpu` and `mode##_cuda_tune_*`. */
#define SSM_TUNE_ENTRIES(mode, type)                                                          \
    static ssm_status mode##_tune_space(void *instance, const ssm_tune_family_v1 **families,  \
                                        int32_t *count)                                       \
    {                                                                                         \
        type *m = instance;                                                                   \
        SSM_TUNE_IF_GPU_(mode, mode##_cuda_tune_space(m, families, count))                    \
        (void)m;                                                                              \
        *families = NULL;                                                                     \
        *count = 0;                                                                           \
        return SSM_OK;                                                                        \
    }                                                                                         \
    static ssm_status mode##_tune_begin(void *instance, int32_t max_rows, void *stream)       \
    {                                                                                         \
        type *m = instance;                                                                   \
        SSM_TUNE_IF_GPU_(mode, mode##_cuda_tune_begin(m, max_rows, stream))                   \
        SSM_TUNE_CPU_BODY_(m->base.services);                                                \
    }                                                                                         \
    static ssm_status mode##_tune_run(void *instance, ssm_tune_trial_v1 *trial)               \
    {                                                                                         \
        type *m = instance;                                                                   \
        SSM_TUNE_IF_GPU_(mode, mode##_cuda_tune_run(m, trial))                                \
        SSM_TUNE_CPU_BODY_(m->base.services);                                                \
    }                                                                                         \
    static void mode##_tune_end(void *instance)                                               \
    {                                                                                         \
        type *m = instance;                                                                   \
        SSM_TUNE_IF_GPU_VOID_(mode, mode##_cuda_tune_end(m))                                  \
        (void)m;                                                                              \
    }                                                                                         \
    static ssm_status mode##_tune_apply(void *instance, const ssm_tune_choice_v1 *choices,    \
                                        int32_t count)                                        \
    {                                                                                         \
        type *m = instance;                                                                   \
        SSM_TUNE_IF_GPU_(mode, mode##_cuda_tune_apply(m, choices, count))                     \
        (void)choices;                                                                        \
        if (count == 0)                                                                       \
            return SSM_OK;                                                                    \
        SSM_TUNE_CPU_BODY_(m->base.services);                                                \
    }

/* Declares the mode's <mode>_cuda_tune_* functions (defined in its .cu by
 * SSM_TUNE_CUDA_ENTRIES of plugins/common/cuda/tune.cuh) for the instance type
 * `type`. */
#define SSM_TUNE_CUDA_DECLS(mode, type)                                                       \
    ssm_status mode##_cuda_tune_space(type *m, const ssm_tune_family_v1 **families,           \
                                      int32_t *count);                                        \
    ssm_status mode##_cuda_tune_begin(type *m, int32_t max_rows, void *stream);               \
    ssm_status mode##_cuda_tune_run(type *m, ssm_tune_trial_v1 *trial);                       \
    void mode##_cuda_tune_end(type *m);                                                       \
    ssm_status mode##_cuda_tune_apply(type *m, const ssm_tune_choice_v1 *choices, int32_t count)

/* The table's initializers for those entries. */
#define SSM_TUNE_TABLE(mode)                                                                  \
    .tune_space = mode##_tune_space, .tune_begin = mode##_tune_begin,                         \
    .tune_run = mode##_tune_run, .tune_end = mode##_tune_end, .tune_apply = mode##_tune_apply

#endif
