/* Checkpoints of the simulated session: `ssmstate run --save DIR
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
 * (DIR and its missing parents are created), and `ssmstate run --load DIR`
 * on a fresh session of a config of the same model and workload, in any
 * mode, reads them back: slots are acquired and the pages imported, so the
 * next forwards are those the saved session would have run. Every field is
 * read strictly and held to what the workload can reach; a refusal names
 * the field. The inputs and accepted lengths are pure functions of the
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

/* The workload and model a checkpoint belongs to, as one line of words:
 *
 *   workload REQUESTS PROMPT_MIN PROMPT_MAX PREFILL_CHUNK DECODE_STEPS
 *            ACCEPTANCE (%a) SEED lanes LANES T T model KIND LAYERS HEADS
 *            VALUE_HEADS KEY_DIM VALUE_DIM CONV_WIDTH HAS_LOWER_BOUND dtypes
 *            STATE_DTYPE ACTIVATION_DTYPE
 *
 * Each value is a field a resumed session must share, named in messages. */
enum { PRINT_FIELDS = 26, PRINT_WORD = 32 };

typedef enum field_kind { FIELD_LITERAL, FIELD_INT, FIELD_REAL, FIELD_KIND, FIELD_DTYPE } field_kind;

typedef struct print_field {
    field_kind kind;
    const char *name; /* the literal word, or the field's name in messages */
    char value[PRINT_WORD];
} print_field;

static void fingerprint_fields(const session *s, print_field f[PRINT_FIELDS])
{
    const workload *w = &s->workload;
    const ssm_model_dims *m = &s->model;
    static const struct {
        field_kind kind;
        const char *name;
    } layout[PRINT_FIELDS] = {
        {FIELD_LITERAL, "workload"},
        {FIELD_INT, "[workload] requests"},
        {FIELD_INT, "[workload] prompt_min"},
        {FIELD_INT, "[workload] prompt_max"},
        {FIELD_INT, "[workload] prefill_chunk"},
        {FIELD_INT, "[workload] decode_steps"},
        {FIELD_REAL, "[workload] acceptance"},
        {FIELD_INT, "[workload] seed"},
        {FIELD_LITERAL, "lanes"},
        {FIELD_INT, "lanes (requests served at once: [state] max_requests)"},
        {FIELD_LITERAL, "T"},
        {FIELD_INT, "T (tokens a round: 1 + [state] max_draft_tokens)"},
        {FIELD_LITERAL, "model"},
        {FIELD_KIND, "[model] kind"},
        {FIELD_INT, "[model] layers"},
        {FIELD_INT, "[model] heads"},
        {FIELD_INT, "[model] value_heads"},
        {FIELD_INT, "[model] key_dim"},
        {FIELD_INT, "[model] value_dim"},
        {FIELD_INT, "[model] conv_width"},
        {FIELD_INT, "[model] lower_bound set"},
        {FIELD_LITERAL, "dtypes"},
        {FIELD_DTYPE, "[state] state_dtype"},
        {FIELD_DTYPE, "[state] activation_dtype"},
        {FIELD_LITERAL, NULL},
        {FIELD_LITERAL, NULL},
    };
    const long long ints[PRINT_FIELDS] = {
        0, w->requests, w->prompt_min, w->prompt_max, w->prefill_chunk, w->decode_steps, 0, 0,
        0, s->lanes, 0, s->tokens_per_row, 0, m->kind, m->layers, m->heads, m->value_heads,
        m->key_dim, m->value_dim, m->conv_width, m->has_lower_bound, 0, s->state_dtype, s->act,
    };
    for (int i = 0; i < PRINT_FIELDS; i++) {
        f[i].kind = layout[i].kind;
        f[i].name = layout[i].name;
        if (f[i].kind == FIELD_LITERAL)
            snprintf(f[i].value, sizeof f[i].value, "%s", f[i].name ? f[i].name : "");
        else if (f[i].kind == FIELD_REAL)
            snprintf(f[i].value, sizeof f[i].value, "%a", w->acceptance);
        else if (i == 7)
            snprintf(f[i].value, sizeof f[i].value, "%llu", (unsigned long long)w->seed);
        else
            snprintf(f[i].value, sizeof f[i].value, "%lld", ints[i]);
    }
}

static void fingerprint(const session *s, char *buf, size_t len)
{
    print_field f[PRINT_FIELDS];
    fingerprint_fields(s, f);
    size_t used = 0;
    buf[0] = '\0';
    for (int i = 0; i < PRINT_FIELDS && f[i].value[0]; i++) {
        int n = snprintf(buf + used, len - used, "%s%s", i ? " " : "", f[i].value);
        if (n < 0 || (size_t)n >= len - used)
            break;
        used += (size_t)n;
    }
}

/* A field's value as a config would say it: names for kinds and dtypes,
 * a decimal acceptance. */
static const char *shown(const print_field *f, const char *value, char *buf, size_t len)
{
    char *end = NULL;
    long long v = strtoll(value, &end, 10);
    int number = end != value && *end == '\0';
    if (f->kind == FIELD_REAL) {
        double d = strtod(value, &end);
        if (end != value && *end == '\0')
            snprintf(buf, len, "%g", d);
        else
            snprintf(buf, len, "'%s'", value);
    } else if (f->kind == FIELD_KIND && number && (v == SSM_MODEL_GDN || v == SSM_MODEL_KDA)) {
        snprintf(buf, len, "%s", ssm_model_kind_name((ssm_model_kind)v));
    } else if (f->kind == FIELD_DTYPE && number &&
               (v == SSM_DTYPE_F32 || v == SSM_DTYPE_BF16 || v == SSM_DTYPE_F16)) {
        snprintf(buf, len, "%s", ssm_dtype_name((ssm_dtype)v));
    } else {
        snprintf(buf, len, "%s", value);
    }
    return buf;
}

/* Compares the checkpoint's fingerprint line with this session's, field by
 * field: CLI_EXIT_OK, or an exit code after naming the first field that
 * differs (or where a cut line ends). */
static int compare_fingerprint(const session *s, const char *path, char *line)
{
    print_field f[PRINT_FIELDS];
    fingerprint_fields(s, f);
    const int cut = strchr(line, '\n') == NULL; /* the file ends inside the line */
    char *save = NULL, *word = strtok_r(line, " \t\r\n", &save);
    for (int i = 0; i < PRINT_FIELDS && f[i].value[0]; i++, word = strtok_r(NULL, " \t\r\n", &save)) {
        char a[64], b[64];
        if (!word)
            return cli_fail("%s: the workload line ends before %s%s%s (a truncated file?)", path,
                            f[i].kind == FIELD_LITERAL ? "'" : "", f[i].name,
                            f[i].kind == FIELD_LITERAL ? "'" : "");
        if (f[i].kind == FIELD_LITERAL && strcmp(word, f[i].value) != 0)
            return cli_fail("%s: the workload line has '%.40s' where '%s' belongs", path, word,
                            f[i].value);
        char *next = save + strspn(save, " \t\r\n");
        if (cut && !*next && strcmp(word, f[i].value) != 0)
            return cli_fail("%s: the file ends inside the workload line, in %s (a truncated "
                            "file?)",
                            path, f[i].name);
        if (f[i].kind != FIELD_LITERAL && strcmp(word, f[i].value) != 0)
            return cli_fail("%s was saved with %s = %s; this config has %s", path, f[i].name,
                            shown(&f[i], word, a, sizeof a), shown(&f[i], f[i].value, b, sizeof b));
    }
    if (word)
        return cli_fail("%s: unexpected '%.40s' at the end of the workload line", path, word);
    return CLI_EXIT_OK;
}

int session_save(session *s, const char *dir)
{
    if (cli_make_directories(dir) != 0)
        return cli_fail("--save %s: cannot create it: %s", dir, strerror(errno));
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
        rounds < 0 || rounds > s->workload.decode_steps || committed < 0 ||
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

/* A line of the checkpoint read word by word: "name value name value ...". */
typedef struct line_reader {
    const char *path;
    const char *what; /* the line, in messages */
    char *save;
} line_reader;

/* The next word, which must be `word`; 0, or -1 after an error. */
static int expect_word(line_reader *r, char *line, const char *word)
{
    char *got = strtok_r(line, " \t\r\n", &r->save);
    if (got && strcmp(got, word) == 0)
        return 0;
    if (!got)
        cli_fail("%s: the %s line ends before '%s' (a truncated file?)", r->path, r->what, word);
    else
        cli_fail("%s: the %s line has '%.40s' where '%s' belongs", r->path, r->what, got, word);
    return -1;
}

/* The next word as a whole decimal number in [min, max], the field named
 * `name`; 0, or -1 after an error naming it. */
static int read_field(line_reader *r, const char *name, long long min, long long max,
                      long long *out)
{
    char *word = strtok_r(NULL, " \t\r\n", &r->save);
    if (!word) {
            cli_fail("%s: the %s line ends before %s (a truncated file?)", r->path, r->what, name);
        return -1;
    }
    char *end = NULL;
    errno = 0;
    long long value = strtoll(word, &end, 10);
    if (end == word || *end != '\0') {
            cli_fail("%s: %s '%.40s' is not a number", r->path, name, word);
        return -1;
    }
    if (errno == ERANGE || value < min || value > max) {
            cli_fail("%s: %s %.40s is out of range (%lld..%lld for this workload)", r->path, name,
                 word, min, max);
        return -1;
    }
    *out = value;
    return 0;
}

/* Nothing after the line's last field; 0, or -1 after an error. */
static int expect_end(line_reader *r)
{
    char *word = strtok_r(NULL, " \t\r\n", &r->save);
    if (!word)
        return 0;
    cli_fail("%s: unexpected '%.40s' at the end of the %s line", r->path, word, r->what);
    return -1;
}

/* The counters of the summary line by line ("forwards ..." and
 * "tokens ..."), each held to what this workload can reach. */
static int read_counters(session *s, const char *path, char *forwards_line, char *tokens_line)
{
    const workload *w = &s->workload;
    long long prompts = 0, most_forwards = 0;
    for (int32_t i = 0; i < w->requests; i++) {
        prompts += s->requests[i].prompt_tokens;
        most_forwards += (s->requests[i].prompt_tokens + w->prefill_chunk - 1) / w->prefill_chunk +
                         w->decode_steps;
    }
    const long long most_rounds = (long long)w->requests * w->decode_steps;
    const long long most_round_tokens = most_rounds * s->tokens_per_row;
    long long forwards, next, finished, t[5];
    line_reader r = {path, "forwards", NULL};
    if (expect_word(&r, forwards_line, "forwards") ||
        read_field(&r, "forwards", 0, most_forwards, &forwards) ||
        expect_word(&r, NULL, "next_request") ||
        read_field(&r, "next_request", 0, w->requests, &next) ||
        expect_word(&r, NULL, "finished") || read_field(&r, "finished", 0, next, &finished) ||
        expect_end(&r))
        return CLI_EXIT_USAGE;
    r = (line_reader){path, "tokens", NULL};
    if (expect_word(&r, tokens_line, "tokens") ||
        read_field(&r, "tokens: prefill tokens", 0, prompts, &t[0]) ||
        read_field(&r, "tokens: rounds", 0, most_rounds, &t[1]) ||
        read_field(&r, "tokens: round tokens", t[1] * s->tokens_per_row,
                   t[1] * s->tokens_per_row, &t[2]) ||
        read_field(&r, "tokens: padding rows", 0, forwards, &t[3]) ||
        read_field(&r, "tokens: accepted tokens", t[1], t[2] < most_round_tokens ? t[2]
                                                                              : most_round_tokens,
                   &t[4]) ||
        expect_end(&r))
        return CLI_EXIT_USAGE;
    session_summary *sum = s->sum;
    sum->forwards = forwards;
    sum->prefill_tokens = t[0];
    sum->rounds = t[1];
    sum->round_tokens = t[2];
    sum->padding_rows = t[3];
    sum->accepted_tokens = t[4];
    s->next_request = (int32_t)next;
    s->finished = (int32_t)finished;
    return CLI_EXIT_OK;
}

/* A lane line: "lane L request I committed C rounds R accepted A1 .. AR". */
static int read_lane(session *s, const char *dir, const char *path, char *line, int32_t *accepted)
{
    const workload *w = &s->workload;
    const long long most_committed = (long long)w->prompt_max +
                                     (long long)w->decode_steps * s->tokens_per_row;
    long long l, id, committed, rounds;
    line_reader r = {path, "lane", NULL};
    if (expect_word(&r, line, "lane") || read_field(&r, "lane", 0, s->lanes - 1, &l) ||
        expect_word(&r, NULL, "request") ||
        read_field(&r, "lane's request", 0, w->requests - 1, &id) ||
        expect_word(&r, NULL, "committed") ||
        read_field(&r, "lane's committed tokens", 0, most_committed, &committed) ||
        expect_word(&r, NULL, "rounds") ||
        read_field(&r, "lane's rounds", 0, w->decode_steps, &rounds) ||
        expect_word(&r, NULL, "accepted"))
        return CLI_EXIT_USAGE;
    for (long long k = 0; k < rounds; k++) {
        long long a;
        char name[64];
        snprintf(name, sizeof name, "lane %lld's accepted length of round %lld", l, k);
        if (read_field(&r, name, 1, s->tokens_per_row, &a))
            return CLI_EXIT_USAGE;
        accepted[k] = (int32_t)a;
    }
    if (expect_end(&r))
        return CLI_EXIT_USAGE;
    return load_lane(s, dir, (int32_t)l, (int32_t)id, (int32_t)committed, (int32_t)rounds,
                     accepted);
}

int session_load(session *s, const char *dir)
{
    char path[4096], first[1024], counters[2][512];
    if (path_of(path, sizeof path, dir, "session.txt", -1) != 0)
        return CLI_EXIT_USAGE;
    FILE *f = fopen(path, "r");
    if (!f)
        return cli_fail("cannot read %s: %s", path, strerror(errno));
    int exit_code = CLI_EXIT_OK;
    if (!fgets(first, sizeof first, f) ||
        strncmp(first, CHECKPOINT_MAGIC, strlen(CHECKPOINT_MAGIC)))
        exit_code = cli_fail("%s is not a session checkpoint", path);
    else if (!fgets(first, sizeof first, f))
        exit_code = cli_fail("%s ends before the workload line (a truncated file?)", path);
    else
        exit_code = compare_fingerprint(s, path, first);
    for (int i = 0; i < 2 && exit_code == CLI_EXIT_OK; i++)
        if (!fgets(counters[i], sizeof counters[i], f))
            exit_code = cli_fail("%s ends before the %s line (a truncated file?)", path,
                                 i == 0 ? "forwards" : "tokens");
    if (exit_code == CLI_EXIT_OK)
        exit_code = read_counters(s, path, counters[0], counters[1]);
    int32_t *accepted = malloc(sizeof(int32_t) * (size_t)(s->workload.decode_steps + 1));
    if (!accepted && exit_code == CLI_EXIT_OK)
        exit_code = cli_fail("out of memory");
    int busy = 0;
    char *line = NULL; /* a lane line grows with its rounds */
    size_t line_size = 0;
    while (exit_code == CLI_EXIT_OK && getline(&line, &line_size, f) >= 0) {
        exit_code = read_lane(s, dir, path, line, accepted);
        busy++;
    }
    free(line);
    if (exit_code == CLI_EXIT_OK && busy != s->next_request - s->finished)
        exit_code = cli_fail("%s: %d requests in flight, %d lanes listed%s", path,
                             s->next_request - s->finished, busy,
                             busy < s->next_request - s->finished ? " (a truncated file?)" : "");
    free(accepted);
    fclose(f);
    return exit_code;
}
