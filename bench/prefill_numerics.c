/* prefill_numerics: how far a chunked prefill lands from fp64 when chosen
 * intermediates are rounded to bf16. This is the design question of a bf16
 * tensor-core prefill (docs/prefill.md): which products may take bf16
 * operands, and which stored values may be bf16, within the numerics
 * contract's 5e-3 (relative RMS of the outputs and of the final state
 * against fp64) for a chunked prefill. Answered on the CPU, where every
 * rounding point can be switched on alone.
 *
 * One value head of Qwen3-Next's and Kimi-Linear's shape (K = V = 128),
 * chunks of 64 tokens, the chunked form of kernels/chunk.h in fp32 with a
 * plan's rounding points applied, against the token-by-token recurrence in
 * fp64 on the same inputs. Cases: GDN gates and KDA gates with the lower
 * bound (-5); a 4096-token prompt from a zero state, and 1- and 300-token
 * continuations of a state that 256 earlier tokens left. The state is fp32.
 * Prints, per plan and case, the largest relative RMS over the seeds'
 * draws, outputs / final state.
 *
 * Usage: prefill_numerics [seeds (default 3)] */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/math.h"
#include "tools/rng.h"

enum { K = 128, V = 128, CHUNK = 64, BLOCK = 16 };

/* Rounding points: where the kernel would hold a value in bf16 (TF32 where
 * said). */
enum {
    R_INPUTS = 1 << 0,    /* q, k, v as the chunk reads them (bf16 records) */
    R_AQK = 1 << 1,       /* operands of A = beta K K^T and QK = Q K^T (decays applied) */
    R_AQK_TF32 = 1 << 2,  /* A's and QK's operands in TF32 (10 mantissa bits) instead */
    R_TX = 1 << 3,        /* operands of W = T (beta e^G K) and T (beta V) */
    R_QKU = 1 << 4,       /* operands of the outputs' QK U */
    R_UPDATE = 1 << 5,    /* operands of the state's update U^T (e^{G_last - G} K) */
    R_T = 1 << 6,         /* the inverse T = (I + A)^-1, stored */
    R_STORE = 1 << 7,     /* W and T (beta V), stored */
    R_STATE = 1 << 8,     /* the state, W and e^G q as operands of W S^T and (e^G q) S^T */
    R_STATE2 = 1 << 9,    /* as R_STATE, the state as a bf16 pair hi + lo (two products) */
    R_DELTA = 1 << 10,    /* U = T (beta V) - W S^T, stored */
    R_CHUNK = R_AQK | R_TX | R_QKU | R_UPDATE /* every product within a chunk */
};

static const struct {
    const char *name;
    int points;
} plans[] = {
    {"fp32 products", 0},
    {"A, QK bf16", R_AQK},
    {"T X bf16", R_TX},
    {"QK U bf16", R_QKU},
    {"state update bf16", R_UPDATE},
    {"bf16 within the chunk", R_CHUNK},
    {"... but the update", R_AQK | R_TX | R_QKU},
    {"+ T bf16", R_CHUNK | R_T},
    {"+ W, U stored bf16", R_CHUNK | R_T | R_STORE | R_DELTA},
    {"+ state operand bf16", R_CHUNK | R_T | R_STORE | R_DELTA | R_STATE},
    {"+ state operand bf16 pair", R_CHUNK | R_T | R_STORE | R_DELTA | R_STATE2},
    {"pair + q, k, v bf16", R_CHUNK | R_T | R_STORE | R_DELTA | R_STATE2 | R_INPUTS},
    {"all bf16 (fla's)", R_CHUNK | R_T | R_STORE | R_DELTA | R_STATE | R_INPUTS},
    {"pair, A and QK in TF32", R_AQK_TF32 | R_TX | R_QKU | R_UPDATE | R_T | R_STORE | R_DELTA |
                                   R_STATE2},
};
#define PLANS ((int)(sizeof plans / sizeof plans[0]))

static const struct {
    const char *name;
    int kda;
    int warmup, n; /* tokens before (fp64, from zero), tokens measured */
} cases[] = {
    {"GDN 4096", 0, 0, 4096}, {"GDN +1", 0, 256, 1}, {"GDN +300", 0, 256, 300},
    {"KDA 4096", 1, 0, 4096}, {"KDA +1", 1, 256, 1}, {"KDA +300", 1, 256, 300},
};
#define CASES ((int)(sizeof cases / sizeof cases[0]))

/* The inputs of one run: token t's q (normalized, scaled), k (normalized),
 * v, log-decays (1 for GDN, K for KDA) and beta. */
typedef struct tokens {
    int n, gk;
    float *q, *k, *v, *g, *beta;
} tokens;

static double normal(rng *r)
{
    double u1 = ((double)(rng_next(r) >> 11) + 0.5) / 9007199254740992.0;
    double u2 = (double)(rng_next(r) >> 11) / 9007199254740992.0;
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

static double sigmoid(double x) { return 1.0 / (1.0 + exp(-x)); }
static double softplus(double x) { return x > 20 ? x : log1p(exp(x)); }

static void unit(rng *r, float *x, double scale)
{
    double sum = 0;
    for (int c = 0; c < K; c++) {
        x[c] = (float)normal(r);
        sum += (double)x[c] * x[c];
    }
    for (int c = 0; c < K; c++)
        x[c] = (float)(x[c] / sqrt(sum) * scale);
}

/* GDN: g = -A softplus(x + dt_bias), A in [1, 16], softplus(dt_bias) in
 * [0.001, 0.1] per head; KDA: g_c = -5 sigmoid(z), z ~ N(-3, 1.5). */
static void make_tokens(rng *r, int kda, int n, tokens *t)
{
    t->n = n;
    t->gk = kda ? K : 1;
    t->q = malloc(sizeof(float) * (size_t)n * K);
    t->k = malloc(sizeof(float) * (size_t)n * K);
    t->v = malloc(sizeof(float) * (size_t)n * V);
    t->g = malloc(sizeof(float) * (size_t)n * t->gk);
    t->beta = malloc(sizeof(float) * (size_t)n);
    double a = exp(log(16.0) * ((double)(rng_next(r) >> 11) / 9007199254740992.0));
    double dt = 0.001 + 0.099 * ((double)(rng_next(r) >> 11) / 9007199254740992.0);
    double dt_bias = log(expm1(dt));
    for (int i = 0; i < n; i++) {
        unit(r, t->q + (size_t)i * K, 1.0 / sqrt((double)K));
        unit(r, t->k + (size_t)i * K, 1.0);
        for (int e = 0; e < V; e++)
            t->v[(size_t)i * V + e] = (float)normal(r);
        for (int c = 0; c < t->gk; c++)
            t->g[(size_t)i * t->gk + c] =
                kda ? (float)(-5.0 * sigmoid(-3.0 + 1.5 * normal(r)))
                    : (float)(-a * softplus(normal(r) + dt_bias));
        t->beta[i] = (float)sigmoid(normal(r));
    }
}

static void free_tokens(tokens *t)
{
    free(t->q), free(t->k), free(t->v), free(t->g), free(t->beta);
}

/* Token by token in fp64: S = e^g S; u = beta (v - S k); S += u k^T; o = S q. */
static void run_fp64(const tokens *t, double *S, double *o)
{
    for (int i = 0; i < t->n; i++) {
        const float *q = t->q + (size_t)i * K, *k = t->k + (size_t)i * K;
        const float *g = t->g + (size_t)i * t->gk;
        for (int e = 0; e < V; e++) {
            double *row = S + (size_t)e * K, recalled = 0, out = 0;
            for (int c = 0; c < K; c++) {
                row[c] *= exp(g[t->gk == 1 ? 0 : c]);
                recalled += row[c] * k[c];
            }
            double u = t->beta[i] * (t->v[(size_t)i * V + e] - recalled);
            for (int c = 0; c < K; c++) {
                row[c] += u * k[c];
                out += row[c] * q[c];
            }
            if (o)
                o[(size_t)i * V + e] = out;
        }
    }
}

static float bf(int on, float x) { return on ? ssm_bf16_round(x) : x; }

/* x rounded to TF32 (nearest, ties away: the tensor cores' cvt.rna). */
static float tf32(float x)
{
    uint32_t u = ssm_f32_bits(x);
    return ssm_f32_from_bits((u + 0x1000u) & ~0x1fffu);
}

/* An operand of A or QK as the plan holds it. */
static float aqk_operand(int p, float x)
{
    return p & R_AQK_TF32 ? tf32(x) : bf(p & R_AQK, x);
}

/* One chunk of c tokens from t0, the algebra of kernels/chunk.h with the
 * plan's rounding points; S [V][K] fp32 in and out. */
static void run_chunk(int p, const tokens *t, int t0, int c, float *S, float *o)
{
    static float G[CHUNK][K], A[CHUNK][CHUNK], QK[CHUNK][CHUNK], T[CHUNK][CHUNK];
    static float W[CHUNK][K], U[CHUNK][V], q[CHUNK][K], k[CHUNK][K], v[CHUNK][V];
    const int in = p & R_INPUTS, gk = t->gk;
    const int tx = (p & R_TX) != 0, qku = (p & R_QKU) != 0, upd = (p & R_UPDATE) != 0;
    for (int i = 0; i < c; i++) {
        for (int x = 0; x < K; x++) {
            q[i][x] = bf(in, t->q[(size_t)(t0 + i) * K + x]);
            k[i][x] = bf(in, t->k[(size_t)(t0 + i) * K + x]);
            G[i][x] = (i ? G[i - 1][x] : 0.0f) + t->g[(size_t)(t0 + i) * gk + (gk == 1 ? 0 : x)];
        }
        for (int e = 0; e < V; e++)
            v[i][e] = bf(in, t->v[(size_t)(t0 + i) * V + e]);
    }
    /* A and QK; KDA's operands scaled around the first token r of t's block. */
    for (int ti = 0; ti < c; ti++) {
        int r = gk == 1 ? 0 : ti / BLOCK * BLOCK;
        for (int i = 0; i <= ti; i++) {
            float kk = 0, kq = 0;
            for (int x = 0; x < K; x++) {
                float a = gk == 1 ? 1.0f : ssm_expf(G[ti][x] - G[r][x]);
                float b = gk == 1 ? 1.0f : ssm_expf(G[r][x] - G[i][x]);
                float ki = aqk_operand(p, k[i][x] * b);
                kk += aqk_operand(p, k[ti][x] * a) * ki;
                kq += aqk_operand(p, q[ti][x] * a) * ki;
            }
            if (gk == 1) {
                float d = ssm_expf(G[ti][0] - G[i][0]);
                kk *= d;
                kq *= d;
            }
            A[ti][i] = i < ti ? t->beta[t0 + ti] * kk : 0.0f;
            QK[ti][i] = kq;
        }
    }
    for (int ti = 0; ti < c; ti++) {
        for (int i = 0; i < ti; i++) {
            float sum = 0;
            for (int m = i; m < ti; m++)
                sum += A[ti][m] * T[m][i];
            T[ti][i] = -sum;
        }
        T[ti][ti] = 1.0f;
    }
    for (int ti = 0; ti < c; ti++)
        for (int i = 0; i <= ti; i++)
            T[ti][i] = bf(p & R_T, T[ti][i]);
    /* W = T (beta e^G K), T (beta V), then U = T (beta V) - W S^T. */
    const int st = (p & (R_STATE | R_STATE2)) != 0;
    for (int ti = 0; ti < c; ti++) {
        for (int x = 0; x < K; x++) {
            float sum = 0;
            for (int i = 0; i <= ti; i++)
                sum += bf(tx, T[ti][i]) *
                       bf(tx, t->beta[t0 + i] * ssm_expf(G[i][gk == 1 ? 0 : x]) * k[i][x]);
            W[ti][x] = bf(p & R_STORE, sum);
        }
        for (int e = 0; e < V; e++) {
            float sum = 0;
            for (int i = 0; i <= ti; i++)
                sum += bf(tx, T[ti][i]) * bf(tx, t->beta[t0 + i] * v[i][e]);
            sum = bf(p & R_STORE, sum);
            float recalled = 0;
            for (int x = 0; x < K; x++) {
                float s = S[(size_t)e * K + x], w = bf(st, W[ti][x]);
                if (p & R_STATE2) {
                    float hi = ssm_bf16_round(s);
                    recalled += w * hi + w * ssm_bf16_round(s - hi);
                } else {
                    recalled += w * bf(st, s);
                }
            }
            U[ti][e] = bf(p & R_DELTA, sum - recalled);
        }
    }
    /* o_t = S (e^{G_t} q_t) + sum_{i <= t} QK[t][i] u_i. */
    for (int ti = 0; ti < c; ti++)
        for (int e = 0; e < V; e++) {
            float acc = 0;
            for (int x = 0; x < K; x++) {
                float s = S[(size_t)e * K + x];
                float qg = bf(st, ssm_expf(G[ti][gk == 1 ? 0 : x]) * q[ti][x]);
                if (p & R_STATE2) {
                    float hi = ssm_bf16_round(s);
                    acc += qg * hi + qg * ssm_bf16_round(s - hi);
                } else {
                    acc += qg * bf(st, s);
                }
            }
            for (int i = 0; i <= ti; i++)
                acc += bf(qku, QK[ti][i]) * bf(qku, U[i][e]);
            o[(size_t)(t0 + ti) * V + e] = acc;
        }
    /* S = e^{G_last} S + sum_i u_i (e^{G_last - G_i} k_i)^T. */
    const int last = c - 1;
    for (int e = 0; e < V; e++)
        for (int x = 0; x < K; x++) {
            int gx = gk == 1 ? 0 : x;
            float s = S[(size_t)e * K + x] * ssm_expf(G[last][gx]);
            for (int i = 0; i < c; i++)
                s += bf(upd, U[i][e]) * bf(upd, ssm_expf(G[last][gx] - G[i][gx]) * k[i][x]);
            S[(size_t)e * K + x] = s;
        }
}

static double rel_rms(const float *got, const double *want, size_t n)
{
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(got[i]))
            return INFINITY;
        num += (got[i] - want[i]) * (got[i] - want[i]);
        den += want[i] * want[i];
    }
    return den > 0 ? sqrt(num / den) : (num > 0 ? INFINITY : 0);
}

int main(int argc, char **argv)
{
    int seeds = argc > 1 ? atoi(argv[1]) : 3;
    if (seeds < 1) {
        fprintf(stderr, "usage: prefill_numerics [seeds]\n");
        return 2;
    }
    static double worst[PLANS][CASES][2];
    for (int cs = 0; cs < CASES; cs++)
        for (int seed = 0; seed < seeds; seed++) {
            rng r = {0x9e3779b97f4a7c15ull * (uint64_t)(seed + 1) ^ (uint64_t)cs};
            tokens warm, run;
            make_tokens(&r, cases[cs].kda, cases[cs].warmup, &warm);
            make_tokens(&r, cases[cs].kda, cases[cs].n, &run);
            double *S64 = calloc((size_t)V * K, sizeof(double));
            double *o64 = malloc(sizeof(double) * (size_t)run.n * V);
            float *S0 = malloc(sizeof(float) * (size_t)V * K), *S = malloc(sizeof(float) * V * K);
            float *o = malloc(sizeof(float) * (size_t)run.n * V);
            run_fp64(&warm, S64, NULL);
            for (int e = 0; e < V * K; e++) /* an fp32 state: both sides start from its bits */
                S64[e] = S0[e] = (float)S64[e];
            run_fp64(&run, S64, o64);
            for (int pl = 0; pl < PLANS; pl++) {
                memcpy(S, S0, sizeof(float) * V * K);
                for (int t0 = 0; t0 < run.n; t0 += CHUNK)
                    run_chunk(plans[pl].points, &run, t0, run.n - t0 < CHUNK ? run.n - t0 : CHUNK,
                              S, o);
                double eo = rel_rms(o, o64, (size_t)run.n * V), es = rel_rms(S, S64, V * K);
                if (eo > worst[pl][cs][0])
                    worst[pl][cs][0] = eo;
                if (es > worst[pl][cs][1])
                    worst[pl][cs][1] = es;
            }
            free(S64), free(o64), free(S0), free(S), free(o);
            free_tokens(&warm), free_tokens(&run);
        }
    printf("relative RMS against fp64, outputs / final state, worst of %d draws (bound 5e-3)\n",
           seeds);
    printf("%-26s", "plan");
    for (int cs = 0; cs < CASES; cs++)
        printf(" %19s", cases[cs].name);
    printf("\n");
    for (int pl = 0; pl < PLANS; pl++) {
        printf("%-26s", plans[pl].name);
        for (int cs = 0; cs < CASES; cs++)
            printf("   %7.1e / %7.1e", worst[pl][cs][0], worst[pl][cs][1]);
        printf("\n");
    }
    return 0;
}
