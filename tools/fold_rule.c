/* Replay's fold rule (see fold_rule.h). */
#include <stdlib.h>
#include <string.h>

#include "fold_rule.h"
#include "kernels/replay.h"

const char *fold_rule_option_text(const ssm_config *c, const char *key)
{
    for (int32_t s = 0; s < c->mode_sections_count; s++) {
        if (strcmp(c->mode_section_names[s], "replay") != 0)
            continue;
        for (int32_t i = 0; i < c->mode_options_count[s]; i++)
            if (!strcmp(c->mode_options[s][i].key, key))
                return c->mode_options[s][i].value;
    }
    return NULL;
}

int32_t fold_rule_option(const ssm_config *c, const char *key, int32_t fallback)
{
    const char *value = fold_rule_option_text(c, key);
    return value ? (int32_t)strtol(value, NULL, 10) : fallback;
}

int fold_rule_step(int32_t *since_checkpoint, const session_block *b, int32_t history,
                   int32_t fold_rows)
{
    int folds;
    if (b->kind == SESSION_PREFILL) {
        folds = *since_checkpoint > 0;
        *since_checkpoint = 0;
        return folds;
    }
    if (b->kind == SESSION_DECODE && b->rows <= fold_rows) {
        *since_checkpoint = 0; /* history and token go into the checkpoint: one fold */
        return 1;
    }
    folds = ssm_replay_folds(*since_checkpoint, b->tokens, history);
    if (folds)
        *since_checkpoint = 0;
    *since_checkpoint += b->keep;
    return folds;
}
