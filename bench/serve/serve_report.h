/* The output of `ssmstate serve`: a table per (config, state dtype) with the
 * sweep under it and the ratios the serving targets ask about, and the JSON
 * document of --json (docs/serve.md, "Output"). */
#ifndef SSM_TOOLS_SERVE_REPORT_H
#define SSM_TOOLS_SERVE_REPORT_H

#include <stdio.h>

#include "serve.h"

/* The ratios of a table; NaN where a mode or level is missing. */
typedef struct serve_ratios {
    double replay_concurrent;  /* replay's max concurrent / native's */
    double compact_concurrent; /* compact's max concurrent / native's */
    int32_t native_max;        /* native's max concurrent (0: no native) */
    double replay_speed;       /* replay tokens/s / native's, at native_max */
    double compact_speed;      /* compact tokens/s / native's, at native_max */
    double native_rows;        /* MTP rows a step at native_max (NaN: not measured) */
} serve_ratios;

serve_ratios serve_report_ratios(const serve_table *t);

/* Prints one table to stdout. */
void serve_report_print(const serve_table *t, const serve_options *o);

/* 1 when every mode of the table ran and passed its check (or no check was
 * asked) and raised no status flag. */
int serve_report_passed(const serve_table *t);

/* Writes the whole run as one JSON document. Returns 0, or -1 when the
 * write failed. */
int serve_report_json(FILE *out, const serve_table *tables, int32_t count,
                      const serve_options *o);

#endif
