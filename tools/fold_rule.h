/* Replay's fold rule (docs/modes.md, "The fold rule"), from which the
 * command derives fold counts: the library does not report folds. Shared by
 * `ssmstate run --modes` and `ssmstate serve`. */
#ifndef SSM_TOOLS_FOLD_RULE_H
#define SSM_TOOLS_FOLD_RULE_H

#include <stdint.h>

#include "ssmstate/ssmstate.h"
#include "session.h"

/* The replay mode's defaults when [replay] sets none. */
enum { FOLD_RULE_DEFAULT_HISTORY = 16, FOLD_RULE_DEFAULT_FOLD_ROWS = 8 };

/* An integer key of the config's [replay] section, or `fallback` when the
 * section or key is absent; the plugin checks the value when a replay
 * context is created. */
int32_t fold_rule_option(const ssm_config *c, const char *key, int32_t fallback);

/* The value of a key of the config's [replay] section as written, or NULL. */
const char *fold_rule_option_text(const ssm_config *c, const char *key);

/* One layer's step of one row: `since_checkpoint` is n, the records the
 * layer committed since its checkpoint. A decode or verify of `tokens`
 * tokens first folds when n + 2 * tokens > history, then commits `keep`; a
 * decode of at most fold_rows rows then folds again (the ring stays empty);
 * a prefill materializes (a fold only when n > 0) and leaves nothing
 * pending. Updates n and returns the folds of the step (0 or 1). */
int fold_rule_step(int32_t *since_checkpoint, const session_block *b, int32_t history,
                   int32_t fold_rows);

#endif
