/* The comma-separated option lists and the integers `bench` and `serve`
 * share (cli.h). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

int cli_parse_long(const char *text, long min, long max, long *out)
{
    char *end;
    errno = 0;
    long value = strtol(text, &end, 10);
    if (errno || end == text || *end || value < min || value > max)
        return -1;
    *out = value;
    return 0;
}

int cli_split_list(char *text, char **items, int max)
{
    int count = 0;
    for (char *item = text; item;) {
        char *comma = strchr(item, ',');
        if (comma)
            *comma = '\0';
        if (!*item || count == max) /* "1,,2", ",1", "1,", "": an empty item */
            return -1;
        items[count++] = item;
        item = comma ? comma + 1 : NULL;
    }
    return count;
}

int cli_parse_states(char *text, ssm_dtype states[2], int32_t *count)
{
    char *items[2];
    int n = cli_split_list(text, items, 2);
    if (n < 1)
        return -1;
    for (int i = 0; i < n; i++) {
        if (!strcmp(items[i], "f32"))
            states[i] = SSM_DTYPE_F32;
        else if (!strcmp(items[i], "bf16"))
            states[i] = SSM_DTYPE_BF16;
        else
            return -1;
    }
    *count = n;
    return n == 2 && states[0] == states[1] ? -1 : 0;
}

int cli_parse_modes(char *text, const char **modes, int max, int32_t *count)
{
    static const char *const all[] = {"native", "compact", "replay"};
    if (!strcmp(text, "all")) {
        if (max < 3)
            return -1;
        memcpy(modes, all, sizeof all);
        *count = 3;
        return 0;
    }
    char *items[64];
    int n = cli_split_list(text, items, max < 64 ? max : 64);
    for (int i = 0; i < n; i++) {
        if (strlen(items[i]) >= 64)
            return -1;
        for (int j = 0; j < i; j++)
            if (!strcmp(items[i], items[j]))
                return -1;
        modes[i] = items[i];
    }
    *count = n;
    return n > 0 ? 0 : -1;
}
