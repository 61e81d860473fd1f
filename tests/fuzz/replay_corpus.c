/* Replays fuzz inputs through one harness's LLVMFuzzerTestOneInput, without
 * libFuzzer, so every committed seed and every crash input kept under
 * tests/fuzz/regressions/ runs in `make check` with any compiler (TAP).
 * Arguments: files or directories; none: the harness's corpus and
 * regressions under $SSM_TOP_SRCDIR/tests/fuzz (FUZZ_NAME names the harness).
 * A broken invariant aborts, which the TAP driver reports. */
#define _GNU_SOURCE
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "tests/fuzz/fuzz_common.h"

#ifndef FUZZ_NAME
#error "FUZZ_NAME must name the harness"
#endif

static int count;

/* Runs one file through the harness and prints its TAP line; 0 if unreadable. */
static int replay_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return 0;
    size_t size = 0, capacity = 4096;
    uint8_t *data = malloc(capacity);
    size_t n;
    while (data && (n = fread(data + size, 1, capacity - size, f)) > 0) {
        size += n;
        if (size == capacity)
            data = realloc(data, capacity *= 2);
    }
    fclose(f);
    if (!data)
        return 0;
    LLVMFuzzerTestOneInput(data, size);
    free(data);
    printf("ok %d - %s\n", ++count, path);
    fflush(stdout);
    return 1;
}

/* scandir order: by name, so runs are reproducible. */
static int by_name(const struct dirent **a, const struct dirent **b)
{
    return strcmp((*a)->d_name, (*b)->d_name);
}

/* Replays `path`, or each file of it (sorted) when it is a directory;
 * a missing directory is fine (a harness may have no regressions yet). */
static int replay_path(const char *path)
{
    struct stat st;
    if (stat(path, &st) != 0)
        return 1;
    if (!S_ISDIR(st.st_mode))
        return replay_file(path);
    struct dirent **names;
    int n = scandir(path, &names, NULL, by_name);
    int ok = n >= 0;
    for (int i = 0; i < n; i++) {
        char file[4096];
        snprintf(file, sizeof file, "%s/%s", path, names[i]->d_name);
        if (names[i]->d_name[0] != '.' && stat(file, &st) == 0 && S_ISREG(st.st_mode))
            ok &= replay_file(file);
        free(names[i]);
    }
    free(names);
    return ok;
}

/* Replays the arguments, or the harness's corpus and regressions; TAP out. */
int main(int argc, char **argv)
{
    int ok = 1;
    if (argc > 1) {
        for (int i = 1; i < argc; i++)
            ok &= replay_path(argv[i]);
    } else {
        const char *top = getenv("SSM_TOP_SRCDIR");
        char dir[4096];
        snprintf(dir, sizeof dir, "%s/tests/fuzz/corpus/%s", top ? top : ".", FUZZ_NAME);
        ok &= replay_path(dir);
        snprintf(dir, sizeof dir, "%s/tests/fuzz/regressions/%s", top ? top : ".", FUZZ_NAME);
        ok &= replay_path(dir);
    }
    if (count == 0)
        printf("not ok 1 - no inputs found for harness %s\n", FUZZ_NAME), count = 1, ok = 0;
    printf("1..%d\n", count);
    return ok ? 0 : 1;
}
