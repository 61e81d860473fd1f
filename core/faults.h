/* The core's one allocator (docs/reliability.md): every heap allocation of
 * core/ goes through these wrappers, which count live allocations and can be
 * told to fail the Nth one from now. A test hook only: the symbols are hidden,
 * so libssmstate does not export them; tests that link libssmcore reach them.
 * Cost when no fault is armed: one relaxed atomic load and one relaxed
 * atomic add per allocation or free (none of which is on the step path).
 * Libc's own allocations behind dlopen, scandir, fopen and inih are not
 * counted. */
#ifndef SSM_CORE_FAULTS_H
#define SSM_CORE_FAULTS_H

#include <stddef.h>
#include <stdint.h>

/* malloc, calloc, realloc, strdup, strndup and free, counted. A failure
 * (real or injected) returns NULL with errno = ENOMEM and, for realloc,
 * leaves the block as it was. Memory from these goes back through
 * ssm_free (or ssm_realloc), never free. */
void *ssm_malloc(size_t bytes);
void *ssm_calloc(size_t count, size_t size);
void *ssm_realloc(void *ptr, size_t bytes);
char *ssm_strdup(const char *s);
char *ssm_strndup(const char *s, size_t n);
void ssm_free(void *ptr);

/* The current directory in a block from ssm_malloc, or NULL (errno set). */
char *ssm_getcwd(void);

/* For ssm_device_alloc/free (core/services.c), whose blocks come from
 * elsewhere: ssm_fault_take says whether this allocation must fail (and
 * counts it as an attempt); ssm_fault_track adds delta (+1 or -1) to the
 * live count. */
int ssm_fault_take(void);
void ssm_fault_track(int64_t delta);

/* ---- the test hook ---- */

/* Arms the hook: the nth allocation from now (n >= 1) fails, once; then
 * allocations succeed again. n = 0 disarms. Process-wide, thread-safe. */
void ssm_fault_fail_allocation(int64_t n);
/* Allocations from the core now live (allocated and not yet freed). */
int64_t ssm_fault_live(void);
/* Failures injected since the process started. */
int64_t ssm_fault_injected(void);

#endif
