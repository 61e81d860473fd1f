/* The config's number rules: strict decimal integers and finite decimal
 * reals, nothing before or after. One definition for the library's parser
 * and for the command's [workload] reader, so both read a value alike. */
#ifndef SSM_CORE_CONFIG_NUMBERS_H
#define SSM_CORE_CONFIG_NUMBERS_H

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef enum parse_result { PARSE_OK, PARSE_BAD, PARSE_RANGE } parse_result;

/* Decimal, nothing before or after; "" and " 1" are not integers. */
static inline parse_result parse_int32(const char *text, int32_t *out)
{
    if (!(text[0] == '-' || text[0] == '+' || isdigit((unsigned char)text[0])))
        return PARSE_BAD;
    char *end;
    errno = 0;
    long long value = strtoll(text, &end, 10);
    if (end == text || *end != '\0')
        return PARSE_BAD;
    if (errno == ERANGE || value < INT32_MIN || value > INT32_MAX)
        return PARSE_RANGE;
    *out = (int32_t)value;
    return PARSE_OK;
}

/* Decimal digits only: strtoull would take "-1" as 2^64 - 1. */
static inline parse_result parse_uint64(const char *text, uint64_t *out)
{
    if (!isdigit((unsigned char)text[0]))
        return PARSE_BAD;
    char *end;
    errno = 0;
    unsigned long long value = strtoull(text, &end, 10);
    if (*end != '\0')
        return PARSE_BAD;
    if (errno == ERANGE)
        return PARSE_RANGE;
    *out = (uint64_t)value;
    return PARSE_OK;
}

/* A finite decimal number; "nan", "inf", hexadecimal ("0x1p2", which strtod
 * takes) and overflow are not. */
static inline parse_result parse_double(const char *text, double *out)
{
    if (!(text[0] == '-' || text[0] == '+' || text[0] == '.' || isdigit((unsigned char)text[0])) ||
        text[strspn(text, "0123456789+-.eE")] != '\0')
        return PARSE_BAD;
    char *end;
    errno = 0;
    double value = strtod(text, &end);
    if (end == text || *end != '\0')
        return PARSE_BAD;
    if (!isfinite(value) || (errno == ERANGE && fabs(value) > 1.0))
        return PARSE_RANGE;
    *out = value;
    return PARSE_OK;
}

#endif
