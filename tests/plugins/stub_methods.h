/* The instance methods of the test modes that are never created (they only
 * load, check or plan): each answers SSM_ERR_UNSUPPORTED. */
#ifndef SSM_TESTS_PLUGINS_STUB_METHODS_H
#define SSM_TESTS_PLUGINS_STUB_METHODS_H

#include "ssmstate/plugin.h"

static void stub_destroy(void *instance)
{
    (void)instance;
}

static ssm_status stub_reset_slot(void *instance, int32_t slot, void *stream)
{
    (void)instance, (void)slot, (void)stream;
    return SSM_ERR_UNSUPPORTED;
}

static ssm_status stub_step(void *instance, const ssm_step_v1 *s)
{
    (void)instance, (void)s;
    return SSM_ERR_UNSUPPORTED;
}

static ssm_status stub_commit(void *instance, const ssm_commit_v1 *c)
{
    (void)instance, (void)c;
    return SSM_ERR_UNSUPPORTED;
}

/* The table entries of those methods. */
#define STUB_INSTANCE_METHODS                                                                     \
    .destroy = stub_destroy, .reset_slot = stub_reset_slot, .prefill = stub_step,                \
    .decode = stub_step, .verify = stub_step, .commit = stub_commit

#endif
