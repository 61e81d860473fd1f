/* A line chart drawn on a plot canvas (plot.h): axes with ticks and tick
 * labels, axis labels, a title, one line with point markers per series and a
 * legend. Used by `ssmstate serve --plot` (serve_plot.c). */
#ifndef SSM_TOOLS_CHART_H
#define SSM_TOOLS_CHART_H

#include <stdint.h>

#include "plot.h"

/* Palette indices the chart draws its frame with; series bring their own. */
enum { CHART_PAPER = 0, CHART_INK = 1, CHART_GRID = 2 };

typedef struct chart_series {
    const char *name;   /* in the legend */
    int32_t count;      /* points; 0 draws nothing but the legend entry */
    const double *x, *y;/* [count], x increasing */
    uint8_t color;
} chart_series;

typedef struct chart {
    const char *title;
    const char *x_label, *y_label;
    int x_log2;         /* 1: x on a log2 axis (x > 0), ticks at powers of two */
    const chart_series *series;
    int32_t series_count;
} chart;

/* Draws the chart into the rectangle (left, top, width, height) of c: y from
 * 0 to a round number above the largest y, x over the points' range. */
void chart_draw(plot_canvas *c, int32_t left, int32_t top, int32_t width, int32_t height,
                const chart *ch);

/* A tick label: integers as they are up to 99999, larger numbers with k or M
 * and up to three significant digits ("250k", "1.2M"), others with %.3g. */
void chart_format_number(double value, char *buf, int len);

/* A round step (1, 2 or 5 times a power of ten) that cuts [0, top] into about
 * `ticks` intervals. */
double chart_nice_step(double top, int32_t ticks);

#endif
