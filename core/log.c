/* Logging to stderr; the level comes from $SSMSTATE_LOG (0 errors only,
 * 1 warnings (default), 2 info, 3 debug), read once. */
#include <stdio.h>
#include <stdlib.h>

#include "core/internal.h"

static int log_threshold(void)
{
    static int threshold = -1;
    if (threshold < 0) {
        const char *env = getenv("SSMSTATE_LOG");
        threshold = (env && *env >= '0' && *env <= '9') ? atoi(env) : 1;
    }
    return threshold;
}

void ssm_logv(int level, const char *fmt, va_list ap)
{
    static const char *const names[] = {"error", "warning", "info", "debug"};
    if (level > log_threshold())
        return;
    fprintf(stderr, "ssmstate %s: ", names[level < 0 ? 0 : level > 3 ? 3 : level]);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
}

void ssm_log(int level, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    ssm_logv(level, fmt, ap);
    va_end(ap);
}
