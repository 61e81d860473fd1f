# SSM_SANITIZERS: --enable-sanitizers[=LIST] (after SSM_CHECK_CUDA).
#   LIST is what -fsanitize= takes: address,undefined (the default for a bare
#   --enable-sanitizers), thread, ... Adds
#   -fsanitize=LIST -fno-omit-frame-pointer -fno-sanitize-recover=all
# to CFLAGS and LDFLAGS, so the library, plugins, command and tests are all
# compiled and linked with it. nvcc code cannot be instrumented: refused
# unless CUDA is off (--without-cuda). SSM_SANITIZER_ENV is shell code for
# the test environment that makes any report fail its test (see
# tests/threads/threads.am); empty without sanitizers.
AC_DEFUN([SSM_SANITIZERS], [
  AC_ARG_ENABLE([sanitizers],
    [AS_HELP_STRING([--enable-sanitizers@<:@=LIST@:>@],
      [build with -fsanitize=LIST (default LIST: address,undefined); CPU builds only])],
    [], [enable_sanitizers=no])
  AS_CASE([$enable_sanitizers],
    [yes], [enable_sanitizers=address,undefined],
    [no|""], [enable_sanitizers=no])
  SSM_SANITIZER_ENV=""
  AS_IF([test "x$enable_sanitizers" != xno], [
    AS_IF([test "$ssm_have_nvcc" = yes || test "$ssm_have_cuda" = yes],
      [AC_MSG_ERROR([--enable-sanitizers is for CPU builds: add --without-cuda])])
    ssm_san_flags="-fsanitize=$enable_sanitizers -fno-omit-frame-pointer -fno-sanitize-recover=all"
    AC_MSG_CHECKING([whether $CC links with $ssm_san_flags])
    ssm_save_CFLAGS="$CFLAGS"; ssm_save_LDFLAGS="$LDFLAGS"
    CFLAGS="$CFLAGS $ssm_san_flags"; LDFLAGS="$LDFLAGS $ssm_san_flags"
    AC_LINK_IFELSE([AC_LANG_PROGRAM([], [])], [AC_MSG_RESULT([yes])],
      [AC_MSG_RESULT([no]); AC_MSG_ERROR([$CC cannot build with $ssm_san_flags])])
    CFLAGS="$ssm_save_CFLAGS $ssm_san_flags"; LDFLAGS="$ssm_save_LDFLAGS $ssm_san_flags"
    # Any report fails the test: ASan and UBSan stop at the first, TSan
    # reports all. Exits: ASan and LeakSanitizer 23 (LSAN_OPTIONS' exitcode
    # is the one the two share), UBSan 98, TSan 66: none a status a test
    # expects.
    # Check forks each test: a child's non-zero exit fails that test. Check's
    # timeouts are stretched for the slower instrumented code.
    ssm_san_mult=3
    AS_CASE([,$enable_sanitizers,], [*,thread,*], [ssm_san_mult=10])
    SSM_SANITIZER_ENV="ASAN_OPTIONS=halt_on_error=1:abort_on_error=0:exitcode=97:detect_leaks=1:strict_string_checks=1:detect_stack_use_after_return=1 \
LSAN_OPTIONS=exitcode=23 \
UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1:exitcode=98 \
TSAN_OPTIONS=halt_on_error=0:exitcode=66:second_deadlock_stack=1:suppressions=\$(abs_top_srcdir)/tests/threads/tsan.supp \
CK_TIMEOUT_MULTIPLIER=$ssm_san_mult; \
export ASAN_OPTIONS LSAN_OPTIONS UBSAN_OPTIONS TSAN_OPTIONS CK_TIMEOUT_MULTIPLIER;"
  ])
  AC_SUBST([SSM_SANITIZER_ENV])
])
