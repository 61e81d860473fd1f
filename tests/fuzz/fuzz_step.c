/* Fuzzing batch and ticket validation (docs/reliability.md): a program of step
 * calls decoded from the input runs against a small CPU context (4 slots, 2
 * layers, up to 4 tokens per verify): acquire, release, reset, prefill, decode,
 * verify, commit and abort with slots, lengths, accepted counts and tickets
 * taken from the input, tickets tampered with, slot buffers changed under an
 * open forward, NaN inputs, page round trips and slot copies.
 *
 * The harness keeps its own model of the protocol (acquired slots, open
 * forwards and their verified layers, pending slots) and checks: each call
 * succeeds exactly when the model says it must (for tickets as issued and
 * unchanged buffers); a failed call leaves every slot's exported page, its
 * pending state and its flags as they were; pool counts add up; a committed
 * ticket presented again is "repeated", an aborted one "stale".
 *
 * Input: byte 0 picks mode, kind and dtypes; then one op per byte, each
 * followed by its operands (see run_op). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tests/fuzz/fuzz_common.h"

enum { CAP = 4, LAYERS = 2, DRAFTS = 3, TMAX = 1 + DRAFTS, ROWS = 6, TOKENS = 48,
       RECORDS = 4, OPEN_MAX = 64, HISTORY = 256, OPS = 64 };

/* A ticket as the harness holds it, with the slot buffer it was opened on. */
typedef struct record {
    ssm_ticket t, issued;   /* as presented / as the library filled it */
    int32_t slots[ROWS];    /* the buffer every layer and the commit present */
    int32_t opened[ROWS];   /* its contents when the forward opened */
    int32_t rows, tokens;
} record;

/* The model of the protocol. */
typedef struct session {
    ssm_ctx *ctx;
    ssm_model_dims m;
    ssm_dtype ad;
    int acquired[CAP];
    int32_t used;
    uint64_t pending[CAP];  /* forward id a slot is pending in, 0: none */
    uint64_t open[OPEN_MAX]; /* ids of open forwards (0: unused) */
    uint32_t layers_done[OPEN_MAX];
    uint64_t last_forward;
    record rec[RECORDS];
    size_t page_bytes;
    uint8_t *snap[CAP], *check[CAP];
    ssm_status snap_status[CAP];
    uint32_t snap_flags[CAP];
    int snap_valid; /* snap still holds every slot as it is now */
} session;

/* Step tensors, big enough for any batch the ops can form (f32 sized). */
static float conv_weight[LAYERS][64 * 4], conv_bias[LAYERS][64], a_log[LAYERS][8],
    dt_bias[LAYERS][64];
static float x[TOKENS * 64], gate[TOKENS * 64], beta[TOKENS * 8], out[TOKENS * 64];
static ssm_layer_weights weights[LAYERS];

/* Keeps the built-in plugins loaded and fills the layers' weights, once. */
static void setup(void)
{
    static int done;
    if (done)
        return;
    done = 1;
    fuzz_pin_plugins();
    for (int l = 0; l < LAYERS; l++) {
        for (int i = 0; i < 64 * 4; i++)
            conv_weight[l][i] = 0.25f * (float)((i * 7 + l) % 9 - 4) / 4.0f;
        for (int i = 0; i < 64; i++) {
            conv_bias[l][i] = 0.01f * (float)(i % 5);
            dt_bias[l][i] = -2.0f + 0.1f * (float)(i % 7);
        }
        for (int i = 0; i < 8; i++)
            a_log[l][i] = 0.5f + 0.3f * (float)i;
        weights[l] = (ssm_layer_weights){conv_weight[l], conv_bias[l], a_log[l], dt_bias[l]};
    }
}

/* Fills n elements of dtype t with a fixed sequence of moderate values. */
static void fill(void *dst, ssm_dtype t, size_t n, int seed)
{
    for (size_t i = 0; i < n; i++) {
        float v = (float)((int)((i * 37 + (size_t)seed * 11) % 23) - 11) / 8.0f;
        if (t == SSM_DTYPE_F32) {
            ((float *)dst)[i] = v;
        } else {
            uint32_t bits;
            memcpy(&bits, &v, 4);
            ((uint16_t *)dst)[i] = (uint16_t)(bits >> 16);
        }
    }
}

/* A slot operand: mostly -1 .. CAP + 1, a byte >= 0xF8 one of a few far values. */
static int32_t slot_of(fuzz_in *in)
{
    static const int32_t wild[8] = {INT32_MIN, INT32_MAX, -2, CAP, -100, 1 << 20, CAP + 1, -1};
    uint8_t b = fuzz_u8(in);
    return b >= 0xF8 ? wild[b - 0xF8] : (int32_t)(b % 7) - 1; /* mostly -1 .. CAP + 1 */
}

/* A layer operand, -1 .. LAYERS. */
static int32_t layer_of(fuzz_in *in) { return (int32_t)(fuzz_u8(in) % (LAYERS + 2)) - 1; }

/* Index of open forward `id` in the model, or -1. */
static int open_index(const session *s, uint64_t id)
{
    for (int i = 0; id && i < OPEN_MAX; i++)
        if (s->open[i] == id)
            return i;
    return -1;
}

/* Whether rows of `slots` pass the library's checks for a new step. */
static int rows_ok(const session *s, int32_t rows, const int32_t *slots)
{
    int seen[CAP] = {0};
    for (int32_t r = 0; r < rows; r++) {
        int32_t v = slots[r];
        if (v == -1)
            continue;
        if (v < 0 || v >= CAP || !s->acquired[v] || seen[v] || s->pending[v])
            return 0;
        seen[v] = 1;
    }
    return 1;
}

/* Exports every slot, into snap (before an op) or check (after). */
static void take(session *s, uint8_t **pages, ssm_status *status, uint32_t *flags)
{
    for (int32_t v = 0; v < CAP; v++) {
        memset(pages[v], 0, s->page_bytes);
        status[v] = ssm_slot_export_page(s->ctx, v, pages[v], s->page_bytes);
        flags[v] = 0;
        ssm_slot_flags(s->ctx, v, &flags[v]);
        ssm_status want = !s->acquired[v] ? SSM_ERR_SLOT_NOT_ACQUIRED
                          : s->pending[v] ? SSM_ERR_VERIFY_PENDING
                                          : SSM_OK;
        FUZZ_CHECK(status[v] == want);
    }
}

/* After a failed call: every slot as it was. */
static void check_unchanged(session *s)
{
    ssm_status status[CAP];
    uint32_t flags[CAP];
    take(s, s->check, status, flags);
    for (int32_t v = 0; v < CAP; v++)
        FUZZ_CHECK(status[v] == s->snap_status[v] && flags[v] == s->snap_flags[v] &&
                   !memcmp(s->check[v], s->snap[v], s->page_bytes));
}

/* A forward of the model ended (commit or abort). */
static void forward_closed(session *s, uint64_t id)
{
    int i = open_index(s, id);
    FUZZ_CHECK(i >= 0);
    s->open[i] = 0;
    for (int32_t v = 0; v < CAP; v++)
        if (s->pending[v] == id)
            s->pending[v] = 0;
}

/* Forwards open in the model. */
static int open_count(const session *s)
{
    int n = 0;
    for (int i = 0; i < OPEN_MAX; i++)
        n += s->open[i] != 0;
    return n;
}

/* Whether the record presents its forward as issued, on an unchanged buffer. */
static int as_issued(const record *r)
{
    return r->t.forward && !memcmp(&r->t, &r->issued, sizeof r->t) &&
           !memcmp(r->slots, r->opened, sizeof r->slots);
}

/* Whether a new forward may open: fewer than the library's 64 open, and
 * the ring entry the next id takes (256 back) not still open. */
static int can_open(const session *s)
{
    uint64_t next = s->last_forward + 1;
    return open_count(s) < OPEN_MAX && !(next > HISTORY && open_index(s, next - HISTORY) >= 0);
}

/* VERIFY record layer [rows tokens slots...]: opens a forward with a zero
 * ticket, else adds a layer to the record's forward. */
static ssm_status op_verify(session *s, fuzz_in *in)
{
    record *r = &s->rec[fuzz_u8(in) % RECORDS];
    int32_t layer = layer_of(in);
    int layer_ok = layer >= 0 && layer < LAYERS;
    int opening = r->t.context_id == 0 && r->t.forward == 0;
    int expect = -1; /* -1: the model cannot tell (a tampered ticket or buffer) */
    if (opening) {
        r->rows = fuzz_u8(in) % (ROWS + 1);
        r->tokens = fuzz_u8(in) % (TMAX + 2);
        for (int32_t i = 0; i < ROWS; i++)
            r->slots[i] = i < r->rows ? slot_of(in) : -1;
        expect = r->tokens >= 1 && r->tokens <= TMAX && layer_ok &&
                 rows_ok(s, r->rows, r->slots) && can_open(s);
    } else if (as_issued(r)) {
        int i = open_index(s, r->t.forward);
        expect = i >= 0 && layer_ok && !(s->layers_done[i] >> layer & 1);
    }
    ssm_batch b = {r->rows, r->tokens, r->slots, NULL};
    ssm_step_io io = {x, gate, beta, out};
    ssm_status status =
        ssm_verify(s->ctx, layer, &b, &weights[layer_ok ? layer : 0], &io, &r->t, NULL);
    FUZZ_CHECK(expect < 0 || (status == SSM_OK) == expect);
    if (status != SSM_OK)
        return status;
    if (opening) {
        FUZZ_CHECK(r->t.context_id != 0 && r->t.forward == s->last_forward + 1);
        FUZZ_CHECK(r->t.rows == r->rows && r->t.tokens == r->tokens);
        s->last_forward = r->t.forward;
        r->issued = r->t;
        memcpy(r->opened, r->slots, sizeof r->slots);
        int i = 0;
        while (i < OPEN_MAX && s->open[i])
            i++;
        FUZZ_CHECK(i < OPEN_MAX);
        s->open[i] = r->t.forward;
        s->layers_done[i] = 0;
        for (int32_t k = 0; k < r->rows; k++)
            if (r->slots[k] >= 0)
                s->pending[r->slots[k]] = r->t.forward;
    }
    int i = open_index(s, r->t.forward);
    FUZZ_CHECK(i >= 0 && !(s->layers_done[i] >> layer & 1));
    s->layers_done[i] |= 1u << layer;
    return status;
}

/* COMMIT record flags accepted...: accepted lengths 0 .. T + 1 (or NULL). */
static ssm_status op_commit(session *s, fuzz_in *in)
{
    record *r = &s->rec[fuzz_u8(in) % RECORDS];
    uint8_t how = fuzz_u8(in);
    int32_t accepted[ROWS];
    for (int32_t k = 0; k < ROWS; k++)
        accepted[k] = (int32_t)(fuzz_u8(in) % (TMAX + 2));
    const int32_t *acc = (how & 1) ? NULL : accepted;
    int expect = -1;
    if (as_issued(r)) {
        int i = open_index(s, r->t.forward);
        int live = 0; /* rows that are not padding: only they need a length */
        for (int32_t k = 0; k < r->rows; k++)
            live += r->slots[k] != -1;
        expect = i >= 0 && s->layers_done[i] == (1u << LAYERS) - 1 && (acc || live == 0);
        for (int32_t k = 0; expect > 0 && k < r->rows; k++)
            if (r->slots[k] != -1 && (accepted[k] < 1 || accepted[k] > r->tokens))
                expect = 0;
    }
    ssm_status status = ssm_commit(s->ctx, &r->t, acc, NULL);
    FUZZ_CHECK(expect < 0 || (status == SSM_OK) == expect);
    if (status != SSM_OK)
        return status;
    forward_closed(s, r->t.forward);
    FUZZ_CHECK(ssm_commit(s->ctx, &r->t, acc, NULL) == SSM_ERR_TICKET_REPEATED);
    return status;
}

/* ABORT record. */
static ssm_status op_abort(session *s, fuzz_in *in)
{
    record *r = &s->rec[fuzz_u8(in) % RECORDS];
    int expect = as_issued(r) ? open_index(s, r->t.forward) >= 0 : -1;
    ssm_status status = ssm_forward_abort(s->ctx, &r->t, NULL);
    FUZZ_CHECK(expect < 0 || (status == SSM_OK) == expect);
    if (status != SSM_OK)
        return status;
    forward_closed(s, r->t.forward);
    FUZZ_CHECK(ssm_forward_abort(s->ctx, &r->t, NULL) == SSM_ERR_TICKET_STALE);
    return status;
}

/* PREFILL layer rows max_row_tokens slots... lengths...: a length byte with
 * bit 7 set is negative (offsets that decrease), bit 6 of the count byte
 * starts the offsets at 1. */
static ssm_status op_prefill(session *s, fuzz_in *in)
{
    int32_t layer = layer_of(in);
    uint8_t count = fuzz_u8(in);
    int32_t rows = count % (ROWS + 1), max_row = (int32_t)(fuzz_u8(in) % 10) - 1;
    int32_t slots[ROWS], offsets[ROWS + 1];
    offsets[0] = (count & 0x40) ? 1 : 0;
    for (int32_t r = 0; r < rows; r++)
        slots[r] = slot_of(in);
    int offsets_ok = max_row >= 0 && (rows == 0 || offsets[0] == 0);
    for (int32_t r = 0; r < rows; r++) {
        uint8_t b = fuzz_u8(in);
        int32_t len = (b & 0x80) ? -(int32_t)(b & 7) : (int32_t)(b % 8);
        offsets[r + 1] = offsets[r] + len;
        offsets_ok &= len >= 0 && len <= max_row;
    }
    int expect = layer >= 0 && layer < LAYERS && rows_ok(s, rows, slots) && offsets_ok;
    ssm_prefill_batch b = {rows, slots, offsets, max_row, NULL, NULL};
    ssm_step_io io = {x, gate, beta, out};
    ssm_status status = ssm_prefill(s->ctx, layer, &b, &weights[expect ? layer : 0], &io, NULL);
    FUZZ_CHECK((status == SSM_OK) == expect);
    return status;
}

/* DECODE layer tokens rows slots...: tokens 1 with bit 7 clear, else 0 .. 2. */
static ssm_status op_decode(session *s, fuzz_in *in)
{
    int32_t layer = layer_of(in);
    uint8_t t = fuzz_u8(in);
    int32_t tokens = (t & 0x80) ? t % 3 : 1, rows = fuzz_u8(in) % (ROWS + 1), slots[ROWS];
    for (int32_t r = 0; r < rows; r++)
        slots[r] = slot_of(in);
    int expect = tokens == 1 && layer >= 0 && layer < LAYERS && rows_ok(s, rows, slots);
    ssm_batch b = {rows, tokens, slots, NULL};
    ssm_step_io io = {x, gate, beta, out};
    ssm_status status = ssm_decode(s->ctx, layer, &b, &weights[expect ? layer : 0], &io, NULL);
    FUZZ_CHECK((status == SSM_OK) == expect);
    return status;
}

/* Whether a slot can be exported, reset, released or copied now. */
static int slot_usable(const session *s, int32_t v)
{
    return v >= 0 && v < CAP && s->acquired[v] && !s->pending[v];
}

/* EXPORT slot: a page that inspects, imports back and re-exports the same. */
static ssm_status op_export(session *s, fuzz_in *in)
{
    int32_t v = slot_of(in);
    uint8_t *page = s->check[0], *again = s->check[1];
    ssm_status status = ssm_slot_export_page(s->ctx, v, page, s->page_bytes);
    FUZZ_CHECK((status == SSM_OK) == slot_usable(s, v));
    if (status != SSM_OK)
        return status;
    ssm_page_info info;
    FUZZ_CHECK(ssm_page_inspect(page, s->page_bytes, &info) == SSM_OK);
    FUZZ_CHECK(ssm_slot_import_page(s->ctx, v, page, s->page_bytes) == SSM_OK);
    FUZZ_CHECK(ssm_slot_export_page(s->ctx, v, again, s->page_bytes) == SSM_OK);
    FUZZ_CHECK(!memcmp(page, again, s->page_bytes));
    return status;
}

/* COPY src dst: dst's page becomes src's. */
static ssm_status op_copy(session *s, fuzz_in *in)
{
    int32_t src = slot_of(in), dst = slot_of(in);
    ssm_status status = ssm_slot_copy(s->ctx, src, dst, NULL);
    FUZZ_CHECK((status == SSM_OK) == (slot_usable(s, src) && slot_usable(s, dst)));
    if (status != SSM_OK)
        return status;
    FUZZ_CHECK(ssm_slot_export_page(s->ctx, src, s->check[0], s->page_bytes) == SSM_OK);
    FUZZ_CHECK(ssm_slot_export_page(s->ctx, dst, s->check[1], s->page_bytes) == SSM_OK);
    FUZZ_CHECK(!memcmp(s->check[0], s->check[1], s->page_bytes));
    return status;
}

/* TAMPER record field delta: changes a field of the presented ticket. */
static void op_tamper(session *s, fuzz_in *in)
{
    record *r = &s->rec[fuzz_u8(in) % RECORDS];
    uint8_t field = fuzz_u8(in) % 4;
    int32_t delta = (int8_t)fuzz_u8(in);
    if (field == 0)
        r->t.context_id ^= (uint64_t)(uint32_t)delta << 8;
    else if (field == 1)
        r->t.forward += (uint64_t)(int64_t)delta;
    else if (field == 2)
        r->t.rows += delta;
    else
        r->t.tokens += delta;
}

/* STATUS: the context's report agrees with the slots' flags. */
static void op_status(session *s)
{
    ssm_ctx_report report;
    FUZZ_CHECK(ssm_ctx_status(s->ctx, &report) == SSM_OK);
    uint32_t all = 0;
    int32_t flagged = 0, first = -1;
    for (int32_t v = 0; v < CAP; v++) {
        uint32_t f = 0;
        if (ssm_slot_flags(s->ctx, v, &f) == SSM_OK && f) {
            all |= f;
            flagged++;
            if (first < 0)
                first = v;
        }
    }
    FUZZ_CHECK(report.flags == all && report.flagged_slots == flagged &&
               report.first_flagged == first);
}

/* Runs one op; returns 0 when the input is used up. */
static int run_op(session *s, fuzz_in *in)
{
    if (in->n == 0)
        return 0;
    uint8_t op = fuzz_u8(in) % 15;
    /* The snapshot is taken again only when the slots may have changed
     * since: after a call that succeeded. After a failed call the slots
     * were just checked equal to it, and the ops that call nothing (8, 9,
     * 10, 13) change no slot. */
    if (!s->snap_valid)
        take(s, s->snap, s->snap_status, s->snap_flags);
    s->snap_valid = 1;
    ssm_status status = SSM_OK;
    int32_t v;
    switch (op) {
    case 0: /* ACQUIRE */
        status = ssm_slot_acquire(s->ctx, &v);
        FUZZ_CHECK((status == SSM_OK) == (s->used < CAP));
        if (status == SSM_OK) {
            FUZZ_CHECK(v >= 0 && v < CAP && !s->acquired[v]);
            s->acquired[v] = 1;
            s->used++;
        }
        break;
    case 1: /* RELEASE slot */
    case 2: /* RESET slot */
        v = slot_of(in);
        status = op == 1 ? ssm_slot_release(s->ctx, v) : ssm_slot_reset(s->ctx, v, NULL);
        FUZZ_CHECK((status == SSM_OK) == slot_usable(s, v));
        if (status == SSM_OK && op == 1) {
            s->acquired[v] = 0;
            s->used--;
        }
        break;
    case 3: status = op_prefill(s, in); break;
    case 4: status = op_decode(s, in); break;
    case 5: status = op_verify(s, in); break;
    case 6: status = op_commit(s, in); break;
    case 7: status = op_abort(s, in); break;
    case 8: op_tamper(s, in); break;
    case 9: /* CLEAR record: a zero ticket for the next verify */
        memset(&s->rec[fuzz_u8(in) % RECORDS], 0, sizeof(record));
        break;
    case 10: { /* MUTATE record row slot: the buffer changes under the forward */
        record *r = &s->rec[fuzz_u8(in) % RECORDS];
        uint8_t row = fuzz_u8(in) % ROWS;
        r->slots[row] = slot_of(in);
        break;
    }
    case 11: status = op_export(s, in); break;
    case 12: status = op_copy(s, in); break;
    case 13: { /* NAN token channel: a non-finite input for later steps */
        size_t at = (size_t)(fuzz_u8(in) % TOKENS) * 16 + fuzz_u8(in) % 16;
        if (s->ad == SSM_DTYPE_F32)
            x[at] = NAN;
        else
            ((uint16_t *)x)[at] = 0x7FC0;
        break;
    }
    default: op_status(s); break;
    }
    FUZZ_CHECK(status != SSM_ERR_INTERNAL);
    if (status != SSM_OK) {
        FUZZ_CHECK(ssm_last_error()[0] != '\0');
        check_unchanged(s);
    } else if (op != 8 && op != 9 && op != 10 && op != 13) {
        s->snap_valid = 0;
    }
    ssm_pool_stats pool;
    ssm_pool_query(s->ctx, &pool);
    FUZZ_CHECK(pool.capacity == CAP && pool.used == s->used && pool.free == CAP - s->used);
    return 1;
}

/* One program: a fresh context, up to OPS ops, every invariant checked. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    setup();
    fuzz_in in = {data, size};
    uint8_t choice = fuzz_u8(&in);
    session *s = calloc(1, sizeof *s);
    FUZZ_CHECK(s != NULL);
    s->m = (ssm_model_dims){(choice & 4) ? SSM_MODEL_KDA : SSM_MODEL_GDN, LAYERS, 1, 2, 4, 4, 3,
                            0, 0.0f};
    s->ad = (choice & 16) ? SSM_DTYPE_BF16 : SSM_DTYPE_F32;
    s->ctx = fuzz_ctx(&s->m, fuzz_modes[choice % 3], (choice & 8) ? SSM_DTYPE_BF16 : SSM_DTYPE_F32,
                      s->ad, CAP, DRAFTS, NULL);
    /* D = 16 channels, gate width <= 8, HV = 2, HV * V = 8: within the arrays. */
    fill(x, s->ad, TOKENS * 16, 1);
    fill(gate, s->ad, TOKENS * 8, 2);
    fill(beta, s->ad, TOKENS * 2, 3);
    s->page_bytes = ssm_page_bytes(s->ctx);
    for (int32_t v = 0; v < CAP; v++) {
        s->snap[v] = malloc(s->page_bytes);
        s->check[v] = malloc(s->page_bytes);
        FUZZ_CHECK(s->snap[v] && s->check[v]);
    }
    for (int op = 0; op < OPS && run_op(s, &in); op++)
        ;
    ssm_ctx_destroy(s->ctx);
    for (int32_t v = 0; v < CAP; v++) {
        free(s->snap[v]);
        free(s->check[v]);
    }
    free(s);
    return 0;
}
