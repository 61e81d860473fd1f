/* What the fuzzing harnesses share (tests/fuzz): a reader over the fuzz
 * input, a check that names the broken invariant and aborts, and small CPU
 * contexts. The harnesses run under libFuzzer (make fuzz) and under
 * replay_corpus.c with any compiler (make check). */
#ifndef SSM_TESTS_FUZZ_COMMON_H
#define SSM_TESTS_FUZZ_COMMON_H

#include <stddef.h>
#include <stdint.h>

#include "ssmstate/ssmstate.h"

/* The entry point every harness defines (libFuzzer's). */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The unread part of a fuzz input. */
typedef struct fuzz_in {
    const uint8_t *p;
    size_t n;
} fuzz_in;

/* The next byte, or 0 once the input is used up. */
uint8_t fuzz_u8(fuzz_in *in);
/* The next four bytes, little-endian (missing bytes read as 0). */
uint32_t fuzz_u32(fuzz_in *in);

/* Prints the failed invariant, where, and ssm_last_error(), then aborts (the
 * harness, never the library, aborts: libFuzzer keeps the input). */
void fuzz_fail(const char *file, int line, const char *what) __attribute__((noreturn));
#define FUZZ_CHECK(cond)                                                                     \
    do {                                                                                     \
        if (!(cond))                                                                         \
            fuzz_fail(__FILE__, __LINE__, #cond);                                            \
    } while (0)

/* The built-in modes, in a fixed order. */
extern const char *const fuzz_modes[3];

/* Keeps one small context of each built-in mode for the process's life
 * (reachable: no leak), so their plugins stay loaded across inputs and a
 * later create's dlopen is cheap. Once per process. */
void fuzz_pin_plugins(void);

/* A CPU context of model m in `mode` (plugins from $SSMSTATE_PLUGIN_PATH);
 * head_slice may be NULL. Aborts when it cannot be created: the harness
 * setup, not the input, is wrong then. */
ssm_ctx *fuzz_ctx(const ssm_model_dims *m, const char *mode, ssm_dtype state, ssm_dtype act,
                  int32_t capacity, int32_t drafts, const ssm_head_slice *head_slice);

#endif
