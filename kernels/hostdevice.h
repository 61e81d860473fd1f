/* Marks inline math that compiles both as host C and as CUDA device code, so
 * the CPU reference and every kernel share one op order. */
#ifndef SSM_KERNELS_HOSTDEVICE_H
#define SSM_KERNELS_HOSTDEVICE_H
#if defined(__CUDACC__)
#define SSM_HD __host__ __device__ __forceinline__
#else
#define SSM_HD static inline
#endif
#endif
