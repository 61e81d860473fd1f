/* The serve plot (see serve_plot.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chart.h"
#include "png.h"
#include "serve_plot.h"

enum { PANEL_WIDTH = 640, PANEL_HEIGHT = 420, FIRST_SERIES_COLOR = 3 };

/* Paper, ink, grid (chart.h's indices 0-2), then a color per mode: native,
 * compact and replay first, as every table lists them. */
static const uint8_t palette[][3] = {
    {255, 255, 255}, {0, 0, 0},     {221, 221, 221}, {31, 119, 180},  {255, 127, 14},
    {44, 160, 44},   {214, 39, 40}, {148, 103, 189}, {140, 86, 75},   {227, 119, 194},
    {127, 127, 127}, {188, 189, 34}, {23, 190, 207},
};
enum { COLORS = sizeof palette / sizeof palette[0] };

/* The file name of a path, for titles. */
static const char *base_name(const char *path)
{
    const char *slash = strrchr(path, '/');
    return slash ? slash + 1 : path;
}

/* One table's chart into its panel at (left, top). */
static void draw_table(plot_canvas *c, const serve_table *t, int32_t left, int32_t top)
{
    chart_series series[SERVE_MAX_LIST];
    double xs[SERVE_MAX_LIST][SERVE_MAX_POINTS], ys[SERVE_MAX_LIST][SERVE_MAX_POINTS];
    char title[512];
    for (int32_t i = 0; i < t->modes_count; i++) {
        const serve_mode_result *m = &t->modes[i];
        for (int32_t k = 0; k < m->points_count; k++) {
            xs[i][k] = m->points[k].concurrency;
            ys[i][k] = m->points[k].tokens_per_second;
        }
        series[i] = (chart_series){m->mode, m->points_count, xs[i], ys[i],
                                   (uint8_t)(FIRST_SERIES_COLOR +
                                             i % (COLORS - FIRST_SERIES_COLOR))};
    }
    snprintf(title, sizeof title, "%s: %s x%d layers, %s state, %s", base_name(t->config_path),
             ssm_model_kind_name(t->model.kind), t->model.layers, ssm_dtype_name(t->state_dtype),
             t->device_name);
    const chart ch = {title, "concurrent requests (cap; log scale)", "output tokens/s", 1, series,
                      t->modes_count};
    chart_draw(c, left, top, PANEL_WIDTH, PANEL_HEIGHT, &ch);
}

int serve_plot_write(const char *path, const serve_table *tables, int32_t count, int32_t columns,
                     char *error, size_t len)
{
    columns = columns < 1 ? 1 : columns > count ? count : columns;
    const int32_t rows = (count + columns - 1) / columns;
    plot_canvas c;
    if (count < 1 || plot_canvas_create(&c, columns * PANEL_WIDTH, rows * PANEL_HEIGHT,
                                        CHART_PAPER) != 0) {
        snprintf(error, len, "%s: nothing to plot, or out of memory", path);
        return -1;
    }
    for (int32_t i = 0; i < count; i++)
        draw_table(&c, &tables[i], (i % columns) * PANEL_WIDTH, (i / columns) * PANEL_HEIGHT);
    const png_image image = {c.width, c.height, c.pixels, palette, COLORS};
    int status = png_write_file(path, &image, error, len);
    plot_canvas_destroy(&c);
    return status;
}
