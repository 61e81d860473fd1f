# AX_PTHREAD_SIMPLE: -pthread for thread-local error state and tests.
AC_DEFUN([AX_PTHREAD_SIMPLE], [
  AC_SEARCH_LIBS([pthread_create], [pthread], [], [AC_MSG_ERROR([pthreads are required])])
])
