/* How many slots a byte budget holds, from the library's own plans. */
#include "cli.h"

/* The plan of `base` with `slots` slots; 0, or -1 (the library's error). */
static int plan_at(const ssm_config *base, int64_t slots, ssm_plan *plan)
{
    ssm_config c = *base;
    c.max_requests = (int32_t)slots;
    return ssm_config_plan(&c, plan) == SSM_OK ? 0 : -1;
}

static int fits(const ssm_plan *p, uint64_t budget)
{
    return p->pool_bytes <= budget;
}

int cli_slots_in_budget(const ssm_config *config, uint64_t budget, int64_t *slots)
{
    ssm_plan p;
    *slots = 0;
    if (plan_at(config, 1, &p) != 0)
        return -1;
    if (!fits(&p, budget) || p.bytes_per_slot == 0)
        return 0;
    /* At most this many: a mode's shared bytes never shrink as slots grow. */
    uint64_t most = (budget - p.shared_bytes) / p.bytes_per_slot;
    int64_t probe = most < (uint64_t)CLI_PLAN_SLOTS_MAX ? (int64_t)most : CLI_PLAN_SLOTS_MAX;
    if (plan_at(config, probe, &p) != 0)
        return -1;
    if (fits(&p, budget)) {
        /* Past the largest plan asked for, its shared bytes hold on. */
        *slots = probe == (int64_t)most ? probe
                                          : (int64_t)((budget - p.shared_bytes) / p.bytes_per_slot);
        return 0;
    }
    int64_t lo = 1, hi = probe; /* lo fits, hi does not */
    while (hi - lo > 1) {
        int64_t mid = lo + (hi - lo) / 2;
        if (plan_at(config, mid, &p) != 0)
            return -1;
        if (fits(&p, budget))
            lo = mid;
        else
            hi = mid;
    }
    *slots = lo;
    return 0;
}
