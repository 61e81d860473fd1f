/* Tickets. A forward opens at the first verify over its rows, gains a layer
 * per verify, and closes at commit (or abort). Closed forwards stay in a ring so a ticket
 * presented again can be told apart: "repeated" while its rows have not been
 * verified since, "stale" once a newer verify, an abort or a reset overtook it. */
#include <stdlib.h>
#include <string.h>

#include "core/tickets.h"

ssm_status ssm_tickets_init(ssm_ticket_book *book, uint64_t context_id, int32_t layers,
                            int32_t capacity)
{
    memset(book, 0, sizeof *book);
    book->context_id = context_id;
    book->layers = layers;
    book->capacity = capacity;
    book->history = ssm_calloc(SSM_FORWARD_HISTORY, sizeof *book->history);
    book->layer_flags = ssm_calloc((size_t)SSM_FORWARD_HISTORY * layers, 1);
    book->slot_pending = ssm_calloc((size_t)capacity, sizeof *book->slot_pending);
    book->slot_latest = ssm_calloc((size_t)capacity, sizeof *book->slot_latest);
    book->slot_row = ssm_calloc((size_t)capacity, sizeof *book->slot_row);
    if (!book->history || !book->layer_flags || !book->slot_pending || !book->slot_latest ||
        !book->slot_row) {
        ssm_tickets_free(book);
        return ssm_error_set(SSM_ERR_OUT_OF_MEMORY, "out of memory for the ticket book");
    }
    for (int i = 0; i < SSM_FORWARD_HISTORY; i++)
        book->history[i].layer_done = book->layer_flags + (size_t)i * layers;
    return SSM_OK;
}

void ssm_tickets_free(ssm_ticket_book *book)
{
    ssm_free(book->history);
    ssm_free(book->layer_flags);
    ssm_free(book->slot_pending);
    ssm_free(book->slot_latest);
    ssm_free(book->slot_row);
    memset(book, 0, sizeof *book);
}

static ssm_forward *find(ssm_ticket_book *book, uint64_t id)
{
    ssm_forward *f = &book->history[id % SSM_FORWARD_HISTORY];
    return (f->state != FORWARD_UNUSED && f->id == id) ? f : NULL;
}

ssm_status ssm_tickets_lookup(ssm_ticket_book *book, const ssm_ticket *ticket, ssm_forward **out)
{
    if (ticket->context_id == 0 && ticket->forward == 0)
        return ssm_error_set(SSM_ERR_TICKET_FOREIGN,
                             "empty ticket (SSM_TICKET_INIT): no verify opened a forward with "
                             "it; commit the ticket ssm_verify filled");
    if (ticket->context_id != book->context_id)
        return ssm_error_set(SSM_ERR_TICKET_FOREIGN,
                             "ticket was issued by another context (id %llx, this is %llx)",
                             (unsigned long long)ticket->context_id,
                             (unsigned long long)book->context_id);
    if (ticket->forward == 0 || ticket->forward > book->last_forward)
        return ssm_error_set(SSM_ERR_TICKET_FOREIGN,
                             "ticket names forward %llu, which this context never issued",
                             (unsigned long long)ticket->forward);
    ssm_forward *f = find(book, ticket->forward);
    if (!f) /* out of the ring: its slots are gone with it, so no "repeated" either */
        return ssm_error_set(SSM_ERR_TICKET_STALE,
                             "ticket of forward %llu is stale: %llu forwards have run since, "
                             "more than the %d this context remembers",
                             (unsigned long long)ticket->forward,
                             (unsigned long long)(book->last_forward - ticket->forward),
                             SSM_FORWARD_HISTORY);
    if (f->rows != ticket->rows || f->tokens != ticket->tokens)
        return ssm_error_set(SSM_ERR_TICKET_FOREIGN,
                             "ticket of forward %llu was altered: %d rows x %d tokens issued, "
                             "%d x %d presented",
                             (unsigned long long)f->id, f->rows, f->tokens, ticket->rows,
                             ticket->tokens);
    if (f->layout != ticket->layout)
        return ssm_error_set(SSM_ERR_TICKET_FOREIGN,
                             "ticket of forward %llu was altered: issued with layout %u, "
                             "presented with layout %u",
                             (unsigned long long)f->id, (unsigned)f->layout,
                             (unsigned)ticket->layout);
    switch (f->state) {
    case FORWARD_OPEN:
        *out = f;
        return SSM_OK;
    case FORWARD_COMMITTED:
        if (!f->superseded)
            return ssm_error_set(SSM_ERR_TICKET_REPEATED,
                                 "ticket of forward %llu was already committed",
                                 (unsigned long long)f->id);
        return ssm_error_set(SSM_ERR_TICKET_STALE,
                             "ticket of forward %llu is stale: it was already committed, and "
                             "its rows were %s since",
                             (unsigned long long)f->id,
                             f->superseded == OVERTAKEN_BY_DECODE   ? "decoded"
                             : f->superseded == OVERTAKEN_BY_RESET ? "reset or released"
                                                                   : "verified again");
    case FORWARD_ABORTED:
        return ssm_error_set(SSM_ERR_TICKET_STALE,
                             "ticket of forward %llu is stale: the forward was aborted",
                             (unsigned long long)f->id);
    case FORWARD_UNUSED:
        break;
    }
    return ssm_error_set(SSM_ERR_INTERNAL, "ticket book in an impossible state");
}

ssm_status ssm_tickets_can_open(const ssm_ticket_book *book)
{
    if (book->open_count >= SSM_MAX_OPEN_FORWARDS)
        return ssm_error_set(SSM_ERR_INVALID_ARGUMENT,
                             "%d forwards are open; commit one before verifying more rows",
                             SSM_MAX_OPEN_FORWARDS);
    /* The ring slot the next id takes must not hold an open forward. */
    const ssm_forward *next = &book->history[(book->last_forward + 1) % SSM_FORWARD_HISTORY];
    if (next->state == FORWARD_OPEN)
        return ssm_error_set(SSM_ERR_INVALID_ARGUMENT,
                             "forward %llu is still open after %d newer ones; commit it",
                             (unsigned long long)next->id, SSM_FORWARD_HISTORY);
    return SSM_OK;
}

ssm_forward *ssm_tickets_open(ssm_ticket_book *book, const ssm_batch *batch,
                              const int32_t *slots_host, uint32_t layout, ssm_ticket *ticket)
{
    uint64_t id = ++book->last_forward;
    ssm_forward *f = &book->history[id % SSM_FORWARD_HISTORY];
    uint8_t *flags = f->layer_done;
    memset(f, 0, sizeof *f);
    memset(flags, 0, (size_t)book->layers);
    f->layer_done = flags;
    f->id = id;
    f->state = FORWARD_OPEN;
    f->rows = batch->rows;
    f->tokens = batch->tokens;
    f->slots = batch->slots;
    f->slots_host = slots_host;
    f->layout = layout;
    for (int32_t r = 0; r < batch->rows; r++) {
        int32_t slot = slots_host[r];
        if (slot < 0)
            continue;
        ssm_forward *previous = book->slot_latest[slot] ? find(book, book->slot_latest[slot]) : NULL;
        if (previous && !previous->superseded)
            previous->superseded = OVERTAKEN_BY_VERIFY;
        book->slot_pending[slot] = id;
        book->slot_latest[slot] = id;
        book->slot_row[slot] = r;
        f->live_rows++;
    }
    book->open_count++;
    ticket->context_id = book->context_id;
    ticket->forward = id;
    ticket->rows = batch->rows;
    ticket->tokens = batch->tokens;
    ticket->layout = layout;
    return f;
}

void ssm_tickets_mark_layer(ssm_ticket_book *book, ssm_forward *forward, int32_t layer)
{
    (void)book;
    if (!forward->layer_done[layer]) {
        forward->layer_done[layer] = 1;
        forward->layers_done++;
    }
}

void ssm_tickets_abort(ssm_ticket_book *book, ssm_forward *forward)
{
    /* The caller's slot buffer may have changed since: scan the pool. */
    for (int32_t s = 0; s < book->capacity; s++)
        if (book->slot_pending[s] == forward->id)
            book->slot_pending[s] = 0;
    forward->state = FORWARD_ABORTED;
    book->open_count--;
}

void ssm_tickets_forget_slot(ssm_ticket_book *book, int32_t slot, forward_overtaken why)
{
    ssm_forward *latest = book->slot_latest[slot] ? find(book, book->slot_latest[slot]) : NULL;
    if (latest && !latest->superseded)
        latest->superseded = why;
}

void ssm_tickets_close(ssm_ticket_book *book, ssm_forward *forward)
{
    /* The commit checked that the slot buffer still names exactly this
     * forward's slots, so walking it is enough (no scan of the pool). */
    for (int32_t r = 0; r < forward->rows; r++)
        if (forward->slots_host[r] >= 0)
            book->slot_pending[forward->slots_host[r]] = 0;
    forward->state = FORWARD_COMMITTED;
    book->open_count--;
}
