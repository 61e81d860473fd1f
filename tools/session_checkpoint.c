/* Checkpoints of the simulated session (issue 6): `ssmstate run --save DIR
 * --stop-after N` stops after N forwards and writes
 *
 *   DIR/session.txt    the workload it belongs to and where the schedule is:
 *                      forwards, the next request, the finished count, the
 *                      summary's token counts, and per busy lane its request,
 *                      committed tokens and each round's accepted length;
 *   DIR/lane-L.page    the lane's slot as a state page (docs/pages.md);
 *   DIR/shadow-L.bin   the reference shadow's lane (every layer's window and
 *                      state), so the resumed run keeps checking;
 *
 * and `ssmstate run --load DIR` on a fresh session of a config of the same
 * model and workload, in any mode, reads them back: slots are acquired and
 * the pages imported, so the next forwards are those the saved session would
 * have run. The inputs and accepted lengths are pure functions of the
 * workload's seed (synth.h), so nothing else needs saving. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"
#include "session_private.h"

#define CHECKPOINT_MAGIC "ssmstate-session 1"

/* DIR/NAME, or DIR/NAME-LANE.page|bin; 0, or -1 after an error naming a
 * path too long for buf (never a file under a cut name). */
static int path_of(char *buf, size_t len, const char *dir, const char *name, int32_t lane)
{
    int n = lane >= 0 ? snprintf(buf, len, "%s/%s-%d.%s", dir, name, (int)lane,
                                 strcmp(name, "lane") == 0 ? "page" : "bin")
                      : snprintf(buf, len, "%s/%s", dir, name);
    if (n >= 0 && (size_t)n < len)
        return 0;
    cli_fail("%s/%s: path too long (at most %zu bytes)", dir, name, len - 1);
    return -1;
}

static int write_file(const char *path, const void *data, size_t bytes)
{
    FILE *f = fopen(path, "wb");
    int ok = f && fwrite(data, 1, bytes, f) == bytes;
    if (f && fclose(f) != 0)
        ok = 0;
    return ok ? CLI_EXIT_OK : cli_fail("cannot write %s: %s", path, strerror(errno));
}

/* The whole file into a new buffer of *bytes bytes. */
static int read_file(const char *path, void **data, size_t *bytes)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return cli_fail("cannot read %s: %s", path, strerror(errno));
    long size = fseek(f, 0, SEEK_END) == 0 ? ftell(f) : -1;
    void *p = size >= 0 && fseek(f, 0, SEEK_SET) == 0 ? malloc(size > 0 ? (size_t)size : 1) : NULL;
    int ok = p && fread(p, 1, (size_t)size, f) == (size_t)size;
    fclose(f);
    if (!ok) {
        free(p);
        return cli_fail("cannot read %s", path);
    }
    *data = p;
    *bytes = (size_t)size;
    return CLI_EXIT_OK;
}

/* The workload and model a checkpoint belongs to, as one line. */
static void fingerprint(const session *s, char *buf, size_t len)
{
    const ssm_workload *w = &s->config->workload;
    const ssm_model_dims *m = &s->model;
    snprintf(buf, len,
             "workload %d %d %d %d %d %a %llu lanes %d T %d model %d %d %d %d %d %d %d %d "
             "dtypes %d %d",
             (int)w->requests, (int)w->prompt_min, (int)w->prompt_max, (int)w->prefill_chunk,
             (int)w->decode_steps, w->acceptance, (unsigned long long)w->seed, (int)s->lanes,
             (int)s->tokens_per_row, (int)m->kind, (int)m->layers, (int)m->heads,
             (int)m->value_heads, (int)m->key_dim, (int)m->value_dim, (int)m->conv_width,
             (int)m->has_lower_bound, (int)s->state_dtype, (int)s->act);
}

int session_save(session *s, const char *dir)
{
    if (mkdir(dir, 0777) != 0 && errno != EEXIST)
        return cli_fail("cannot create %s: %s", dir, strerror(errno));
    char path[4096], print[512];
    size_t page_bytes = ssm_page_bytes(s->ctx);
    size_t lane_bytes = (size_t)shadow_lane_bytes(s->shadow);
    if (path_of(path, sizeof path, dir, "session.txt", -1) != 0)
        return CLI_EXIT_USAGE;
    void *page = malloc(page_bytes), *lane = malloc(lane_bytes);
    FILE *f = page && lane ? fopen(path, "w") : NULL;
    int exit_code = f ? CLI_EXIT_OK : cli_fail("cannot write %s", path);
    if (f) {
        const session_summary *sum = s->sum;
        fingerprint(s, print, sizeof print);
        fprintf(f, "%s\n%s\n", CHECKPOINT_MAGIC, print);
        fprintf(f, "forwards %lld next_request %d finished %d\n", (long long)sum->forwards,
                (int)s->next_request, (int)s->finished);
        fprintf(f, "tokens %lld %lld %lld %lld %lld\n", (long long)sum->prefill_tokens,
                (long long)sum->rounds, (long long)sum->round_tokens,
                (long long)sum->padding_rows, (long long)sum->accepted_tokens);
    }
    for (int32_t l = 0; f && exit_code == CLI_EXIT_OK && l < s->lanes; l++) {
        const request *req = s->lane_request[l];
        if (!req)
            continue;
        fprintf(f, "lane %d request %d committed %d rounds %d accepted", (int)l, (int)req->id,
                (int)req->committed, (int)req->rounds);
        for (int32_t k = 0; k < req->rounds; k++)
            fprintf(f, " %d", (int)req->accepted[k]);
        fputc('\n', f);
        if (ssm_slot_export_page(s->ctx, req->slot, page, page_bytes) != SSM_OK) {
            exit_code = cli_fail_library();
            break;
        }
        if (path_of(path, sizeof path, dir, "lane", l) != 0) {
            exit_code = CLI_EXIT_USAGE;
            break;
        }
        if ((exit_code = write_file(path, page, page_bytes)) != CLI_EXIT_OK)
            break;
        shadow_lane_save(s->shadow, l, lane);
        if (path_of(path, sizeof path, dir, "shadow", l) != 0) {
            exit_code = CLI_EXIT_USAGE;
            break;
        }
        exit_code = write_file(path, lane, lane_bytes);
    }
    if (f && fclose(f) != 0 && exit_code == CLI_EXIT_OK)
        exit_code = cli_fail("cannot write %s/session.txt", dir);
    free(page);
    free(lane);
    return exit_code;
}

/* One busy lane of the checkpoint: its request back in the lane, a slot
 * acquired and loaded from the page, the shadow from its bytes. */
static int load_lane(session *s, const char *dir, int32_t l, int32_t id, int32_t committed,
                     int32_t rounds, const int32_t *accepted)
{
    if (l < 0 || l >= s->lanes || s->lane_request[l] || id < 0 || id >= s->next_request ||
        rounds < 0 || rounds > s->config->workload.decode_steps || committed < 0 ||
        s->requests[id].slot >= 0)
        return cli_fail("%s/session.txt: lane %d request %d does not fit this session", dir,
                        (int)l, (int)id);
    request *req = &s->requests[id];
    /* What the session itself would have: a prompt part way in, or the
     * whole prompt and each round's accepted length (1..T) after it. */
    int64_t expected = req->prompt_tokens;
    for (int32_t k = 0; k < rounds; k++) {
        if (accepted[k] < 1 || accepted[k] > s->tokens_per_row)
            return cli_fail("%s/session.txt: lane %d round %d accepted %d tokens, not 1..%d", dir,
                            (int)l, (int)k, (int)accepted[k], (int)s->tokens_per_row);
        expected += accepted[k];
    }
    if (rounds > 0 ? committed != expected : committed > req->prompt_tokens)
        return cli_fail("%s/session.txt: lane %d request %d has %d tokens committed, which its "
                        "prompt of %d and %d rounds cannot give",
                        dir, (int)l, (int)id, (int)committed, (int)req->prompt_tokens, (int)rounds);
    char page_path[4096], path[4096];
    void *page = NULL, *lane = NULL;
    size_t page_bytes = 0, lane_bytes = 0;
    if (path_of(page_path, sizeof page_path, dir, "lane", l) != 0 ||
        path_of(path, sizeof path, dir, "shadow", l) != 0)
        return CLI_EXIT_USAGE;
    int exit_code = read_file(page_path, &page, &page_bytes);
    if (exit_code == CLI_EXIT_OK)
        exit_code = read_file(path, &lane, &lane_bytes);
    if (exit_code == CLI_EXIT_OK && lane_bytes != (size_t)shadow_lane_bytes(s->shadow))
        exit_code = cli_fail("%s: %zu bytes, this model's lane has %lld", path, lane_bytes,
                             (long long)shadow_lane_bytes(s->shadow));
    if (exit_code == CLI_EXIT_OK && ssm_slot_acquire(s->ctx, &req->slot) != SSM_OK)
        exit_code = cli_fail_library();
    if (exit_code == CLI_EXIT_OK &&
        ssm_slot_import_page(s->ctx, req->slot, page, page_bytes) != SSM_OK)
        exit_code = cli_fail("%s: %s", page_path, ssm_last_error());
    if (exit_code == CLI_EXIT_OK) {
        req->lane = l;
        req->committed = committed;
        req->rounds = rounds;
        memcpy(req->accepted, accepted, sizeof(int32_t) * (size_t)rounds);
        s->lane_request[l] = req;
        shadow_lane_load(s->shadow, l, lane);
    }
    free(page);
    free(lane);
    return exit_code;
}

int session_load(session *s, const char *dir)
{
    char path[4096], line[8192], print[512];
    if (path_of(path, sizeof path, dir, "session.txt", -1) != 0)
        return CLI_EXIT_USAGE;
    FILE *f = fopen(path, "r");
    if (!f)
        return cli_fail("cannot read %s: %s", path, strerror(errno));
    fingerprint(s, print, sizeof print);
    session_summary *sum = s->sum;
    long long forwards = 0, t[5] = {0};
    int next = 0, finished = 0;
    int exit_code = CLI_EXIT_OK;
    if (!fgets(line, sizeof line, f) || strncmp(line, CHECKPOINT_MAGIC, strlen(CHECKPOINT_MAGIC)))
        exit_code = cli_fail("%s is not a session checkpoint", path);
    else if (!fgets(line, sizeof line, f) || strncmp(line, print, strlen(print)) != 0)
        exit_code = cli_fail("%s is of another model or workload than this config", path);
    else if (!fgets(line, sizeof line, f) ||
             sscanf(line, "forwards %lld next_request %d finished %d", &forwards, &next,
                    &finished) != 3 ||
             next < 0 || next > sum->requests || finished < 0 || finished > next ||
             !fgets(line, sizeof line, f) ||
             sscanf(line, "tokens %lld %lld %lld %lld %lld", &t[0], &t[1], &t[2], &t[3],
                    &t[4]) != 5)
        exit_code = cli_fail("%s: cannot read where the session was", path);
    if (exit_code == CLI_EXIT_OK) {
        sum->forwards = forwards;
        sum->prefill_tokens = t[0];
        sum->rounds = t[1];
        sum->round_tokens = t[2];
        sum->padding_rows = t[3];
        sum->accepted_tokens = t[4];
        s->next_request = next;
        s->finished = finished;
    }
    int32_t *accepted = malloc(sizeof(int32_t) * (size_t)(s->config->workload.decode_steps + 1));
    if (!accepted && exit_code == CLI_EXIT_OK)
        exit_code = cli_fail("out of memory");
    int busy = 0;
    while (exit_code == CLI_EXIT_OK && fgets(line, sizeof line, f)) {
        int l, id, committed, rounds, used = 0;
        if (sscanf(line, "lane %d request %d committed %d rounds %d accepted%n", &l, &id,
                   &committed, &rounds, &used) != 4 || rounds < 0 ||
            rounds > s->config->workload.decode_steps) {
            exit_code = cli_fail("%s: cannot read the line '%.60s'", path, line);
            break;
        }
        const char *at = line + used;
        for (int32_t k = 0; k < rounds && exit_code == CLI_EXIT_OK; k++) {
            int n = 0;
            if (sscanf(at, " %d%n", &accepted[k], &n) != 1)
                exit_code = cli_fail("%s: lane %d lists fewer than %d accepted lengths", path, l,
                                     rounds);
            at += n;
        }
        if (exit_code == CLI_EXIT_OK)
            exit_code = load_lane(s, dir, l, id, committed, rounds, accepted);
        busy++;
    }
    if (exit_code == CLI_EXIT_OK && busy != next - finished)
        exit_code = cli_fail("%s: %d requests in flight, %d lanes listed", path,
                             next - finished, busy);
    free(accepted);
    fclose(f);
    return exit_code;
}
