/* The side-by-side table of `ssmstate run --modes` and its verdict. */
#ifndef SSM_TOOLS_MODES_REPORT_H
#define SSM_TOOLS_MODES_REPORT_H

#include <stdint.h>

#include "ssmstate/ssmstate.h"
#include "compare.h"
#include "session.h"

/* What a mode must be to native (docs/numerics.md). */
typedef enum modes_relation {
    MODES_BASELINE,    /* native itself */
    MODES_BITWISE,     /* compact: outputs and final states bit for bit */
    MODES_REPLAY,      /* replay: outputs within the bound, exported (materialized)
                        * states bit for bit */
    MODES_WITHIN_BOUND /* any other mode: outputs and states within the bound */
} modes_relation;

/* One mode's run, as the table shows it. */
typedef struct modes_report_mode {
    char name[64];
    char plugin_path[4096];
    modes_relation relation;
    ssm_plan plan;
    session_summary summary;
    compare_difference difference; /* against the baseline; unused for it */
    int32_t history;               /* replay: L; 0 for the others */
    int64_t folds;                 /* replay: derived from the fold rule */
} modes_report_mode;

/* Prints the session, the bounds and the table of modes[0..count) (modes[0]
 * the baseline) to stdout, and the reasons of every failure. Returns 1 when
 * every mode passes its reference check and its relation to the baseline. */
int modes_report_print(const ssm_config *config, const modes_report_mode *modes, int count);

#endif
