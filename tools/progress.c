/* Terminal progress bar (see progress.h). */
#include <stdio.h>
#include <unistd.h>

#include "progress.h"

enum { BAR_WIDTH = 30 };

void progress_begin(progress *p, int wanted, int64_t total, const char *unit)
{
    p->enabled = wanted && isatty(STDERR_FILENO);
    p->total = total > 0 ? total : 1;
    p->shown = -1;
    p->unit = unit;
    progress_update(p, 0);
}

void progress_update(progress *p, int64_t done)
{
    if (!p->enabled || done == p->shown)
        return;
    char bar[BAR_WIDTH + 1];
    int64_t filled = done * BAR_WIDTH / p->total;
    for (int i = 0; i < BAR_WIDTH; i++)
        bar[i] = i < filled ? '#' : '.';
    bar[BAR_WIDTH] = '\0';
    fprintf(stderr, "\r[%s] %lld/%lld %s", bar, (long long)done, (long long)p->total, p->unit);
    fflush(stderr);
    p->shown = done;
}

void progress_end(progress *p)
{
    if (!p->enabled)
        return;
    fputs("\r\033[K", stderr); /* carriage return, then erase to end of line */
    fflush(stderr);
    p->enabled = 0;
}
