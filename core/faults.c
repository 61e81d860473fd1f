/* Counting allocator and allocation-fault hook (see faults.h). */
#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/faults.h"

static _Atomic int64_t countdown; /* 0: off; k: the kth allocation from now fails */
static _Atomic int64_t live;
static _Atomic int64_t injected;

/* 1 when the allocation being made must fail: the armed countdown reached it. */
int ssm_fault_take(void)
{
    int64_t left = atomic_load_explicit(&countdown, memory_order_relaxed);
    while (left > 0) {
        if (atomic_compare_exchange_weak_explicit(&countdown, &left, left - 1,
                                                  memory_order_relaxed, memory_order_relaxed)) {
            if (left != 1)
                return 0;
            atomic_fetch_add_explicit(&injected, 1, memory_order_relaxed);
            errno = ENOMEM;
            return 1;
        }
    }
    return 0;
}

/* Adds delta to the live count. */
void ssm_fault_track(int64_t delta)
{
    atomic_fetch_add_explicit(&live, delta, memory_order_relaxed);
}

/* Counts a successful allocation `ptr` (NULL: none) and returns it. */
static void *counted(void *ptr)
{
    if (ptr)
        ssm_fault_track(1);
    return ptr;
}

void *ssm_malloc(size_t bytes)
{
    return ssm_fault_take() ? NULL : counted(malloc(bytes));
}

void *ssm_calloc(size_t count, size_t size)
{
    return ssm_fault_take() ? NULL : counted(calloc(count, size));
}

/* A NULL ptr is an allocation (counted); otherwise the block moves or stays.
 * Zero bytes asks for one: glibc's realloc(p, 0) frees p and returns NULL,
 * which a caller would take for a failure that left p. */
void *ssm_realloc(void *ptr, size_t bytes)
{
    if (ssm_fault_take())
        return NULL;
    void *grown = realloc(ptr, bytes ? bytes : 1);
    return ptr ? grown : counted(grown);
}

char *ssm_strdup(const char *s)
{
    return ssm_strndup(s, strlen(s));
}

char *ssm_strndup(const char *s, size_t n)
{
    size_t len = strnlen(s, n);
    char *copy = ssm_malloc(len + 1);
    if (copy) {
        memcpy(copy, s, len);
        copy[len] = '\0';
    }
    return copy;
}

void ssm_free(void *ptr)
{
    if (ptr)
        ssm_fault_track(-1);
    free(ptr);
}

char *ssm_getcwd(void)
{
    char *cwd = getcwd(NULL, 0); /* libc's block, any length */
    char *copy = cwd ? ssm_strdup(cwd) : NULL;
    int error = errno;
    free(cwd);
    errno = error;
    return copy;
}

void ssm_fault_fail_allocation(int64_t n)
{
    atomic_store_explicit(&countdown, n > 0 ? n : 0, memory_order_relaxed);
}

int64_t ssm_fault_live(void)
{
    return atomic_load_explicit(&live, memory_order_relaxed);
}

int64_t ssm_fault_injected(void)
{
    return atomic_load_explicit(&injected, memory_order_relaxed);
}
