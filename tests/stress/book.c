/* The model of a context's ticket book (docs/architecture.md; core/tickets.c is
 * the implementation): forwards are numbered 1, 2, ... as verifies open them
 * and kept in a ring of ST_BOOK_RING; a ticket presented later is current
 * (open), repeated (committed, its rows not verified or made fresh since),
 * stale (overtaken by a newer verify or a decode over one of its slots, a reset
 * or release of one, an abort, or fallen out of the ring) or foreign (another
 * context, a number never issued, an altered shape). */
#include <string.h>

#include "tests/stress/stress.h"

void st_book_init(st_book *b, uint64_t context_id)
{
    memset(b, 0, sizeof *b);
    b->context_id = context_id;
}

static st_book_fwd *find(st_book *b, uint64_t id)
{
    st_book_fwd *f = &b->ring[id % ST_BOOK_RING];
    return f->state != BOOK_UNUSED && f->id == id ? f : NULL;
}

/* The status a commit (or abort, or a later layer's verify) presenting t
 * must return before anything else is looked at. */
ssm_status st_book_judge(const st_book *b, const ssm_ticket *t)
{
    if (t->context_id != b->context_id || t->forward == 0 || t->forward > b->last)
        return SSM_ERR_TICKET_FOREIGN;
    const st_book_fwd *f = find((st_book *)b, t->forward);
    if (!f)
        return SSM_ERR_TICKET_STALE;
    if (f->rows != t->rows || f->tokens != t->tokens)
        return SSM_ERR_TICKET_FOREIGN;
    switch (f->state) {
    case BOOK_OPEN:
        return SSM_OK;
    case BOOK_COMMITTED:
        return f->superseded ? SSM_ERR_TICKET_STALE : SSM_ERR_TICKET_REPEATED;
    default:
        return SSM_ERR_TICKET_STALE;
    }
}

/* A verify opened forward t over `slots` (t->rows of them, -1 padding). */
void st_book_open(st_book *b, const ssm_ticket *t, const int32_t *slots)
{
    b->context_id = t->context_id; /* learnt from the first ticket issued */
    b->last = t->forward;
    st_book_fwd *f = &b->ring[t->forward % ST_BOOK_RING];
    memset(f, 0, sizeof *f);
    f->id = t->forward;
    f->state = BOOK_OPEN;
    f->rows = t->rows;
    f->tokens = t->tokens;
    for (int32_t r = 0; r < t->rows; r++) {
        if (slots[r] < 0)
            continue;
        st_book_fwd *previous = b->slot_latest[slots[r]] ? find(b, b->slot_latest[slots[r]]) : NULL;
        if (previous)
            previous->superseded = 1;
        b->slot_latest[slots[r]] = t->forward;
    }
}

/* Forward t was committed (BOOK_COMMITTED) or aborted (BOOK_ABORTED). */
void st_book_close(st_book *b, const ssm_ticket *t, int state)
{
    st_book_fwd *f = find(b, t->forward);
    if (f)
        f->state = state;
}

/* A slot was reset, released or decoded: the forward that last verified
 * it is overtaken. */
void st_book_forget(st_book *b, int32_t slot)
{
    st_book_fwd *latest = b->slot_latest[slot] ? find(b, b->slot_latest[slot]) : NULL;
    if (latest)
        latest->superseded = 1;
}
