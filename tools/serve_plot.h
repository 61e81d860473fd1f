/* --plot FILE.png of `ssmstate serve`: one chart per (config, state dtype),
 * tokens/s against concurrency, one line per mode, in a grid (a row per
 * config, a column per state dtype), written with png.h. */
#ifndef SSM_TOOLS_SERVE_PLOT_H
#define SSM_TOOLS_SERVE_PLOT_H

#include <stddef.h>
#include <stdint.h>

#include "serve.h"

/* Draws tables[0 .. count) (`columns` charts a row) and writes the PNG.
 * Returns 0, or -1 with the reason in error. */
int serve_plot_write(const char *path, const serve_table *tables, int32_t count, int32_t columns,
                     char *error, size_t len);

#endif
