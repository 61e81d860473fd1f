/* A decode phase: 4 to 48 rounds over the same rows, each a decode or a
 * verify of random T committed with random accepted lengths, as an engine
 * serves running requests. Between the other operations a slot rarely
 * keeps its history long (resets, copies and imports empty it); here it
 * grows until replay folds, again and again, with accepted lengths that
 * land the cursor anywhere against the history length. */
#include "tests/stress/stress.h"

int op_burst(st_session *s, int ci)
{
    s->op_name = "decode phase";
    if (st_pick_idle(s, ci) < 0 || st_fwd_free(s, ci) < 0)
        return 0;
    int idle[ST_MAX_CAP];
    int32_t rows[ST_MAX_ROWS], most = st_idle_slots(s, ci, idle);
    int32_t n = test_pick_rows(&s->rng, idle, s->cap, test_rng_int(&s->rng, 1, most),
                               st_random_pads(s), ST_MAX_ROWS, rows);
    for (int32_t k = test_rng_int(&s->rng, 4, 48); k > 0; k--) {
        if (test_rng_int(&s->rng, 0, 3) == 0) {
            st_decode_rows(s, ci, n, rows);
        } else {
            int fi = st_fwd_begin(s, ci, n, rows, s->m.layers);
            st_fwd_commit(s, ci, fi);
        }
    }
    return 1;
}
