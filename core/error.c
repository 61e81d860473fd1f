/* The thread-local last error: every failing call leaves its message here. */
#include <stdio.h>
#include <string.h>

#include "core/internal.h"

static _Thread_local char last_error[1024];

/* Formats into a buffer of its own first: an argument may be the last
 * error itself ("...: %s", ssm_last_error()), which vsnprintf must not
 * read while it writes there. */
ssm_status ssm_error_setv(ssm_status code, const char *fmt, va_list ap)
{
    char message[sizeof last_error];
    vsnprintf(message, sizeof message, fmt, ap);
    memcpy(last_error, message, sizeof message);
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
