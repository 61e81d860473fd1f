/* The walk over allocation faults, the tally and the decode probe
 * (faults.h). */
#include <check.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>

#include "core/internal.h"
#include "tests/faults/faults.h"

const char *const fault_op_names[OP_COUNT] = {
    "ctx_create(struct)", "ctx_create(ini)",    "slot_export_page",
    "slots_export_pages", "slot_import_page",   "slot_import_page(slice)",
    "slots_import_pages", "slot_copy",          "ctx_status",
    "page_merge",         "plugins_list",
};

/* Shared with every forked test (mapped before the first fork). */
static int64_t *tally;

void faults_tally_init(void)
{
    void *shared = mmap(NULL, sizeof(int64_t) * OP_COUNT, PROT_READ | PROT_WRITE,
                        MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    tally = shared == MAP_FAILED ? NULL : shared;
}

void faults_tally(fault_op op, int64_t faults)
{
    if (tally)
        tally[op] += faults;
}

int64_t faults_tallied(fault_op op)
{
    return tally ? tally[op] : -1;
}

int64_t faults_walk(fault_op op, const char *what, ssm_status (*run)(void *arg),
                    void (*check)(void *arg, ssm_status status), void *arg)
{
    for (int64_t n = 1; n < 100000; n++) {
        int64_t live = ssm_fault_live(), injected = ssm_fault_injected();
        ssm_error_set(SSM_OK, "%s", "");
        ssm_fault_fail_allocation(n);
        ssm_status status = run(arg);
        ssm_fault_fail_allocation(0);
        int hit = ssm_fault_injected() != injected;
        ck_assert_msg(ssm_fault_live() == live,
                      "%s, allocation %lld failing: %lld allocations leaked (%s)", what,
                      (long long)n, (long long)(ssm_fault_live() - live), ssm_last_error());
        if (!hit) {
            ck_assert_msg(status == SSM_OK, "%s with no fault: %s", what, ssm_last_error());
            check(arg, status);
            faults_tally(op, n - 1);
            printf("# %s: %lld faults\n", what, (long long)(n - 1));
            fflush(stdout);
            return n - 1;
        }
        const char *message = ssm_last_error();
        ck_assert_msg(status == SSM_ERR_OUT_OF_MEMORY,
                      "%s, allocation %lld failing: status %d (%s)", what, (long long)n,
                      (int)status, message);
        ck_assert_msg(strstr(message, "memory") || strstr(message, "allocate"),
                      "%s, allocation %lld failing: message '%s'", what, (long long)n, message);
        check(arg, status);
    }
    ck_abort_msg("%s: no end to its allocations", what);
    return 0;
}

ssm_model_dims faults_dims(int kda)
{
    ssm_model_dims m = {kda ? SSM_MODEL_KDA : SSM_MODEL_GDN, FAULTS_LAYERS, 2, 4, 16, 8, 4, 0,
                        0.0f};
    return m;
}

ssm_model_dims faults_rank_dims(int kda)
{
    ssm_model_dims m = faults_dims(kda);
    m.heads = 1;
    m.value_heads = 2;
    return m;
}

void faults_probe_make(faults_probe *p, const ssm_model_dims *m)
{
    test_rng r;
    test_rng_init(&r, 0x5eed + (uint64_t)m->kind);
    p->m = *m;
    p->out_bytes = 7 * (size_t)m->value_heads * m->value_dim * ssm_dtype_size(SSM_DTYPE_BF16);
    for (int32_t l = 0; l < FAULTS_LAYERS; l++) {
        test_weights_make(&r, m, 1, &p->w[l]);
        test_io_make(&r, m, SSM_DTYPE_BF16, 7, &p->io[l]);
    }
}

void faults_probe_free(faults_probe *p)
{
    for (int32_t l = 0; l < FAULTS_LAYERS; l++) {
        test_weights_free(&p->w[l]);
        test_io_free(&p->io[l]);
    }
}

void faults_probe_run(faults_probe *p, ssm_ctx *ctx, unsigned char *out)
{
    int32_t slot, offsets[2] = {0, 7};
    ck_assert_msg(ssm_slot_acquire(ctx, &slot) == SSM_OK, "%s", ssm_last_error());
    ssm_prefill_batch b = {1, &slot, offsets, 7, NULL, NULL};
    for (int32_t l = 0; l < FAULTS_LAYERS; l++) {
        ck_assert_msg(ssm_prefill(ctx, l, &b, &p->w[l].w, &p->io[l].io, NULL) == SSM_OK, "%s",
                      ssm_last_error());
        memcpy(out + (size_t)l * p->out_bytes, p->io[l].out, p->out_bytes);
    }
    ck_assert_msg(ssm_slot_release(ctx, slot) == SSM_OK, "%s", ssm_last_error());
}
