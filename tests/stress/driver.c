/* check_stress: model-based random sessions against every mode
 * (docs/reliability.md).
 *
 * From a seed, each session draws a small model (GDN or KDA, GVA or not,
 * fp32 or bf16 state and activations, 1 to 3 layers, 3 to 6 slots, verify
 * width 1 to 5) and runs thousands of operations on a CPU context of the
 * mode under test and a peer context of another mode: acquire, release and
 * reuse, reset, prefill (1 to 150 tokens a row, prompts continued over
 * calls, padding rows), decode, verify over some layers then the rest,
 * commit with random accepted lengths, two forwards open at once, abort,
 * slot copy (src == dst too), pages moved between slots and modes (one or
 * batched), pages saved and restored later, and protocol errors (old,
 * repeated, foreign and altered tickets, accepted outside [1, T],
 * incomplete forwards, a second verify or any call on a pending slot, a
 * layer verified twice, slots out of range or not acquired or twice in a
 * batch, bad token counts and offsets, an exhausted pool, corrupted,
 * truncated and foreign pages). A model follows every slot through the CPU
 * reference (model.c) and the ticket book (book.c); after every operation
 * each idle slot's export, the pools, the flags and the outputs so far are
 * checked against it (the numerics contract, tests/spec_bounds.h), and every
 * rejected call must return its code and change nothing.
 *
 * Environment (all optional):
 *   SSM_STRESS_SEED=N     run only seed N (else SSM_STRESS_SEEDS seeds from
 *                         SSM_TEST_SEED, or a fresh seed printed at start)
 *   SSM_STRESS_SEEDS=N    seeds per mode and kind (default 2)
 *   SSM_STRESS_OPS=N      operations per session (default 1200)
 *   SSM_STRESS_MODES=a,b  modes under test (default native,compact,replay)
 *   SSM_STRESS_KINDS=a,b  gdn and/or kda (default both)
 *   SSM_STRESS_VERBOSE=1  print every operation
 * A failure prints the seed, the operation and a command replaying it.
 * Output is TAP, one test per session, then a summary line. `make stress`
 * runs the long form (tests/stress/stress.am). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tests/stress/stress.h"

static int64_t env_int(const char *name, int64_t fallback)
{
    const char *v = getenv(name);
    return v && *v ? strtoll(v, NULL, 0) : fallback;
}

/* 1 when `word` is an item of the comma-separated `list` (NULL: all). */
static int listed(const char *list, const char *word)
{
    if (!list || !*list)
        return 1;
    size_t n = strlen(word);
    for (const char *p = list; (p = strstr(p, word)) != NULL; p += n)
        if ((p == list || p[-1] == ',') && (p[n] == ',' || p[n] == '\0'))
            return 1;
    return 0;
}

static double now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* The summary line the lead quotes, and the rejected calls by status. */
static void print_summary(const st_counts *c, int failed, double seconds)
{
    int64_t errors = 0;
    for (int e = 1; e <= SSM_ERR_INTERNAL; e++)
        errors += c->errors[e];
    printf("# stress: %lld sessions, %lld operations, %lld API calls, %lld protocol errors "
           "exercised, %lld failed sessions, %.1f s\n",
           (long long)c->sessions, (long long)c->ops, (long long)c->calls, (long long)errors,
           (long long)failed, seconds);
    printf("# stress: %lld verify rounds, %lld prefill tokens, %lld pages moved, %lld copies, "
           "%lld aborts; largest share of a relative-RMS bound used: outputs %.2g, "
           "states %.2g\n",
           (long long)c->verify_rounds, (long long)c->prefill_tokens, (long long)c->page_moves,
           (long long)c->copies, (long long)c->aborts, c->worst_out, c->worst_state);
    printf("# stress: rejected calls by status:");
    for (int e = 1; e <= SSM_ERR_INTERNAL; e++)
        if (c->errors[e])
            printf(" %s %lld", ssm_status_name((ssm_status)e), (long long)c->errors[e]);
    printf("\n");
}

int main(void)
{
    static const char *const modes[] = {"native", "compact", "replay"};
    static const ssm_model_kind kinds[] = {SSM_MODEL_GDN, SSM_MODEL_KDA};
    const char *mode_list = getenv("SSM_STRESS_MODES"), *kind_list = getenv("SSM_STRESS_KINDS");
    const char *one = getenv("SSM_STRESS_SEED");
    int64_t seeds = one && *one ? 1 : env_int("SSM_STRESS_SEEDS", 2);
    int64_t ops = env_int("SSM_STRESS_OPS", 1200);
    int verbose = (int)env_int("SSM_STRESS_VERBOSE", 0);
    uint64_t base = one && *one ? strtoull(one, NULL, 0) : test_seed();
    setvbuf(stdout, NULL, _IOLBF, 0);

    int64_t planned = 0;
    for (int mi = 0; mi < 3; mi++)
        for (int ki = 0; ki < 2; ki++)
            planned += listed(mode_list, modes[mi]) && listed(kind_list,
                                                              ssm_model_kind_name(kinds[ki]))
                           ? seeds
                           : 0;
    printf("1..%lld\n", (long long)planned);
    st_counts count;
    memset(&count, 0, sizeof count);
    int64_t n = 0, failed = 0;
    double start = now_seconds();
    for (int64_t k = 0; k < seeds; k++)
        for (int mi = 0; mi < 3; mi++)
            for (int ki = 0; ki < 2; ki++) {
                const char *kind = ssm_model_kind_name(kinds[ki]);
                if (!listed(mode_list, modes[mi]) || !listed(kind_list, kind))
                    continue;
                uint64_t seed = base + (uint64_t)k;
                double t0 = now_seconds();
                int bad = st_run_session(seed, modes[mi], kinds[ki], ops, &count, verbose);
                failed += bad;
                printf("%s %lld - %s %s seed=%llu ops=%lld (%.2f s)\n", bad ? "not ok" : "ok",
                       (long long)++n, modes[mi], kind, (unsigned long long)seed,
                       (long long)ops, now_seconds() - t0);
            }
    print_summary(&count, (int)failed, now_seconds() - start);
    return failed ? 1 : 0;
}
