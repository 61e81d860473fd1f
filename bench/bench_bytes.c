/* The bytes a measurement had to move: docs/modes.md's table of the bytes
 * each operation moves made exact, one function per mode. Every formula is
 * per request and per layer, averaged over replay's fold period, and counts
 * the matrix state S and the mode's history records; record sizes come from
 * the functions the plugins size their records with (kernels/record.h,
 * kernels/replay.h). What every mode moves alike (inputs, outputs, conv
 * window) is bench_io_bytes().
 * docs/bench.md states the same formulas. */
#include <math.h>
#include <string.h>

#include "kernels/record.h"
#include "kernels/replay.h"
#include "bench.h"

uint64_t bench_state_bytes(const bench_shape *s)
{
    return (uint64_t)s->model.value_heads * (uint64_t)s->model.value_dim *
           (uint64_t)s->model.key_dim * ssm_dtype_size(s->state_dtype);
}

int32_t bench_fold_period(int32_t history, int32_t tokens, int32_t accepted)
{
    if (accepted < 1 || history < 2 * tokens)
        return 1;
    /* After a fold n = 0; round j starts with n = j * accepted and folds
     * first when ssm_replay_folds(n, tokens, history): n + 2 tokens > history. */
    return (history - 2 * tokens) / accepted + 1;
}

/* The sizes the formulas read, per request and layer. */
typedef struct unit_sizes {
    double state;       /* S */
    double record;      /* R: a token record (compact's; replay's raw part) */
    double ring_read;   /* replay: what the outputs read of one committed record */
    double ring_write;  /* replay: what a step writes per new record */
    int32_t tokens;     /* T of a round */
    int32_t history;    /* L */
} unit_sizes;

/* native: decode reads and writes S in place; a round reads S and writes a
 * snapshot per token; commit only picks the current snapshot. */
static double native_bytes(const unit_sizes *u, bench_op op)
{
    if (op == BENCH_OP_DECODE)
        return 2 * u->state;
    return u->state + u->tokens * u->state;
}

/* compact: decode fuses verify and commit (read S, write S); a round's
 * verify reads S and writes T records, its commit reads S and the a
 * accepted records and writes S once. Where the next step applies the
 * commit (commit_in_step, the GPU), the verify reads S and the a records
 * of the round before, writes S once and its T records, and the commit
 * moves no state. */
static double compact_bytes(const unit_sizes *u, bench_op op, int32_t accepted,
                            int commit_in_step)
{
    if (op == BENCH_OP_DECODE)
        return 2 * u->state;
    if (commit_in_step)
        return 2 * u->state + (u->tokens + accepted) * u->record;
    return u->state + u->tokens * u->record + 2 * u->state + accepted * u->record;
}

/* replay: each step reads the checkpoint and the n committed records and
 * writes its own; commit moves a cursor (nothing counted). Once per fold
 * period the fold reads the n raw records, reads and writes the checkpoint.
 * A decode is a round of one token with one accepted; a decode of at most
 * [replay] fold_rows rows folds every step: it reads and writes the
 * checkpoint and writes its record, as a native decode plus the record. */
static double replay_bytes(const unit_sizes *u, bench_op op, int32_t accepted, int folds_every_step)
{
    if (op == BENCH_OP_DECODE && folds_every_step)
        return 2 * u->state + u->record;
    int32_t tokens = op == BENCH_OP_DECODE ? 1 : u->tokens;
    int32_t kept = op == BENCH_OP_DECODE ? 1 : accepted;
    int32_t period = bench_fold_period(u->history, tokens, kept);
    double mean_committed = kept * (period - 1) / 2.0; /* n over the period */
    double step = u->state + mean_committed * u->ring_read + tokens * u->ring_write;
    double fold = 2 * u->state + (double)period * kept * u->record;
    return step + fold / period;
}

/* Bytes of replay's record traffic. The raw part leads the record with
 * the key first, at 16-byte boundaries (docs/modes.md, "Records"); u and
 * the cumulative gate follow it. The exact outputs re-apply raw records
 * and need nothing else; the identity forms read the key, u and G of each
 * record, and every new record is written whole. */
static void replay_record_traffic(const bench_shape *s, unit_sizes *u)
{
    double raw = (double)ssm_record_bytes(&s->model, s->activation_dtype);
    double whole = (double)ssm_replay_record_bytes(&s->model, s->activation_dtype);
    uint64_t key = (uint64_t)s->model.heads * (uint64_t)s->model.key_dim *
                   ssm_dtype_size(s->activation_dtype);
    double key_aligned = (double)((key + 15) / 16 * 16);
    if (s->replay_reads == BENCH_REPLAY_RAW) {
        u->ring_read = raw;
        u->ring_write = raw;
    } else {
        u->ring_read = key_aligned + (whole - raw);
        u->ring_write = whole;
    }
}

uint64_t bench_floor_bytes(const bench_shape *s, const char *mode, bench_op op, int32_t batch,
                           int32_t layers, int32_t accepted)
{
    unit_sizes u = {
        .state = (double)bench_state_bytes(s),
        .record = (double)ssm_record_bytes(&s->model, s->activation_dtype),
        .tokens = s->tokens,
        .history = s->history,
    };
    replay_record_traffic(s, &u);
    double per_request;
    if (op == BENCH_OP_COPY)
        per_request = 2 * u.state;
    else if (!strcmp(mode, "native"))
        per_request = native_bytes(&u, op);
    else if (!strcmp(mode, "compact"))
        per_request = compact_bytes(&u, op, accepted, s->commit_in_step);
    else if (!strcmp(mode, "replay"))
        per_request = replay_bytes(&u, op, accepted, batch <= s->fold_rows);
    else
        return 0;
    return (uint64_t)llround(per_request * (double)batch * (double)layers);
}

uint64_t bench_io_bytes(const bench_shape *s, bench_op op, int32_t batch, int32_t layers)
{
    if (op == BENCH_OP_COPY)
        return 0;
    const ssm_model_dims *m = &s->model;
    uint64_t act = ssm_dtype_size(s->activation_dtype);
    uint64_t tokens = op == BENCH_OP_ROUND ? (uint64_t)s->tokens : 1;
    uint64_t d = (uint64_t)ssm_conv_channels(m);
    uint64_t per_token = (d + (uint64_t)ssm_gate_width(m) + (uint64_t)m->value_heads +
                          (uint64_t)m->value_heads * (uint64_t)m->value_dim) * act;
    uint64_t window = 2 * (uint64_t)(m->conv_width - 1) * d * act; /* read + write */
    return (tokens * per_token + window) * (uint64_t)batch * (uint64_t)layers;
}
