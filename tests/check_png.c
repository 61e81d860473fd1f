/* `tests/check_png FILE [WIDTH HEIGHT]`: validates a PNG file with
 * tests/png_validate.h (signature, chunk CRCs, IHDR, the zlib stream
 * inflated and its Adler-32, the image size), and when WIDTH and HEIGHT are
 * given, that the image has that size. Prints "ok WxH" or the problem;
 * exit 0 valid, 1 invalid, 2 bad usage or an unreadable file. Used by
 * tests/serve_smoke.sh on the plot `ssmstate serve --plot` writes. */
#include <stdio.h>
#include <stdlib.h>

#include "tests/png_validate.h"

/* Reads a whole file into a malloc'ed buffer; NULL on failure. */
static uint8_t *read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    uint8_t *data = NULL;
    size_t size = 0, room = 0, got;
    do {
        if (size == room) {
            room = room ? 2 * room : 1 << 16;
            uint8_t *grown = realloc(data, room);
            if (!grown) {
                free(data);
                fclose(f);
                return NULL;
            }
            data = grown;
        }
        got = fread(data + size, 1, room - size, f);
        size += got;
    } while (got > 0);
    int bad = ferror(f);
    fclose(f);
    if (bad) {
        free(data);
        return NULL;
    }
    *len = size;
    return data;
}

int main(int argc, char **argv)
{
    if (argc != 2 && argc != 4) {
        fprintf(stderr, "usage: check_png FILE [WIDTH HEIGHT]\n");
        return 2;
    }
    size_t len = 0;
    uint8_t *bytes = read_file(argv[1], &len);
    if (!bytes) {
        fprintf(stderr, "check_png: %s: cannot read\n", argv[1]);
        return 2;
    }
    png_facts facts;
    char why[256];
    int status = png_validate(bytes, len, &facts, why, sizeof why);
    free(bytes);
    if (status != 0) {
        printf("invalid %s: %s\n", argv[1], why);
        return 1;
    }
    if (argc == 4 && (facts.width != strtoul(argv[2], NULL, 10) ||
                      facts.height != strtoul(argv[3], NULL, 10))) {
        printf("invalid %s: %ux%u, expected %sx%s\n", argv[1], facts.width, facts.height,
               argv[2], argv[3]);
        return 1;
    }
    printf("ok %ux%u\n", facts.width, facts.height);
    return 0;
}
