/* The built-in bitmap font of the plots: the classic 5 x 7 pixel font of
 * character LCDs, printable ASCII only. */
#ifndef SSM_TOOLS_FONT5X7_H
#define SSM_TOOLS_FONT5X7_H

#include <stdint.h>

enum {
    FONT_WIDTH = 5,   /* columns of a glyph */
    FONT_HEIGHT = 7,  /* rows of a glyph */
    FONT_ADVANCE = 6  /* columns from one character to the next */
};

/* The 5 columns of character c, left to right; bit r of a column is row r
 * from the top. Characters outside ' ' .. '~' get '?'. */
const uint8_t *font5x7_glyph(char c);

#endif
