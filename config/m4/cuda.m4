# SSM_CHECK_CUDA: optional CUDA.
#   --with-cuda       guess (default): use CUDA if nvcc and the runtime are found
#   --with-cuda=DIR   use the toolkit in DIR; an error if it is not usable
#   --without-cuda    CPU only
# Sets HAVE_NVCC (kernels can be compiled) and HAVE_CUDA (the runtime links)
# apart, as conditionals and in config.h. NVCC_ARCH defaults to sm_90.
AC_DEFUN([SSM_CHECK_CUDA], [
  AC_ARG_WITH([cuda],
    [AS_HELP_STRING([--with-cuda@<:@=DIR@:>@], [build CUDA kernels (default: if found)])],
    [], [with_cuda=guess])
  AC_ARG_VAR([NVCC], [CUDA compiler])
  AC_ARG_VAR([NVCC_ARCH], [nvcc -gencode flags (default: sm_90)])
  AS_IF([test -z "$NVCC_ARCH"], [NVCC_ARCH="-gencode=arch=compute_90,code=sm_90"])
  ssm_have_nvcc=no
  ssm_have_cuda=no
  AS_IF([test "x$with_cuda" != xno], [
    AS_CASE([$with_cuda],
      [yes|guess], [ssm_cuda_dir=""],
      [ssm_cuda_dir="$with_cuda"])
    AS_IF([test -z "$ssm_cuda_dir" && test -z "$NVCC"], [
      AC_PATH_PROG([NVCC], [nvcc], [], [$PATH:/usr/local/cuda/bin])])
    AS_IF([test -n "$ssm_cuda_dir" && test -z "$NVCC"], [NVCC="$ssm_cuda_dir/bin/nvcc"])
    AS_IF([test -n "$NVCC" && test -x "$NVCC"], [
      ssm_have_nvcc=yes
      AS_IF([test -z "$ssm_cuda_dir"], [ssm_cuda_dir=`dirname "$NVCC"`/..])])
    AS_IF([test "$ssm_have_nvcc" = yes], [
      CUDA_CPPFLAGS="-I$ssm_cuda_dir/include"
      CUDA_LDFLAGS="-L$ssm_cuda_dir/lib64 -Wl,-rpath,$ssm_cuda_dir/lib64"
      ssm_save_LIBS="$LIBS"; ssm_save_LDFLAGS="$LDFLAGS"; ssm_save_CPPFLAGS="$CPPFLAGS"
      LDFLAGS="$LDFLAGS $CUDA_LDFLAGS"; CPPFLAGS="$CPPFLAGS $CUDA_CPPFLAGS"
      AC_CHECK_HEADER([cuda_runtime_api.h],
        [AC_CHECK_LIB([cudart], [cudaGetDeviceCount], [ssm_have_cuda=yes])])
      LIBS="$ssm_save_LIBS"; LDFLAGS="$ssm_save_LDFLAGS"; CPPFLAGS="$ssm_save_CPPFLAGS"
      CUDA_LIBS="-lcudart"])
    AS_IF([test "x$with_cuda" != xguess && test "$ssm_have_cuda" != yes],
      [AC_MSG_ERROR([--with-cuda=$with_cuda: no usable nvcc and CUDA runtime found])])
  ])
  AS_IF([test "$ssm_have_cuda" != yes], [CUDA_CPPFLAGS=""; CUDA_LDFLAGS=""; CUDA_LIBS=""])
  AS_IF([test "$ssm_have_nvcc" = yes], [AC_DEFINE([HAVE_NVCC], [1], [CUDA kernels are built])])
  AS_IF([test "$ssm_have_cuda" = yes], [AC_DEFINE([HAVE_CUDA], [1], [CUDA runtime is linked])])
  AM_CONDITIONAL([HAVE_NVCC], [test "$ssm_have_nvcc" = yes])
  AM_CONDITIONAL([HAVE_CUDA], [test "$ssm_have_cuda" = yes])
  AC_SUBST([CUDA_CPPFLAGS])
  AC_SUBST([CUDA_LDFLAGS])
  AC_SUBST([CUDA_LIBS])
])
