/* A one-line progress bar on stderr, e.g. "[#####.....] 12/40 requests",
 * redrawn in place with \r. It draws only on a terminal, so logs and pipes
 * never see it. */
#ifndef SSM_TOOLS_PROGRESS_H
#define SSM_TOOLS_PROGRESS_H

#include <stdint.h>

typedef struct progress {
    int enabled;
    int64_t total;
    int64_t shown; /* last value drawn, -1 before the first */
    const char *unit;
} progress;

/* Enables the bar when `wanted` and stderr is a terminal. */
void progress_begin(progress *p, int wanted, int64_t total, const char *unit);
/* Redraws when `done` changed since the last draw. */
void progress_update(progress *p, int64_t done);
/* Erases the bar, leaving the cursor at the start of an empty line. */
void progress_end(progress *p);

#endif
