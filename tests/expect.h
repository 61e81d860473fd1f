/* EXPECT for Check suites: a call's exact status, or the test fails naming
 * the call, both statuses and the library's message. */
#ifndef SSM_TESTS_EXPECT_H
#define SSM_TESTS_EXPECT_H

#include <check.h>

#include "ssmstate/ssmstate.h"

#define EXPECT(call, want)                                                                   \
    do {                                                                                     \
        ssm_status got_ = (call);                                                            \
        ck_assert_msg(got_ == (want), "%s: got %s, want %s (%s)", #call,                    \
                      ssm_status_name(got_), ssm_status_name(want), ssm_last_error());       \
    } while (0)

#endif
