/* Stable names for the enums of types.h, used in messages and by tools. */
#include "core/internal.h"

const char *ssm_status_name(ssm_status status)
{
    switch (status) {
    case SSM_OK: return "SSM_OK";
    case SSM_ERR_INVALID_ARGUMENT: return "SSM_ERR_INVALID_ARGUMENT";
    case SSM_ERR_CONFIG: return "SSM_ERR_CONFIG";
    case SSM_ERR_PLUGIN: return "SSM_ERR_PLUGIN";
    case SSM_ERR_UNSUPPORTED: return "SSM_ERR_UNSUPPORTED";
    case SSM_ERR_OUT_OF_MEMORY: return "SSM_ERR_OUT_OF_MEMORY";
    case SSM_ERR_POOL_EXHAUSTED: return "SSM_ERR_POOL_EXHAUSTED";
    case SSM_ERR_SLOT_RANGE: return "SSM_ERR_SLOT_RANGE";
    case SSM_ERR_SLOT_NOT_ACQUIRED: return "SSM_ERR_SLOT_NOT_ACQUIRED";
    case SSM_ERR_VERIFY_PENDING: return "SSM_ERR_VERIFY_PENDING";
    case SSM_ERR_ACCEPTED_RANGE: return "SSM_ERR_ACCEPTED_RANGE";
    case SSM_ERR_TICKET_STALE: return "SSM_ERR_TICKET_STALE";
    case SSM_ERR_TICKET_FOREIGN: return "SSM_ERR_TICKET_FOREIGN";
    case SSM_ERR_TICKET_REPEATED: return "SSM_ERR_TICKET_REPEATED";
    case SSM_ERR_TICKET_INCOMPLETE: return "SSM_ERR_TICKET_INCOMPLETE";
    case SSM_ERR_PAGE_INVALID: return "SSM_ERR_PAGE_INVALID";
    case SSM_ERR_DEVICE: return "SSM_ERR_DEVICE";
    case SSM_ERR_INTERNAL: return "SSM_ERR_INTERNAL";
    }
    return "SSM_ERR_UNKNOWN";
}

const char *ssm_dtype_name(ssm_dtype dtype)
{
    switch (dtype) {
    case SSM_DTYPE_F32: return "f32";
    case SSM_DTYPE_BF16: return "bf16";
    case SSM_DTYPE_F16: return "f16";
    }
    return "unknown";
}

const char *ssm_model_kind_name(ssm_model_kind kind)
{
    switch (kind) {
    case SSM_MODEL_GDN: return "gdn";
    case SSM_MODEL_KDA: return "kda";
    }
    return "unknown";
}
