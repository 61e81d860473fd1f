/* Logging to stderr; the level comes from $SSMSTATE_LOG (0 errors only,
 * 1 warnings (default), 2 info, 3 debug), read once. */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

#include "core/internal.h"

/* Atomic: threads log at once (a racing first read stores the same value). */
static int log_threshold(void)
{
    static _Atomic int threshold = -1;
    int t = atomic_load_explicit(&threshold, memory_order_relaxed);
    if (t < 0) {
        const char *env = getenv("SSMSTATE_LOG");
        t = (env && *env >= '0' && *env <= '9') ? atoi(env) : 1;
        atomic_store_explicit(&threshold, t, memory_order_relaxed);
    }
    return t;
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
