/* What core/pages/page.c and core/pages/slice.c share about host pages. */
#ifndef SSM_CORE_PAGE_PRIVATE_H
#define SSM_CORE_PAGE_PRIVATE_H

#include <stdint.h>

#include "ssmstate/ssmstate.h"

/* The library version as 0x00MMmmpp, from PACKAGE_VERSION "M.m.p": what a
 * page's header records. */
uint32_t ssm_page_library_version(void);

/* Copies the heads of `small` (a slice within `big`'s) between the two
 * payloads: from big into small, or back when `into_big`. Per layer and
 * window row: q and k of the slice's key heads, v of its value heads
 * (core/pages/format.h's cut); then the slice's states. */
void ssm_page_copy_slice(const ssm_page_info *big, unsigned char *big_payload,
                         const ssm_page_info *small, unsigned char *small_payload, int into_big);

#endif
