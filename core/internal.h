/* Internals shared by the core's files. Never included by plugins. */
#ifndef SSM_CORE_INTERNAL_H
#define SSM_CORE_INTERNAL_H

#include <stdarg.h>

#include "ssmstate/ssmstate.h"
#include "ssmstate/plugin.h"
#include "core/faults.h" /* the core allocates only through these */

/* Records `code` and a printf-style message as this thread's last error and
 * returns `code`, so error paths read `return ssm_error_set(...)`. */
ssm_status ssm_error_set(ssm_status code, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
ssm_status ssm_error_setv(ssm_status code, const char *fmt, va_list ap);

/* Logging to stderr, level from $SSMSTATE_LOG (0 error .. 3 debug; default 1). */
void ssm_log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void ssm_logv(int level, const char *fmt, va_list ap);

/* ---- config (core/config/config.c) ---- */

/* Parses INI text; `source` names it in messages ("file:line: ..."). */
ssm_status ssm_config_parse_text(const char *text, const char *source, ssm_config **out);
/* Checks a config struct as ssm_config_load checks a file (without lines when
 * the struct did not come from a file). Does not look at mode sections. */
ssm_status ssm_config_validate(const ssm_config *config);
/* Deep copy owned by the result (release with ssm_config_free). */
ssm_status ssm_config_clone(const ssm_config *config, ssm_config **out);
/* "file:line: " prefix (or "" with no source) written to buf. */
const char *ssm_config_where(const ssm_config *config, int32_t line, char *buf, size_t len);
/* Index of the mode section called `name`, or -1. */
int32_t ssm_config_find_section(const ssm_config *config, const char *name);

/* CRC32C (Castagnoli) of `bytes` bytes: the state page's checksum (core/pages/page.c),
 * with the processor's instruction where it has one. */
uint32_t ssm_crc32c(const void *data, size_t bytes);
/* The same with the tables alone, whatever the processor (the tests hold both forms). */
uint32_t ssm_crc32c_portable(const void *data, size_t bytes);

#endif
