# SSM_CHECK_NCCL: NCCL's header, for the two-GPU hand-off program
# (examples/nccl/handoff.c). Needs SSM_CHECK_CUDA first: NCCL is only looked for
# with the CUDA runtime (ssm_have_cuda=yes).
#   --with-nccl       guess (default): build the program if nccl.h is found,
#                     in the CUDA include folder or on the default path
#   --with-nccl=DIR   nccl.h in DIR/include; an error if it is not there
#   --without-nccl    do not build it
# Only the header is needed: the program loads libnccl.so.2 with dlopen and is
# never linked with it, so the library and the other programs never depend on
# NCCL. Where DIR/lib (or DIR/lib64) holds libnccl.so.2, that file is the
# program's default library (NCCL_LIBRARY); otherwise "libnccl.so.2".
# Sets HAVE_NCCL (a conditional), NCCL_CPPFLAGS, NCCL_LIBRARY and
# ssm_have_nccl (yes/no) for the summary.
AC_DEFUN([SSM_CHECK_NCCL], [
  AC_REQUIRE([SSM_CHECK_CUDA])
  AC_ARG_WITH([nccl],
    [AS_HELP_STRING([--with-nccl@<:@=DIR@:>@],
      [build the two-GPU NCCL hand-off program against nccl.h (in DIR/include); needs CUDA (default: if found)])],
    [], [with_nccl=guess])
  ssm_have_nccl=no
  NCCL_CPPFLAGS=""
  NCCL_LIBRARY="libnccl.so.2"
  AS_CASE([$with_nccl],
    [no], [],
    [yes|guess], [ssm_nccl_dir=""],
    [ssm_nccl_dir="$with_nccl"])
  AS_IF([test "x$with_nccl" != xno && test "$ssm_have_cuda" != yes], [
    AS_IF([test "x$with_nccl" = xyes], [ssm_nccl_option="--with-nccl"],
      [ssm_nccl_option="--with-nccl=$with_nccl"])
    AS_IF([test "x$with_nccl" != xguess],
      [AC_MSG_ERROR([$ssm_nccl_option: the NCCL hand-off program needs the CUDA runtime, which this build does not have (see --with-cuda)])])
    with_nccl=no])
  AS_IF([test "x$with_nccl" != xno], [
    # DIR's own header, not one the CUDA include folder happens to hold.
    AS_IF([test -n "$ssm_nccl_dir" && test ! -f "$ssm_nccl_dir/include/nccl.h"],
      [AC_MSG_ERROR([--with-nccl=$ssm_nccl_dir: no $ssm_nccl_dir/include/nccl.h])])
    AS_IF([test -n "$ssm_nccl_dir"], [NCCL_CPPFLAGS="-I$ssm_nccl_dir/include"])
    ssm_save_CPPFLAGS="$CPPFLAGS"
    CPPFLAGS="$CPPFLAGS $NCCL_CPPFLAGS $CUDA_CPPFLAGS"
    # NCCL's header includes cuda_runtime.h; ncclSend and ncclRecv (NCCL 2.7
    # and later) are what the program calls.
    AC_MSG_CHECKING([for nccl.h with ncclSend and ncclRecv])
    AC_COMPILE_IFELSE([AC_LANG_PROGRAM([[#include <nccl.h>]],
        [[ncclResult_t (*send)(const void *, size_t, ncclDataType_t, int, ncclComm_t,
                              cudaStream_t) = ncclSend;
          ncclResult_t (*recv)(void *, size_t, ncclDataType_t, int, ncclComm_t,
                              cudaStream_t) = ncclRecv;
          return send == 0 || recv == 0;]])],
      [ssm_have_nccl=yes], [ssm_have_nccl=no])
    AC_MSG_RESULT([$ssm_have_nccl])
    CPPFLAGS="$ssm_save_CPPFLAGS"
    AS_IF([test "$ssm_have_nccl" != yes && test -n "$ssm_nccl_dir"],
      [AC_MSG_ERROR([--with-nccl=$ssm_nccl_dir: no usable nccl.h in $ssm_nccl_dir/include (NCCL 2.7 or later, compiled with $CUDA_CPPFLAGS)])])
    AS_IF([test "$ssm_have_nccl" != yes && test "x$with_nccl" = xyes],
      [AC_MSG_ERROR([--with-nccl: no usable nccl.h (NCCL 2.7 or later) in the CUDA include folder or on the default include path; give --with-nccl=DIR])])
    AS_IF([test "$ssm_have_nccl" = yes && test -n "$ssm_nccl_dir"], [
      for ssm_nccl_lib in "$ssm_nccl_dir/lib/libnccl.so.2" "$ssm_nccl_dir/lib64/libnccl.so.2"; do
        AS_IF([test -f "$ssm_nccl_lib"], [NCCL_LIBRARY="$ssm_nccl_lib"; break])
      done])
  ])
  AS_IF([test "$ssm_have_nccl" != yes], [NCCL_CPPFLAGS=""; NCCL_LIBRARY="libnccl.so.2"])
  AM_CONDITIONAL([HAVE_NCCL], [test "$ssm_have_nccl" = yes])
  AC_SUBST([NCCL_CPPFLAGS])
  AC_SUBST([NCCL_LIBRARY])
])
