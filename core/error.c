/* The thread-local last error: every failing call leaves its message here. */
#include <stdio.h>

#include "core/internal.h"

static _Thread_local char last_error[1024];

ssm_status ssm_error_setv(ssm_status code, const char *fmt, va_list ap)
{
    vsnprintf(last_error, sizeof last_error, fmt, ap);
    return code;
}

ssm_status ssm_error_set(ssm_status code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    ssm_error_setv(code, fmt, ap);
    va_end(ap);
    return code;
}

const char *ssm_last_error(void)
{
    return last_error;
}
