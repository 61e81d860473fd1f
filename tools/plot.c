/* The rasterizer (see plot.h). */
#include <stdlib.h>
#include <string.h>

#include "font5x7.h"
#include "plot.h"

int plot_canvas_create(plot_canvas *c, int32_t width, int32_t height, uint8_t background)
{
    c->width = width;
    c->height = height;
    c->pixels = width > 0 && height > 0 ? malloc((size_t)width * (size_t)height) : NULL;
    if (!c->pixels)
        return -1;
    memset(c->pixels, background, (size_t)width * (size_t)height);
    return 0;
}

void plot_canvas_destroy(plot_canvas *c)
{
    free(c->pixels);
    c->pixels = NULL;
}

void plot_pixel(plot_canvas *c, int32_t x, int32_t y, uint8_t color)
{
    if (x >= 0 && y >= 0 && x < c->width && y < c->height)
        c->pixels[(size_t)y * (size_t)c->width + (size_t)x] = color;
}

void plot_fill(plot_canvas *c, int32_t x0, int32_t y0, int32_t x1, int32_t y1, uint8_t color)
{
    if (x0 > x1) {
        int32_t t = x0;
        x0 = x1;
        x1 = t;
    }
    if (y0 > y1) {
        int32_t t = y0;
        y0 = y1;
        y1 = t;
    }
    x0 = x0 < 0 ? 0 : x0;
    y0 = y0 < 0 ? 0 : y0;
    x1 = x1 >= c->width ? c->width - 1 : x1;
    y1 = y1 >= c->height ? c->height - 1 : y1;
    for (int32_t y = y0; y <= y1; y++)
        for (int32_t x = x0; x <= x1; x++)
            c->pixels[(size_t)y * (size_t)c->width + (size_t)x] = color;
}

void plot_line(plot_canvas *c, int32_t x0, int32_t y0, int32_t x1, int32_t y1, uint8_t color,
               int32_t thickness)
{
    const int32_t dx = abs(x1 - x0), dy = -abs(y1 - y0);
    const int32_t sx = x0 < x1 ? 1 : -1, sy = y0 < y1 ? 1 : -1;
    const int32_t before = (thickness - 1) / 2, after = thickness - 1 - before;
    int32_t err = dx + dy;
    for (;;) {
        plot_fill(c, x0 - before, y0 - before, x0 + after, y0 + after, color);
        if (x0 == x1 && y0 == y1)
            break;
        int32_t e2 = 2 * err;
        if (e2 >= dy) {
            err += dy;
            x0 += sx;
        }
        if (e2 <= dx) {
            err += dx;
            y0 += sy;
        }
    }
}

/* Draws glyph column `col`, row `row` of a character as a scale x scale
 * square at (x, y) when it is set. */
static void glyph_square(plot_canvas *c, const uint8_t *glyph, int32_t col, int32_t row,
                         int32_t x, int32_t y, uint8_t color, int32_t scale)
{
    if (glyph[col] & (1u << row))
        plot_fill(c, x, y, x + scale - 1, y + scale - 1, color);
}

void plot_text(plot_canvas *c, int32_t x, int32_t y, const char *text, uint8_t color,
               int32_t scale)
{
    for (; *text; text++, x += FONT_ADVANCE * scale) {
        const uint8_t *glyph = font5x7_glyph(*text);
        for (int32_t col = 0; col < FONT_WIDTH; col++)
            for (int32_t row = 0; row < FONT_HEIGHT; row++)
                glyph_square(c, glyph, col, row, x + col * scale, y + row * scale, color, scale);
    }
}

void plot_text_up(plot_canvas *c, int32_t x, int32_t y, const char *text, uint8_t color,
                  int32_t scale)
{
    /* Turned counter-clockwise: a glyph's columns run upward, its rows right. */
    int32_t bottom = y + plot_text_width(text, scale) - 1;
    for (; *text; text++, bottom -= FONT_ADVANCE * scale) {
        const uint8_t *glyph = font5x7_glyph(*text);
        for (int32_t col = 0; col < FONT_WIDTH; col++)
            for (int32_t row = 0; row < FONT_HEIGHT; row++)
                glyph_square(c, glyph, col, row, x + row * scale,
                             bottom - (col + 1) * scale + 1, color, scale);
    }
}

int32_t plot_text_width(const char *text, int32_t scale)
{
    int32_t n = (int32_t)strlen(text);
    return n ? (n * FONT_ADVANCE - 1) * scale : 0;
}

int32_t plot_text_height(int32_t scale)
{
    return FONT_HEIGHT * scale;
}
