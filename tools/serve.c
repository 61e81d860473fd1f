/* The helpers serve.h declares for every part of `ssmstate serve`. */
#include <math.h>
#include <string.h>

#include "serve.h"

double serve_auto_rate(const serve_options *o, int32_t concurrency)
{
    const int32_t t = SERVE_DRAFTS + 1;
    const double shortest = 1.0 + ceil((double)o->workload.output_min / t);
    return 2.0 * concurrency / shortest;
}

const serve_point *serve_find_point(const serve_mode_result *m, int32_t concurrency)
{
    for (int32_t i = 0; m && i < m->points_count; i++)
        if (m->points[i].concurrency == concurrency)
            return &m->points[i];
    return NULL;
}

const serve_mode_result *serve_find_mode(const serve_table *t, const char *mode)
{
    for (int32_t i = 0; i < t->modes_count; i++)
        if (!strcmp(t->modes[i].mode, mode))
            return &t->modes[i];
    return NULL;
}

const serve_point *serve_max_point(const serve_mode_result *m)
{
    return m->points_count ? serve_find_point(m, m->max_concurrent) : NULL;
}
