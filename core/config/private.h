/* What the pieces of the configuration share: config.c (the key table and
 * the owned config form), config_parse.c (INI text) and config_check.c (the
 * checks). Only these three files include it. */
#ifndef SSM_CORE_CONFIG_PRIVATE_H
#define SSM_CORE_CONFIG_PRIVATE_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include "core/internal.h"

/* Section and mode names: inih keeps a section name in 50 bytes. */
#define CONFIG_MAX_NAME 48

/* ------------------------------------------------------------ the keys */

enum {
    SECTION_MODEL,
    SECTION_STATE,
    SECTION_TUNING,
    SECTION_FIXED_COUNT,
    SECTION_MODE = SECTION_FIXED_COUNT, /* a section named after a mode plugin */
    SECTION_NONE                        /* before the first header */
};

/* The fixed sections' names, by SECTION_*. */
extern const char *const section_names[SECTION_FIXED_COUNT];

typedef enum config_key {
    KEY_NONE = -1,
    KEY_KIND,
    KEY_LAYERS,
    KEY_HEADS,
    KEY_VALUE_HEADS,
    KEY_KEY_DIM,
    KEY_VALUE_DIM,
    KEY_CONV_WIDTH,
    KEY_LOWER_BOUND,
    KEY_MODEL_HEADS,
    KEY_MODEL_VALUE_HEADS,
    KEY_FIRST_VALUE_HEAD,
    KEY_MODE,
    KEY_STATE_DTYPE,
    KEY_ACTIVATION_DTYPE,
    KEY_DEVICE,
    KEY_MAX_REQUESTS,
    KEY_MAX_DRAFT_TOKENS,
    KEY_PLUGIN_DIR,
    KEY_PREFILL_PRECISION,
    KEY_TUNING_MODE,
    KEY_TUNING_CACHE,
    KEY_TUNING_BUDGET_MS,
    KEY_COUNT
} config_key;

typedef struct key_spec {
    int section;
    const char *name;
    int required;
    int is_int; /* an int32_t at `offset` in ssm_config, allowed in [min, max] */
    size_t offset;
    int32_t min, max;
} key_spec;

/* Every key, by config_key, in file order (defined in config.c). */
extern const key_spec key_specs[KEY_COUNT];

/* An int key's allowed range, "1..4096" or ">= 1", written to buf; returns buf. */
const char *describe_range(const key_spec *spec, char *buf, size_t len);
/* Whether name[0..len) is 1 to CONFIG_MAX_NAME characters of a-z, 0-9 and _. */
int is_plain_name(const char *name, size_t len);

/* ---------------------------------------------------------------- errors */

/* Sets SSM_ERR_CONFIG with "source:line: message" (no line when line <= 0,
 * just the message when source is NULL) and returns it. */
ssm_status fail_atv(const char *source, int32_t line, const char *fmt, va_list ap);
/* Sets and returns SSM_ERR_OUT_OF_MEMORY, naming the config (source may be NULL). */
ssm_status fail_out_of_memory(const char *source);

/* ------------------------------------------------ the owned config form */

/* What ssm_config_load and ssm_config_clone return: the public struct first,
 * so its address is this one's, and everything it points to owned here. The
 * four mode-section arrays are parallel, as the public struct wants them. */
typedef struct config_owned {
    ssm_config config;
    char *mode;
    char *plugin_dir;
    char *source;
    char *tuning_cache;
    int32_t sections_capacity;
    char **section_names;
    int32_t *section_lines;
    int32_t *options_count;
    int32_t *options_capacity;
    ssm_mode_option **options;
} config_owned;

/* A fresh owned config holding ssm_config_defaults; NULL when out of memory. */
config_owned *owned_new(void);
/* Frees the owned config and all it points to; NULL is allowed. */
void owned_free(config_owned *owned);
/* Call after any owned_add_* and before handing out &owned->config. */
void owned_publish(config_owned *owned);
/* Appends mode section `name` (copied); its index, or -1 when out of memory. */
int32_t owned_add_section(config_owned *owned, const char *name, size_t name_len, int32_t line);
/* Appends a copy of key = value to mode section `section`; 0 when out of memory. */
int owned_add_option(config_owned *owned, int32_t section, const char *key, const char *value,
                     int32_t line);

/* ------------------------------------------------------------ checking */

/* Where the checks of one config report: with key lines when the config is
 * being loaded from a file, without when it came as a struct. */
typedef struct checker {
    const ssm_config *config;
    const int32_t *key_lines;    /* [KEY_COUNT], 0 = key absent; NULL: no lines */
    const int32_t *header_lines; /* [SECTION_FIXED_COUNT], or NULL */
} checker;

/* Runs every check on ck->config; the first failure is set as the error and
 * returned, at the line ck's tables give (if any). Mode sections are not looked at. */
ssm_status check_config(const checker *ck);

#endif
