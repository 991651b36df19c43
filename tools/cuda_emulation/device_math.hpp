#pragma once
// Emulated CUDA device math: the global-namespace overloads CUDA gives device code (min and max on
// integers and floats), the intrinsics the kernels use, and atomics. Device code calls expf, logf,
// fmaf, sqrt, isfinite unqualified: <math.h> provides them. Fast-math intrinsics (__expf, ...) get
// the accurate host function, so emulated results may be closer to the CPU's than a GPU's are.

#include <math.h>

#include <cfloat>
#include <cstdint>

inline int min(int a, int b) {
  return a < b ? a : b;
}
inline int max(int a, int b) {
  return a > b ? a : b;
}
inline unsigned min(unsigned a, unsigned b) {
  return a < b ? a : b;
}
inline unsigned max(unsigned a, unsigned b) {
  return a > b ? a : b;
}
inline long long min(long long a, long long b) {
  return a < b ? a : b;
}
inline long long max(long long a, long long b) {
  return a > b ? a : b;
}
inline float min(float a, float b) {
  return fminf(a, b);
}
inline float max(float a, float b) {
  return fmaxf(a, b);
}
inline double min(double a, double b) {
  return fmin(a, b);
}
inline double max(double a, double b) {
  return fmax(a, b);
}
inline float __expf(float x) {
  return expf(x);
}
inline float __logf(float x) {
  return logf(x);
}
inline float __fdividef(float a, float b) {
  return a / b;
}
inline float rsqrtf(float x) {
  return 1.0f / sqrtf(x);
}
inline int __popc(unsigned x) {
  return __builtin_popcount(x);
}
// Round-to-nearest float arithmetic that is never fused into an FMA (nvcc guarantees that for
// these intrinsics). The host compiler must not fuse either: GCC contracts a*b + c in C++ under
// -mfma, even across inlined calls, so each operand and result passes through a volatile, which
// no contraction can see through.
inline float emulated_unfused(float v) {
  volatile float opaque = v;
  return opaque;
}
inline float __fmul_rn(float a, float b) {
  return emulated_unfused(emulated_unfused(a) * emulated_unfused(b));
}
inline float __fadd_rn(float a, float b) {
  return emulated_unfused(emulated_unfused(a) + emulated_unfused(b));
}
inline float __fsub_rn(float a, float b) {
  return emulated_unfused(emulated_unfused(a) - emulated_unfused(b));
}

// Atomics: every launch runs on one host thread at a time, but the read-modify-write is atomic
// anyway, so the emulation stays right if that ever changes.
template <class T, class Op>
T emulated_atomic_update(T* address, T value, Op op) {
  T old;
  __atomic_load(address, &old, __ATOMIC_RELAXED);
  T next;
  do {
    next = op(old, value);
  } while (
      !__atomic_compare_exchange(address, &old, &next, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED));
  return old;
}
inline int atomicAdd(int* address, int value) {
  return __atomic_fetch_add(address, value, __ATOMIC_RELAXED);
}
inline unsigned atomicAdd(unsigned* address, unsigned value) {
  return __atomic_fetch_add(address, value, __ATOMIC_RELAXED);
}
inline unsigned long long atomicAdd(unsigned long long* address, unsigned long long value) {
  return __atomic_fetch_add(address, value, __ATOMIC_RELAXED);
}
inline float atomicAdd(float* address, float value) {
  return emulated_atomic_update(address, value, [](float a, float b) { return a + b; });
}
inline double atomicAdd(double* address, double value) {
  return emulated_atomic_update(address, value, [](double a, double b) { return a + b; });
}
inline int atomicMax(int* address, int value) {
  return emulated_atomic_update(address, value, [](int a, int b) { return a > b ? a : b; });
}
inline int atomicMin(int* address, int value) {
  return emulated_atomic_update(address, value, [](int a, int b) { return a < b ? a : b; });
}
inline int atomicExch(int* address, int value) {
  return __atomic_exchange_n(address, value, __ATOMIC_RELAXED);
}
inline int atomicCAS(int* address, int compare, int value) {
  __atomic_compare_exchange_n(address, &compare, value, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED);
  return compare;
}
inline void __threadfence() {
  __atomic_thread_fence(__ATOMIC_SEQ_CST);
}
