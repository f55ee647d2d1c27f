// How long libgomp's idle threads spin before they sleep, fixed before the
// library reads it. The kernels' OpenMP loops and (with Debian's OpenMP
// build of OpenBLAS, CMakeLists.txt) the BLAS share libgomp's thread pool;
// its default spin count (300,000 iterations) keeps every idle thread busy
// for a while after each parallel loop. That is free on an idle machine and
// ruinous when two jobs share the cores: two 2-thread Fashion-MNIST trainings
// on 2 cores took 36.6 s together, 5.2 s with GOMP_SPINCOUNT=3000, while a
// lone 2-thread GPT step was as fast (0.239 s against 0.252 s; no spinning at
// all: 0.288 s). libgomp reads the variable once, when it is loaded, before
// main() runs, so the only way to set it for this process is to run the
// program again with it set.
//
// Defines: reexec_with_openmp_spin_limit.
#pragma once

namespace meshplan::cli {

// Spin iterations set when the user set neither GOMP_SPINCOUNT nor OMP_WAIT_POLICY.
inline constexpr const char* kDefaultGompSpinCount = "3000";

// When neither variable is set: sets GOMP_SPINCOUNT and execs /proc/self/exe
// with the same arguments (does not return on success). Returns when a
// variable was already set, or when exec failed (the program then goes on
// with libgomp's defaults).
void reexec_with_openmp_spin_limit(char** argv);

}  // namespace meshplan::cli
