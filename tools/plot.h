/* A tiny rasterizer for the plots of `ssmstate serve`: a canvas of palette
 * indices (written out by png.h), filled rectangles, thick lines and text in
 * the built-in 5 x 7 font (font5x7.h). Everything is clipped to the canvas. */
#ifndef SSM_TOOLS_PLOT_H
#define SSM_TOOLS_PLOT_H

#include <stdint.h>

typedef struct plot_canvas {
    int32_t width, height;
    uint8_t *pixels; /* [height][width] palette indices */
} plot_canvas;

/* A width x height canvas filled with `background`. Returns 0, or -1 when
 * out of memory (nothing allocated). */
int plot_canvas_create(plot_canvas *c, int32_t width, int32_t height, uint8_t background);
void plot_canvas_destroy(plot_canvas *c);

/* One pixel; outside the canvas, nothing. */
void plot_pixel(plot_canvas *c, int32_t x, int32_t y, uint8_t color);

/* The rectangle [x0, x1] x [y0, y1] (inclusive, any corner order). */
void plot_fill(plot_canvas *c, int32_t x0, int32_t y0, int32_t x1, int32_t y1, uint8_t color);

/* A line from (x0, y0) to (x1, y1), `thickness` pixels wide (a square pen
 * moved along Bresenham's line). */
void plot_line(plot_canvas *c, int32_t x0, int32_t y0, int32_t x1, int32_t y1, uint8_t color,
               int32_t thickness);

/* Text with its top-left corner at (x, y), each font pixel a scale x scale
 * square. */
void plot_text(plot_canvas *c, int32_t x, int32_t y, const char *text, uint8_t color,
               int32_t scale);

/* The same, turned 90 degrees counter-clockwise (read bottom to top), with
 * the bottom-left corner of its first character at (x, y + width). */
void plot_text_up(plot_canvas *c, int32_t x, int32_t y, const char *text, uint8_t color,
                  int32_t scale);

/* Pixels the text spans along its baseline, and across it. */
int32_t plot_text_width(const char *text, int32_t scale);
int32_t plot_text_height(int32_t scale);

#endif
