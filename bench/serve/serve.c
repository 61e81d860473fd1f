/* The helpers serve.h declares for every part of `ssmstate serve`. */
#include <math.h>
#include <signal.h>
#include <string.h>

#include "serve.h"

volatile sig_atomic_t serve_interrupted;

static void on_interrupt(int signal_number)
{
    (void)signal_number;
    serve_interrupted = 1; /* SA_RESETHAND: a second Ctrl-C ends the process */
}

void serve_catch_interrupt(void)
{
    struct sigaction action;
    memset(&action, 0, sizeof action);
    action.sa_handler = on_interrupt;
    action.sa_flags = SA_RESETHAND;
    sigemptyset(&action.sa_mask);
    sigaction(SIGINT, &action, NULL);
}

void serve_release_interrupt(void)
{
    struct sigaction action;
    memset(&action, 0, sizeof action);
    action.sa_handler = SIG_DFL;
    sigemptyset(&action.sa_mask);
    sigaction(SIGINT, &action, NULL);
}

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
