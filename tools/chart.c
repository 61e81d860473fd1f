/* The line chart (see chart.h). */
#include <math.h>
#include <stdio.h>

#include "chart.h"

enum {
    TITLE_SCALE = 2, TEXT_SCALE = 1, MARKER = 2, LINE = 2,
    TICK = 4, PAD = 8, MAX_X_TICKS = 12
};

void chart_format_number(double value, char *buf, int len)
{
    double magnitude = fabs(value);
    if (magnitude >= 1e6)
        snprintf(buf, (size_t)len, "%.3gM", value / 1e6);
    else if (magnitude >= 1e5)
        snprintf(buf, (size_t)len, "%.3gk", value / 1e3);
    else if (value == floor(value))
        snprintf(buf, (size_t)len, "%.0f", value);
    else
        snprintf(buf, (size_t)len, "%.3g", value);
}

double chart_nice_step(double top, int32_t ticks)
{
    double raw = top / (ticks > 0 ? ticks : 1);
    double power = pow(10.0, floor(log10(raw)));
    double unit = raw / power;
    return (unit <= 1.0 ? 1.0 : unit <= 2.0 ? 2.0 : unit <= 5.0 ? 5.0 : 10.0) * power;
}

/* The data range: x over the points (log2 when asked), y from 0 up. */
typedef struct axes {
    double x0, x1, y1;  /* x in axis units (log2 x when x_log2) */
    double y_step;
    int32_t left, top, right, bottom; /* the plot area in pixels */
} axes;

/* x in axis units. */
static double axis_x(const chart *ch, double x)
{
    return ch->x_log2 ? log2(x) : x;
}

/* Fills the axes' data range and y step from the series. */
static void data_range(const chart *ch, axes *a)
{
    double x0 = INFINITY, x1 = -INFINITY, y1 = 0.0;
    for (int32_t s = 0; s < ch->series_count; s++)
        for (int32_t i = 0; i < ch->series[s].count; i++) {
            double x = ch->series[s].x[i], y = ch->series[s].y[i];
            if ((ch->x_log2 && !(x > 0)) || !isfinite(x) || !isfinite(y))
                continue;
            x0 = fmin(x0, axis_x(ch, x));
            x1 = fmax(x1, axis_x(ch, x));
            y1 = fmax(y1, y);
        }
    if (!(x0 <= x1)) /* no point at all */
        x0 = 0.0, x1 = 1.0;
    if (ch->x_log2) {
        x0 = floor(x0);
        x1 = ceil(x1);
    }
    if (x1 - x0 < 1e-9)
        x0 -= 0.5, x1 += 0.5;
    if (!(y1 > 0))
        y1 = 1.0;
    a->y_step = chart_nice_step(y1 * 1.05, 5);
    a->y1 = ceil(y1 * 1.05 / a->y_step) * a->y_step;
    a->x0 = x0;
    a->x1 = x1;
}

/* Pixel column of an axis-unit x. */
static int32_t px(const axes *a, double ax)
{
    return a->left + (int32_t)lround((ax - a->x0) / (a->x1 - a->x0) * (a->right - a->left));
}

/* Pixel row of a y. */
static int32_t py(const axes *a, double y)
{
    return a->bottom - (int32_t)lround(y / a->y1 * (a->bottom - a->top));
}

/* y ticks, their labels and horizontal grid lines. */
static void draw_y_axis(plot_canvas *c, const axes *a)
{
    char label[32];
    const int32_t h = plot_text_height(TEXT_SCALE);
    for (int32_t i = 0; i * a->y_step <= a->y1 * (1 + 1e-9); i++) {
        double y = i * a->y_step;
        int32_t at = py(a, y);
        if (i > 0)
            plot_line(c, a->left + 1, at, a->right, at, CHART_GRID, 1);
        plot_line(c, a->left - TICK, at, a->left, at, CHART_INK, 1);
        chart_format_number(y, label, sizeof label);
        plot_text(c, a->left - TICK - 3 - plot_text_width(label, TEXT_SCALE), at - h / 2, label,
                  CHART_INK, TEXT_SCALE);
    }
}

/* x ticks, their labels and vertical grid lines. */
static void draw_x_axis(plot_canvas *c, const chart *ch, const axes *a)
{
    char label[32];
    double step = ch->x_log2 ? 1.0 : chart_nice_step(a->x1 - a->x0, 6);
    while ((a->x1 - a->x0) / step > MAX_X_TICKS)
        step *= 2.0;
    for (double t = ceil(a->x0 / step - 1e-9) * step; t <= a->x1 + 1e-9; t += step) {
        int32_t at = px(a, t);
        plot_line(c, at, a->top, at, a->bottom - 1, CHART_GRID, 1);
        plot_line(c, at, a->bottom, at, a->bottom + TICK, CHART_INK, 1);
        chart_format_number(ch->x_log2 ? exp2(t) : t, label, sizeof label);
        plot_text(c, at - plot_text_width(label, TEXT_SCALE) / 2, a->bottom + TICK + 3, label,
                  CHART_INK, TEXT_SCALE);
    }
}

/* One series: lines between consecutive finite points, a marker on each. */
static void draw_series(plot_canvas *c, const chart *ch, const axes *a, const chart_series *s)
{
    int have_last = 0;
    int32_t last_x = 0, last_y = 0;
    for (int32_t i = 0; i < s->count; i++) {
        if ((ch->x_log2 && !(s->x[i] > 0)) || !isfinite(s->x[i]) || !isfinite(s->y[i])) {
            have_last = 0;
            continue;
        }
        int32_t x = px(a, axis_x(ch, s->x[i])), y = py(a, s->y[i]);
        if (have_last)
            plot_line(c, last_x, last_y, x, y, s->color, LINE);
        plot_fill(c, x - MARKER, y - MARKER, x + MARKER, y + MARKER, s->color);
        last_x = x, last_y = y, have_last = 1;
    }
}

enum { SWATCH = 18 };

/* Pixels the legend box spans across. */
static int32_t legend_width(const chart *ch)
{
    int32_t widest = 0;
    for (int32_t s = 0; s < ch->series_count; s++) {
        int32_t w = plot_text_width(ch->series[s].name, TEXT_SCALE);
        widest = w > widest ? w : widest;
    }
    return 6 + SWATCH + 6 + widest + 6;
}

/* The legend, right of the plot area, at its top. */
static void draw_legend(plot_canvas *c, const chart *ch, const axes *a)
{
    const int32_t h = plot_text_height(TEXT_SCALE), line = h + 6, swatch = SWATCH;
    int32_t x = a->right + 2 * PAD, y = a->top;
    int32_t w = legend_width(ch), hh = 4 + line * ch->series_count;
    plot_fill(c, x, y, x + w, y + hh, CHART_PAPER);
    plot_line(c, x, y, x + w, y, CHART_INK, 1);
    plot_line(c, x, y + hh, x + w, y + hh, CHART_INK, 1);
    plot_line(c, x, y, x, y + hh, CHART_INK, 1);
    plot_line(c, x + w, y, x + w, y + hh, CHART_INK, 1);
    for (int32_t s = 0; s < ch->series_count; s++) {
        int32_t row = y + 4 + s * line, mid = row + h / 2;
        plot_line(c, x + 6, mid, x + 6 + swatch, mid, ch->series[s].color, LINE);
        plot_fill(c, x + 6 + swatch / 2 - MARKER, mid - MARKER, x + 6 + swatch / 2 + MARKER,
                  mid + MARKER, ch->series[s].color);
        plot_text(c, x + 6 + swatch + 6, row, ch->series[s].name, CHART_INK, TEXT_SCALE);
    }
}

void chart_draw(plot_canvas *c, int32_t left, int32_t top, int32_t width, int32_t height,
                const chart *ch)
{
    const int32_t text = plot_text_height(TEXT_SCALE), title = plot_text_height(TITLE_SCALE);
    axes a;
    data_range(ch, &a);
    a.left = left + PAD + text + PAD + 6 * 6 + TICK + 4; /* y label, tick labels */
    a.top = top + PAD + title + PAD;
    a.right = left + width - 1 - 3 * PAD - legend_width(ch);
    a.bottom = top + height - 1 - (PAD + text + PAD + text + TICK + 3);

    const int32_t title_scale =
        plot_text_width(ch->title, TITLE_SCALE) <= width - 2 * PAD ? TITLE_SCALE : TEXT_SCALE;
    plot_text(c, left + (width - plot_text_width(ch->title, title_scale)) / 2, top + PAD,
              ch->title, CHART_INK, title_scale);
    draw_y_axis(c, &a);
    draw_x_axis(c, ch, &a);
    plot_line(c, a.left, a.top, a.left, a.bottom, CHART_INK, 1);
    plot_line(c, a.left, a.bottom, a.right, a.bottom, CHART_INK, 1);
    plot_text(c, (a.left + a.right - plot_text_width(ch->x_label, TEXT_SCALE)) / 2,
              top + height - 1 - PAD - text, ch->x_label, CHART_INK, TEXT_SCALE);
    plot_text_up(c, left + PAD, (a.top + a.bottom - plot_text_width(ch->y_label, TEXT_SCALE)) / 2,
                 ch->y_label, CHART_INK, TEXT_SCALE);
    for (int32_t s = 0; s < ch->series_count; s++)
        draw_series(c, ch, &a, &ch->series[s]);
    draw_legend(c, ch, &a);
}
