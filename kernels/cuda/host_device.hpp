// MESHPLAN_HD marks a function that nvcc compiles for both the GPU and the
// host and a host compiler compiles as a plain function: the arithmetic of
// the *_rows.hpp headers, which the CUDA kernels run and host tests check.
#pragma once

#if defined(__CUDACC__)
#define MESHPLAN_HD __host__ __device__
#else
#define MESHPLAN_HD
#endif
