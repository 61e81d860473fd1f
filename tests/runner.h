/* Each test program defines make_suite() and links runner.c, which runs it
 * and prints TAP (CK_TAP_LOG_FILE_NAME=- under `make check`). */
#ifndef SSM_TESTS_RUNNER_H
#define SSM_TESTS_RUNNER_H
#include <check.h>
Suite *make_suite(void);
#endif
