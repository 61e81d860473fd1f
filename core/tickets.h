/* The step protocol's bookkeeping (docs/architecture.md): which slots have an
 * uncommitted verify, which forward each ticket belongs to, and how a ticket
 * presented later is judged (current, stale, repeated or foreign). Host-side
 * only. */
#ifndef SSM_CORE_TICKETS_H
#define SSM_CORE_TICKETS_H

#include "core/internal.h"

/* Forwards that can be open at once; history kept to tell stale from repeated. */
#define SSM_MAX_OPEN_FORWARDS 64
#define SSM_FORWARD_HISTORY 256

/* What overtook a committed forward's rows first (its ticket is stale from
 * then on; ssm_tickets_lookup says which). */
typedef enum forward_overtaken {
    OVERTAKEN_NOT = 0,
    OVERTAKEN_BY_VERIFY, /* a later verify opened over one of its slots */
    OVERTAKEN_BY_DECODE, /* a decode ran on one of its slots (a verify and commit in one) */
    OVERTAKEN_BY_RESET   /* one of its slots was reset, released or made fresh */
} forward_overtaken;

typedef enum forward_state {
    FORWARD_UNUSED = 0,
    FORWARD_OPEN,
    FORWARD_COMMITTED,
    FORWARD_ABORTED /* ended by ssm_forward_abort */
} forward_state;

typedef struct ssm_forward {
    uint64_t id;
    forward_state state;
    forward_overtaken superseded; /* what overtook its rows first; OVERTAKEN_NOT: nothing */
    int32_t rows, tokens;
    const int32_t *slots;  /* the caller's buffer; must stay unchanged until commit */
    const int32_t *slots_host; /* what the host reads: slots, or its host copy (CUDA) */
    int32_t live_rows;     /* rows that are not padding */
    int32_t layers_done;
    uint8_t *layer_done;   /* [layers] */
    uint32_t layout;       /* the update layout its verifies ran (docs/tuning.md) */
} ssm_forward;

typedef struct ssm_ticket_book {
    uint64_t context_id;
    uint64_t last_forward;  /* ids are 1, 2, 3, ... */
    int32_t layers;
    int32_t capacity;
    int32_t open_count;
    ssm_forward *history;   /* ring of SSM_FORWARD_HISTORY */
    uint8_t *layer_flags;   /* SSM_FORWARD_HISTORY * layers */
    uint64_t *slot_pending; /* [capacity] id of the open forward, 0 = none */
    uint64_t *slot_latest;  /* [capacity] id of the latest forward that verified it */
    int32_t *slot_row;      /* [capacity] row of the slot in its open forward */
} ssm_ticket_book;

ssm_status ssm_tickets_init(ssm_ticket_book *book, uint64_t context_id, int32_t layers,
                            int32_t capacity);
void ssm_tickets_free(ssm_ticket_book *book);

/* Finds the forward a presented ticket names. SSM_OK and *out for an open
 * forward; else the ticket error (foreign, stale, repeated) with a message. */
ssm_status ssm_tickets_lookup(ssm_ticket_book *book, const ssm_ticket *ticket, ssm_forward **out);

/* Whether a new forward can open (fewer than SSM_MAX_OPEN_FORWARDS open). */
ssm_status ssm_tickets_can_open(const ssm_ticket_book *book);

/* Opens a forward over validated rows and fills the ticket; slots_host is
 * the host-readable copy of batch->slots, layout the update layout every
 * verify of the forward and its commit run. Cannot fail once
 * ssm_tickets_can_open said yes. */
ssm_forward *ssm_tickets_open(ssm_ticket_book *book, const ssm_batch *batch,
                              const int32_t *slots_host, uint32_t layout, ssm_ticket *ticket);

/* Marks a layer verified in an open forward. */
void ssm_tickets_mark_layer(ssm_ticket_book *book, ssm_forward *forward, int32_t layer);

/* Closes an open forward after its commit. */
void ssm_tickets_close(ssm_ticket_book *book, ssm_forward *forward);

/* Ends an open forward without a commit (ssm_forward_abort). */
void ssm_tickets_abort(ssm_ticket_book *book, ssm_forward *forward);

/* A slot was made fresh (OVERTAKEN_BY_RESET) or decoded (OVERTAKEN_BY_DECODE:
 * an implicit verify and commit): a ticket naming it from before reads as
 * stale, and says which. */
void ssm_tickets_forget_slot(ssm_ticket_book *book, int32_t slot, forward_overtaken why);

/* 1 when row r of an open forward still names the slot it was opened with. */
static inline int ssm_tickets_row_matches(const ssm_ticket_book *book, uint64_t forward,
                                          int32_t row, int32_t slot)
{
    return book->slot_pending[slot] == forward && book->slot_row[slot] == row;
}

/* Id of the open forward holding slot, 0 if none. */
static inline uint64_t ssm_tickets_pending(const ssm_ticket_book *book, int32_t slot)
{
    return book->slot_pending[slot];
}

#endif
