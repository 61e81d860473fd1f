/* The simulated serving session (see session.h).
 *
 * Each loop iteration is one forward of the engine: free slots go to waiting
 * requests; then, layer by layer, one varlen prefill batch carries the next
 * prompt chunk of every request still in its prompt, and one decode (no
 * drafts) or verify batch carries a round of every request past its prompt;
 * after the last layer one commit keeps each round's accepted tokens. Every
 * row's outputs are compared with the reference shadow right after the call
 * (on a CUDA context, once they are downloaded), and finished requests hand
 * their slot back. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/reference.h"
#include "cli.h"
#include "progress.h"
#include "session_private.h"

static double now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int request_done(const session *s, const request *req)
{
    return req->committed >= req->prompt_tokens &&
           req->rounds >= s->workload.decode_steps;
}

/* ------------------------------------------------------------- set up */

/* calloc that remembers a failure, so set-up checks once at the end. */
static void *take(int *ok, size_t count, size_t size)
{
    void *p = calloc(count ? count : 1, size ? size : 1);
    if (!p)
        *ok = 0;
    return p;
}

static void take_rows(int *ok, batch_rows *b, int32_t rows)
{
    b->rows = take(ok, (size_t)rows, sizeof *b->rows);
    b->slots = take(ok, (size_t)rows, sizeof *b->slots);
    b->offsets = take(ok, (size_t)rows + 1, sizeof *b->offsets);
    b->accepted = take(ok, (size_t)rows, sizeof *b->accepted);
}

static void free_rows(batch_rows *b)
{
    free(b->rows);
    free(b->slots);
    free(b->offsets);
    free(b->accepted);
}

static void free_layer_buffers(void **buffers, int32_t layers)
{
    for (int32_t l = 0; buffers && l < layers; l++)
        free(buffers[l]);
    free(buffers);
}

static void session_free(session *s)
{
    session_device_close(&s->device, s->model.layers);
    synth_weights_destroy(&s->weights);
    shadow_destroy(s->shadow);
    free(s->requests);
    free(s->accepted_history);
    free(s->lane_request);
    free_rows(&s->prefill);
    free_rows(&s->round);
    free(s->x);
    free(s->gate);
    free(s->beta);
    free(s->out);
    free_layer_buffers(s->export_window, s->model.layers);
    free_layer_buffers(s->export_state, s->model.layers);
    free(s->lane_outputs);
    free(s->stage_x);
    free(s->stage_gate);
    free(s->stage_beta);
    free(s->stage_state);
    free(s->stage_window);
    free(s->one_x);
    free(s->one_gate);
    free(s->one_beta);
}

static int allocate_buffers(session *s, int dumping)
{
    const ssm_model_dims *m = &s->model;
    const workload *w = &s->workload;
    const size_t as = ssm_dtype_size(s->act), ss = ssm_dtype_size(s->state_dtype);
    const size_t d = (size_t)ssm_conv_channels(m), gw = (size_t)ssm_gate_width(m);
    const size_t hv = (size_t)m->value_heads, out_width = hv * (size_t)m->value_dim;
    const size_t window = (size_t)ssm_ref_window_elems(m), state = (size_t)ssm_ref_state_elems(m);
    const int64_t prefill_tokens = (int64_t)s->lanes * w->prefill_chunk;
    const int64_t round_tokens = ((int64_t)s->lanes + 1) * s->tokens_per_row;
    const size_t tokens = (size_t)(prefill_tokens > round_tokens ? prefill_tokens : round_tokens);
    int ok = 1;
    s->io_tokens = tokens;

    s->requests = take(&ok, (size_t)w->requests, sizeof *s->requests);
    s->accepted_history = take(&ok, (size_t)w->requests * (size_t)w->decode_steps, sizeof(int32_t));
    s->lane_request = take(&ok, (size_t)s->lanes, sizeof *s->lane_request);
    take_rows(&ok, &s->prefill, s->lanes);
    take_rows(&ok, &s->round, s->lanes + 1); /* + a padding row */
    s->x = take(&ok, tokens * d, as);
    s->gate = take(&ok, tokens * gw, as);
    s->beta = take(&ok, tokens * hv, as);
    s->out = take(&ok, tokens * out_width, as);
    s->export_window = take(&ok, (size_t)m->layers, sizeof(void *));
    s->export_state = take(&ok, (size_t)m->layers, sizeof(void *));
    for (int32_t l = 0; ok && l < m->layers; l++) {
        s->export_window[l] = take(&ok, window, as);
        s->export_state[l] = take(&ok, state, ss);
    }
    if (dumping) {
        const size_t n = (size_t)s->max_committed;
        s->lane_outputs = take(&ok, (size_t)s->lanes * (size_t)m->layers * n * out_width,
                               sizeof(float));
        s->stage_x = take(&ok, n * d, sizeof(float));
        s->stage_gate = take(&ok, n * gw, sizeof(float));
        s->stage_beta = take(&ok, n * hv, sizeof(float));
        s->stage_state = take(&ok, state, sizeof(float));
        s->stage_window = take(&ok, window, sizeof(float));
        s->one_x = take(&ok, d, as);
        s->one_gate = take(&ok, gw, as);
        s->one_beta = take(&ok, hv, as);
    }
    if (ok && shadow_create(m, s->state_dtype, s->act, s->lanes,
                            w->prefill_chunk > s->tokens_per_row ? w->prefill_chunk
                                                                 : s->tokens_per_row,
                            bound_relation_of(s->config->device.type,
                                              s->config->prefill_precision),
                            &s->shadow) != 0)
        ok = 0;
    if (ok && synth_weights_create(m, w->seed, &s->weights) != 0)
        ok = 0;
    return ok ? CLI_EXIT_OK : cli_fail("out of memory for the session's buffers");
}

static int session_init(session *s, ssm_ctx *ctx, const session_options *opt,
                        session_summary *sum)
{
    const ssm_config *c = ssm_ctx_config(ctx);
    ssm_plan plan;
    if (ssm_ctx_plan(ctx, &plan) != SSM_OK)
        return cli_fail_library();
    if (!opt->workload)
        return cli_fail("internal error: a session without a workload");
    s->ctx = ctx;
    s->config = c;
    s->workload = *opt->workload;
    s->model = c->model;
    s->act = c->activation_dtype;
    s->state_dtype = c->state_dtype;
    s->lanes = c->max_requests < plan.capacity ? c->max_requests : plan.capacity;
    s->tokens_per_row = 1 + c->max_draft_tokens;
    s->max_committed = (int64_t)s->workload.prompt_max +
                       (int64_t)s->workload.decode_steps * s->tokens_per_row;
    s->sum = sum;
    s->observer = opt->observer;
    sum->requests = s->workload.requests;
    sum->lanes = s->lanes;
    sum->tokens_per_row = s->tokens_per_row;

    int exit_code = allocate_buffers(s, opt->dump_dir != NULL);
    if (exit_code != CLI_EXIT_OK)
        return exit_code;
    const session_host_buffers host = {
        .model = &s->model,
        .act = s->act,
        .state_dtype = s->state_dtype,
        .tokens = s->io_tokens,
        .prefill_rows = s->lanes,
        .round_rows = s->lanes + 1, /* + a padding row */
        .x = s->x,
        .gate = s->gate,
        .beta = s->beta,
        .out = s->out,
        .prefill_slots = s->prefill.slots,
        .prefill_offsets = s->prefill.offsets,
        .round_slots = s->round.slots,
        .accepted = s->round.accepted,
        .weights = &s->weights,
        .export_window = s->export_window,
        .export_state = s->export_state,
    };
    if ((exit_code = session_device_open(&s->device, c->device, &host)) != CLI_EXIT_OK)
        return exit_code;
    sum->bound = shadow_bound_text(s->shadow);
    for (int32_t i = 0; i < s->workload.requests; i++) {
        request *req = &s->requests[i];
        req->id = i;
        req->prompt_tokens = synth_prompt_length(&s->workload, i);
        req->slot = -1;
        req->lane = -1;
        req->accepted = s->accepted_history + (int64_t)i * s->workload.decode_steps;
    }
    if (!opt->dump_dir)
        return CLI_EXIT_OK;
    if ((exit_code = dump_open(opt->dump_dir, c, &s->workload, &s->dump)) != CLI_EXIT_OK)
        return exit_code;
    for (int32_t l = 0; l < s->model.layers; l++)
        if ((exit_code = dump_layer_weights(s->dump, l, &s->weights.layer[l])) != CLI_EXIT_OK)
            return exit_code;
    return CLI_EXIT_OK;
}

/* ------------------------------------------------------------- checks */

/* Counts a failed comparison and keeps the first one's description. */
static void note_violation(session *s, const char *what, const request *req, int32_t layer,
                           bound_result r)
{
    session_summary *sum = s->sum;
    if (sum->violations++ == 0)
        snprintf(sum->first_violation, sizeof sum->first_violation,
                 "%s of request %d, layer %d, after %d committed tokens: relative RMS %.3g",
                 what, req->id, layer, req->committed, r.rel_rms);
}

/* One block into its layer's outputs (shadow_step): a block fails at once
 * only on a non-finite value; the bound is each layer's whole output,
 * checked when the session closes (check_outputs). */
static void record_output(session *s, const char *what, const request *req, int32_t layer,
                          bound_result r)
{
    s->sum->output_blocks++;
    if (r.max_ulps > s->sum->max_ulps)
        s->sum->max_ulps = r.max_ulps;
    if (!r.pass) {
        s->sum->max_rel_error = NAN;
        note_violation(s, what, req, layer, r);
    }
}

/* Checks every real row of a batch the library just ran for `layer`, shows
 * it to the observer, and keeps the committed outputs when dumping. */
static void check_rows(session *s, const batch_rows *b, int32_t layer, session_step_kind kind)
{
    static const char *const what[] = {"prefill", "decode", "verify"};
    const ssm_model_dims *m = &s->model;
    const int64_t out_width = (int64_t)m->value_heads * m->value_dim;
    const ssm_step_io io = {s->x, s->gate, s->beta, s->out};
    for (int32_t r = 0; r < b->count; r++) {
        const batch_row *row = &b->rows[r];
        if (!row->req)
            continue;
        ssm_step_io row_io = shadow_io_at(m, s->act, &io, b->offsets[r]);
        record_output(s, what[kind], row->req, layer,
                      shadow_step(s->shadow, row->req->lane, layer, &s->weights.layer[layer],
                                  &row_io, row->tokens, row->keep, kind == SESSION_PREFILL));
        if (s->observer && s->observer->output) {
            const session_block block = {row->req->id, layer,    kind,
                                         row->tokens,  row->keep, row->req->committed,
                                         b->count,     row_io.out};
            s->observer->output(s->observer->user, &block);
        }
        if (!s->lane_outputs)
            continue;
        float *kept = s->lane_outputs +
                      (((int64_t)row->req->lane * m->layers + layer) * s->max_committed +
                       row->req->committed) * out_width;
        for (int64_t i = 0; i < row->keep * out_width; i++)
            kept[i] = ssm_ref_load(row_io.out, s->act, i);
    }
}

/* ------------------------------------------------------------- forward */

static int admit_requests(session *s)
{
    for (int32_t lane = 0; lane < s->lanes; lane++) {
        if (s->lane_request[lane] || s->next_request >= s->sum->requests)
            continue;
        request *req = &s->requests[s->next_request++];
        if (ssm_slot_acquire(s->ctx, &req->slot) != SSM_OK)
            return cli_fail_library();
        req->lane = lane;
        s->lane_request[lane] = req;
        shadow_reset(s->shadow, lane);
    }
    return CLI_EXIT_OK;
}

static void add_row(batch_rows *b, request *req, int32_t tokens, int32_t keep)
{
    b->rows[b->count] = (batch_row){req, tokens, keep};
    b->slots[b->count] = req ? req->slot : -1;
    b->accepted[b->count] = keep;
    b->offsets[b->count + 1] = b->offsets[b->count] + tokens;
    b->count++;
}

/* Puts a padding row (slot -1) before row `at`. All rows of a round have
 * the same length, so the token offsets stay as they are, one row longer. */
static void insert_padding_row(batch_rows *b, int32_t at, int32_t tokens)
{
    add_row(b, NULL, tokens, 1);
    for (int32_t r = b->count - 1; r > at; r--) {
        b->rows[r] = b->rows[r - 1];
        b->slots[r] = b->slots[r - 1];
        b->accepted[r] = b->accepted[r - 1];
    }
    b->rows[at] = (batch_row){NULL, tokens, 1};
    b->slots[at] = -1;
    b->accepted[at] = 1;
}

/* Sorts the active requests into this forward's prefill and round rows; a
 * padding row joins every third round batch, at a moving position. */
static void plan_forward(session *s)
{
    const workload *w = &s->workload;
    const int32_t t = s->tokens_per_row;
    s->prefill.count = s->round.count = 0;
    for (int32_t lane = 0; lane < s->lanes; lane++) {
        request *req = s->lane_request[lane];
        if (!req || request_done(s, req))
            continue;
        if (req->committed < req->prompt_tokens) {
            int32_t left = req->prompt_tokens - req->committed;
            int32_t chunk = left < w->prefill_chunk ? left : w->prefill_chunk;
            add_row(&s->prefill, req, chunk, chunk);
        } else {
            int32_t accepted = synth_accepted_length(w, req->id, req->rounds, t);
            add_row(&s->round, req, t, accepted);
        }
    }
    if (s->round.count > 0 && s->sum->forwards % 3 == 1)
        insert_padding_row(&s->round, (int32_t)((s->sum->forwards / 3) % (s->round.count + 1)),
                           t);
}

/* Writes every row's inputs for `layer` (padding rows get filler). */
static void fill_inputs(session *s, const batch_rows *b, int32_t layer)
{
    const synth_inputs dst = {s->x, s->gate, s->beta};
    for (int32_t r = 0; r < b->count; r++) {
        const request *req = b->rows[r].req;
        for (int32_t t = 0; t < b->rows[r].tokens; t++)
            synth_token_inputs(&s->model, s->act, s->workload.seed, req ? req->id : -1,
                               (req ? req->committed : 0) + t, layer, &dst, b->offsets[r] + t);
    }
}

/* Row bytes of the io buffers, per token. */
static size_t x_bytes(const session *s)
{
    return (size_t)ssm_conv_channels(&s->model) * ssm_dtype_size(s->act);
}

static size_t gate_bytes(const session *s)
{
    return (size_t)ssm_gate_width(&s->model) * ssm_dtype_size(s->act);
}

static size_t beta_bytes(const session *s)
{
    return (size_t)s->model.value_heads * ssm_dtype_size(s->act);
}

static size_t out_bytes(const session *s)
{
    return (size_t)s->model.value_heads * s->model.value_dim * ssm_dtype_size(s->act);
}

/* The inputs of a batch's `tokens` tokens and its `rows` slots to the
 * device (nothing on the CPU). */
static int upload_batch(session *s, const batch_rows *b, int32_t *device_slots, int64_t tokens)
{
    const session_device *d = &s->device;
    const size_t n = (size_t)tokens;
    int exit_code = session_device_upload(d, d->x, s->x, n * x_bytes(s));
    if (exit_code == CLI_EXIT_OK)
        exit_code = session_device_upload(d, d->gate, s->gate, n * gate_bytes(s));
    if (exit_code == CLI_EXIT_OK)
        exit_code = session_device_upload(d, d->beta, s->beta, n * beta_bytes(s));
    if (exit_code == CLI_EXIT_OK)
        exit_code = session_device_upload(d, device_slots, b->slots,
                                          (size_t)b->count * sizeof(int32_t));
    return exit_code;
}

/* Waits for a step, counts its time, and brings its outputs to the host. */
static int finish_call(session *s, ssm_status status, double start, int64_t tokens)
{
    if (status != SSM_OK)
        return cli_fail_library();
    int exit_code = session_device_sync(&s->device);
    s->sum->library_seconds += now_seconds() - start;
    if (exit_code == CLI_EXIT_OK)
        exit_code = session_device_download(&s->device, s->out, s->device.out,
                                            (size_t)tokens * out_bytes(s));
    return exit_code;
}

static int run_layer(session *s, int32_t layer, ssm_ticket *ticket)
{
    const session_device *d = &s->device;
    const ssm_layer_weights *w = &d->weights[layer];
    const ssm_step_io io = {d->x, d->gate, d->beta, d->out};
    void *stream = d->dev.stream;
    int exit_code;
    double start;

    if (s->prefill.count > 0) {
        int32_t longest = 0;
        for (int32_t r = 0; r < s->prefill.count; r++)
            if (s->prefill.rows[r].tokens > longest)
                longest = s->prefill.rows[r].tokens;
        const int64_t tokens = s->prefill.offsets[s->prefill.count];
        const ssm_prefill_batch batch = {.rows = s->prefill.count,
                                         .slots = d->prefill_slots,
                                         .token_offsets = d->prefill_offsets,
                                         .max_row_tokens = longest,
                                         .slots_host = s->prefill.slots,
                                         .token_offsets_host = s->prefill.offsets};
        fill_inputs(s, &s->prefill, layer);
        exit_code = upload_batch(s, &s->prefill, d->prefill_slots, tokens);
        if (exit_code == CLI_EXIT_OK)
            exit_code = session_device_upload(d, d->prefill_offsets, s->prefill.offsets,
                                              ((size_t)s->prefill.count + 1) * sizeof(int32_t));
        if (exit_code != CLI_EXIT_OK)
            return exit_code;
        start = now_seconds();
        exit_code = finish_call(s, ssm_prefill(s->ctx, layer, &batch, w, &io, stream), start,
                                tokens);
        if (exit_code != CLI_EXIT_OK)
            return exit_code;
        check_rows(s, &s->prefill, layer, SESSION_PREFILL);
    }
    if (s->round.count > 0) {
        const int64_t tokens = (int64_t)s->round.count * s->tokens_per_row;
        const ssm_batch batch = {.rows = s->round.count, .tokens = s->tokens_per_row,
                                 .slots = d->round_slots, .slots_host = s->round.slots};
        fill_inputs(s, &s->round, layer);
        if ((exit_code = upload_batch(s, &s->round, d->round_slots, tokens)) != CLI_EXIT_OK)
            return exit_code;
        start = now_seconds();
        ssm_status status = s->tokens_per_row == 1
                                ? ssm_decode(s->ctx, layer, &batch, w, &io, stream)
                                : ssm_verify(s->ctx, layer, &batch, w, &io, ticket, stream);
        if ((exit_code = finish_call(s, status, start, tokens)) != CLI_EXIT_OK)
            return exit_code;
        check_rows(s, &s->round, layer,
                   s->tokens_per_row == 1 ? SESSION_DECODE : SESSION_VERIFY);
    }
    return CLI_EXIT_OK;
}

/* Moves every row's request forward by the tokens it committed. */
static void apply_forward(session *s)
{
    session_summary *sum = s->sum;
    for (int32_t r = 0; r < s->prefill.count; r++) {
        s->prefill.rows[r].req->committed += s->prefill.rows[r].tokens;
        sum->prefill_tokens += s->prefill.rows[r].tokens;
    }
    for (int32_t r = 0; r < s->round.count; r++) {
        const batch_row *row = &s->round.rows[r];
        if (!row->req) {
            sum->padding_rows++;
            continue;
        }
        row->req->accepted[row->req->rounds++] = row->keep;
        row->req->committed += row->keep;
        sum->rounds++;
        sum->round_tokens += row->tokens;
        sum->accepted_tokens += row->keep;
    }
    sum->forwards++;
}

static int run_forward(session *s)
{
    ssm_ticket ticket = SSM_TICKET_INIT;
    int exit_code = admit_requests(s);
    if (exit_code != CLI_EXIT_OK)
        return exit_code;
    plan_forward(s);
    for (int32_t layer = 0; layer < s->model.layers; layer++)
        if ((exit_code = run_layer(s, layer, &ticket)) != CLI_EXIT_OK)
            return exit_code;
    if (s->round.count > 0 && s->tokens_per_row > 1) {
        const session_device *d = &s->device;
        exit_code = session_device_upload(d, d->accepted, s->round.accepted,
                                          (size_t)s->round.count * sizeof(int32_t));
        if (exit_code != CLI_EXIT_OK)
            return exit_code;
        double start = now_seconds();
        if (ssm_commit(s->ctx, &ticket, d->accepted, d->dev.stream) != SSM_OK)
            return cli_fail_library();
        exit_code = session_device_sync(d);
        s->sum->library_seconds += now_seconds() - start;
        if (exit_code != CLI_EXIT_OK)
            return exit_code;
    }
    apply_forward(s);
    return CLI_EXIT_OK;
}

/* ------------------------------------------------------------- finishing */

static void widen(float *dst, const void *src, ssm_dtype t, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        dst[i] = ssm_ref_load(src, t, i);
}

/* Writes a finished request: its committed inputs (regenerated: they are a
 * function of the seed), the outputs kept by check_rows, and the exported
 * final state of every layer. */
static int dump_finished(session *s, const request *req)
{
    const ssm_model_dims *m = &s->model;
    const int64_t d = ssm_conv_channels(m), gw = ssm_gate_width(m), hv = m->value_heads;
    const int64_t out_width = hv * m->value_dim, n = req->committed;
    const synth_inputs one = {s->one_x, s->one_gate, s->one_beta};
    const dump_request_info info = {req->id, req->slot, req->prompt_tokens, req->committed,
                                    req->rounds, req->accepted};
    int exit_code = dump_request_begin(s->dump, &info);

    for (int32_t l = 0; exit_code == CLI_EXIT_OK && l < m->layers; l++) {
        for (int64_t t = 0; t < n; t++) {
            synth_token_inputs(m, s->act, s->workload.seed, req->id, t, l, &one, 0);
            widen(s->stage_x + t * d, s->one_x, s->act, d);
            widen(s->stage_gate + t * gw, s->one_gate, s->act, gw);
            widen(s->stage_beta + t * hv, s->one_beta, s->act, hv);
        }
        widen(s->stage_state, s->export_state[l], s->state_dtype, ssm_ref_state_elems(m));
        widen(s->stage_window, s->export_window[l], s->act, ssm_ref_window_elems(m));
        const dump_layer_arrays arrays = {
            l, n, s->stage_x, s->stage_gate, s->stage_beta,
            s->lane_outputs + ((int64_t)req->lane * m->layers + l) * s->max_committed * out_width,
            s->stage_state, s->stage_window,
        };
        exit_code = dump_request_layer(s->dump, &arrays);
    }
    return exit_code == CLI_EXIT_OK ? dump_request_end(s->dump) : exit_code;
}

/* Exports the final state of a finished request, checks it against the
 * shadow, dumps it, and releases the slot for the next request. */
static int finish_request(session *s, request *req)
{
    const session_device *d = &s->device;
    ssm_status status = ssm_slot_export_canonical(s->ctx, req->slot, d->export_window,
                                                  d->export_state, d->dev.stream);
    if (status == SSM_ERR_UNSUPPORTED && !s->dump) {
        /* a mode without export: nothing to compare, the outputs were checked */
    } else if (status != SSM_OK) {
        return cli_fail_library();
    } else {
        const ssm_model_dims *m = &s->model;
        for (int32_t l = 0; l < m->layers; l++) {
            int exit_code = session_device_download(
                d, s->export_window[l], d->export_window[l],
                (size_t)ssm_ref_window_elems(m) * ssm_dtype_size(s->act));
            if (exit_code == CLI_EXIT_OK)
                exit_code = session_device_download(
                    d, s->export_state[l], d->export_state[l],
                    (size_t)ssm_ref_state_elems(m) * ssm_dtype_size(s->state_dtype));
            if (exit_code != CLI_EXIT_OK)
                return exit_code;
        }
        for (int32_t l = 0; l < s->model.layers; l++) {
            bound_result r = shadow_compare_canonical(s->shadow, req->lane, l,
                                                      s->export_window[l], s->export_state[l]);
            s->sum->final_states++;
            bound_track_max(&s->sum->max_state_rel_error, r.rel_rms);
            if (!r.pass)
                note_violation(s, "final state (or conv window)", req, l, r);
            if (s->observer && s->observer->final_state)
                s->observer->final_state(s->observer->user, req->id, l, s->export_window[l],
                                         s->export_state[l]);
        }
        int exit_code = s->dump ? dump_finished(s, req) : CLI_EXIT_OK;
        if (exit_code != CLI_EXIT_OK)
            return exit_code;
    }
    if (ssm_slot_release(s->ctx, req->slot) != SSM_OK)
        return cli_fail_library();
    s->lane_request[req->lane] = NULL;
    req->slot = -1;
    s->finished++;
    return CLI_EXIT_OK;
}

static int finish_requests(session *s)
{
    for (int32_t lane = 0; lane < s->lanes; lane++) {
        request *req = s->lane_request[lane];
        if (req && request_done(s, req)) {
            int exit_code = finish_request(s, req);
            if (exit_code != CLI_EXIT_OK)
                return exit_code;
        }
    }
    return CLI_EXIT_OK;
}

/* ------------------------------------------------------------- the run */

int session_passed(const session_summary *s)
{
    return s->violations == 0 && s->status_flags == 0 && !isnan(s->max_rel_error);
}

int session_open(ssm_ctx *ctx, const session_options *opt, session_summary *out,
                 session **result)
{
    double start = now_seconds();
    memset(out, 0, sizeof *out);
    session *s = calloc(1, sizeof *s);
    if (!s)
        return cli_fail("out of memory for the session");
    int exit_code = session_init(s, ctx, opt, out);
    if (exit_code != CLI_EXIT_OK) {
        dump_close(s->dump, 0);
        session_free(s);
        free(s);
        return exit_code;
    }
    out->wall_seconds += now_seconds() - start;
    *result = s;
    return CLI_EXIT_OK;
}

int session_forward(session *s)
{
    double start = now_seconds();
    int exit_code = run_forward(s);
    if (exit_code == CLI_EXIT_OK)
        exit_code = finish_requests(s);
    s->sum->wall_seconds += now_seconds() - start;
    return exit_code;
}

int32_t session_finished(const session *s)
{
    return s->finished;
}

/* Each layer's outputs over the session, as one tensor, against the bound. */
static void check_outputs(session *s)
{
    session_summary *sum = s->sum;
    for (int32_t l = 0; l < s->model.layers; l++) {
        bound_result r = shadow_outputs(s->shadow, l);
        bound_track_max(&sum->max_rel_error, r.rel_rms);
        if (!r.pass && sum->violations++ == 0)
            snprintf(sum->first_violation, sizeof sum->first_violation,
                     "outputs of layer %d over the session: relative RMS %.3g", l, r.rel_rms);
    }
}

int session_close(session *s, int exit_code)
{
    double start = now_seconds();
    session_summary *out = s->sum;
    if (exit_code == CLI_EXIT_OK)
        check_outputs(s);
    ssm_ctx_report report;
    if (exit_code == CLI_EXIT_OK && ssm_ctx_status(s->ctx, &report) != SSM_OK)
        exit_code = cli_fail_library();
    else if (exit_code == CLI_EXIT_OK)
        out->status_flags = report.flags;
    int dump_exit = dump_close(s->dump, exit_code == CLI_EXIT_OK);
    if (exit_code == CLI_EXIT_OK)
        exit_code = dump_exit;
    session_free(s);
    free(s);
    out->wall_seconds += now_seconds() - start;
    return exit_code;
}

int session_run(ssm_ctx *ctx, const session_options *opt, session_summary *out)
{
    session *s = NULL;
    int exit_code = session_open(ctx, opt, out, &s);
    if (exit_code != CLI_EXIT_OK)
        return exit_code;
    if (opt->load_dir)
        exit_code = session_load(s, opt->load_dir);
    progress bar;
    progress_begin(&bar, opt->show_progress, out->requests, "requests");
    while (exit_code == CLI_EXIT_OK && session_finished(s) < out->requests &&
           !(opt->stop_after > 0 && out->forwards >= opt->stop_after)) {
        exit_code = session_forward(s);
        progress_update(&bar, session_finished(s));
    }
    progress_end(&bar);
    if (exit_code == CLI_EXIT_OK && opt->save_dir)
        exit_code = session_save(s, opt->save_dir);
    return session_close(s, exit_code);
}
