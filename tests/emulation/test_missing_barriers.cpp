// The emulator's reason to exist: a kernel missing a __syncthreads must fail under the schedules
// CI runs (forward and warps-reverse, tests/CMakeLists.txt), and the same kernel with its barriers
// must pass under every schedule. Two patterns, each with both of its barriers optional:
//   - tile reuse: a block stages tiles of A and B in shared memory and multiplies them, K tile by
//     K tile (the shape of backend/cuda/tiled_gemm.cuh);
//   - a block reduction called twice on one shared buffer (the shape of block_sum in launch.cuh).
// Inputs are small integers, so every correct summation order gives the exact same result.
#include <catch2/catch.hpp>

#include <cuda_runtime.h>

#include <algorithm>
#include <string>
#include <vector>

#include "backend/cuda/launch.cuh"

namespace emu = mnist::cuda::emulation;

namespace {

constexpr int kTile = 16;

template <bool kSyncAfterLoad, bool kSyncAfterUse>
__global__ void tile_product_kernel(int k_dim, const float* a /* [16, k_dim] */,
                                    const float* b /* [k_dim, 16] */, float* c /* [16, 16] */) {
  __shared__ float a_tile[kTile][kTile];
  __shared__ float b_tile[kTile][kTile];
  const int tx = threadIdx.x, ty = threadIdx.y;
  float acc = 0.0f;
  for (int k0 = 0; k0 < k_dim; k0 += kTile) {
    a_tile[ty][tx] = a[ty * k_dim + k0 + tx];
    b_tile[ty][tx] = b[(k0 + ty) * kTile + tx];
    if (kSyncAfterLoad) __syncthreads();
    for (int kk = 0; kk < kTile; ++kk) acc += a_tile[ty][kk] * b_tile[kk][tx];
    if (kSyncAfterUse) __syncthreads();
  }
  c[ty * kTile + tx] = acc;
}

template <bool kSyncAfterWrite, bool kSyncAfterRead>
__device__ float block_total(float value, float* shared /* [8] */) {
  for (int offset = 16; offset > 0; offset /= 2)
    value += __shfl_down_sync(0xffffffffu, value, offset);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (lane == 0) shared[warp] = value;
  if (kSyncAfterWrite) __syncthreads();
  value = 0.0f;
  if (warp == 0) {
    value = lane < 8 ? shared[lane] : 0.0f;
    for (int offset = 16; offset > 0; offset /= 2)
      value += __shfl_down_sync(0xffffffffu, value, offset);
  }
  if (kSyncAfterRead) __syncthreads();
  return value;
}

// Per block of 256 threads: the sum of x and the sum of y, through one shared buffer.
template <bool kSyncAfterWrite, bool kSyncAfterRead>
__global__ void two_sums_kernel(const float* x, const float* y, float* out /* [blocks, 2] */) {
  __shared__ float shared[8];
  const int i = blockIdx.x * 256 + threadIdx.x;
  const float sx = block_total<kSyncAfterWrite, kSyncAfterRead>(x[i], shared);
  const float sy = block_total<kSyncAfterWrite, kSyncAfterRead>(y[i], shared);
  if (threadIdx.x == 0) {
    out[blockIdx.x * 2] = sx;
    out[blockIdx.x * 2 + 1] = sy;
  }
}

std::vector<float> small_integers(std::size_t n, int seed) {
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<float>((i * 7 + seed * 13) % 9) - 4.0f;
  return v;
}

float* to_device(const std::vector<float>& host) {
  float* p = nullptr;
  REQUIRE(cudaMalloc(&p, host.size() * sizeof(float)) == cudaSuccess);
  REQUIRE(cudaMemcpy(p, host.data(), host.size() * sizeof(float), cudaMemcpyHostToDevice) ==
          cudaSuccess);
  return p;
}

// What one run of a kernel variant gave: right, wrong (how many elements) or a detected error.
struct Outcome {
  bool error = false;
  std::size_t wrong = 0;
  std::string text;
  bool caught() const { return error || wrong > 0; }
};

Outcome compare(const std::vector<float>& want, float* got_device) {
  Outcome o;
  const cudaError_t status = cudaGetLastError();
  if (status != cudaSuccess) {
    o.error = true;
    o.text = cudaGetErrorString(status);
    cudaDeviceReset();  // clears the sticky error for the next run
    return o;
  }
  std::vector<float> got(want.size());
  REQUIRE(cudaMemcpy(got.data(), got_device, got.size() * sizeof(float), cudaMemcpyDeviceToHost) ==
          cudaSuccess);
  for (std::size_t i = 0; i < want.size(); ++i) o.wrong += !(got[i] == want[i]);
  o.text = std::to_string(o.wrong) + " of " + std::to_string(want.size()) + " elements wrong";
  return o;
}

template <bool kSyncAfterLoad, bool kSyncAfterUse>
Outcome run_tile_product() {
  cudaGetLastError();  // a stale error of an earlier run must not count against this one
  const int k_dim = 4 * kTile;
  const std::vector<float> a = small_integers(kTile * k_dim, 1),
                           b = small_integers(k_dim * kTile, 2);
  std::vector<float> want(kTile * kTile, 0.0f);
  for (int i = 0; i < kTile; ++i)
    for (int j = 0; j < kTile; ++j)
      for (int k = 0; k < k_dim; ++k) want[i * kTile + j] += a[i * k_dim + k] * b[k * kTile + j];
  float *da = to_device(a), *db = to_device(b), *dc = nullptr;
  REQUIRE(cudaMalloc(&dc, want.size() * sizeof(float)) == cudaSuccess);
  MNIST_LAUNCH((tile_product_kernel<kSyncAfterLoad, kSyncAfterUse>), 1, dim3(kTile, kTile), 0,
               nullptr)
  (k_dim, da, db, dc);
  const Outcome o = compare(want, dc);
  cudaFree(da);
  cudaFree(db);
  cudaFree(dc);
  return o;
}

template <bool kSyncAfterWrite, bool kSyncAfterRead>
Outcome run_two_sums() {
  cudaGetLastError();
  const int blocks = 3;
  const std::vector<float> x = small_integers(blocks * 256, 3), y = small_integers(blocks * 256, 4);
  std::vector<float> want(blocks * 2, 0.0f);
  for (int i = 0; i < blocks * 256; ++i) {
    want[i / 256 * 2] += x[i];
    want[i / 256 * 2 + 1] += y[i];
  }
  float *dx = to_device(x), *dy = to_device(y), *dout = nullptr;
  REQUIRE(cudaMalloc(&dout, want.size() * sizeof(float)) == cudaSuccess);
  MNIST_LAUNCH((two_sums_kernel<kSyncAfterWrite, kSyncAfterRead>), blocks, 256, 0, nullptr)
  (dx, dy, dout);
  const Outcome o = compare(want, dout);
  cudaFree(dx);
  cudaFree(dy);
  cudaFree(dout);
  return o;
}

const char* const kCiSchedules[] = {"forward", "warps-reverse"};

// Runs `variant` under every schedule; returns which schedules caught it, and checks that the
// schedules CI runs catch it (broken) or that none does (correct).
template <class Variant>
void check_variant(const std::string& label, bool broken, Variant variant) {
  const emu::Schedule saved = emu::schedule();
  std::vector<std::string> caught_by;
  for (const char* name : emu::kScheduleNames) {
    emu::set_schedule(emu::parse_schedule(name, 7));
    const Outcome o = variant();
    INFO(label << " under " << name << ": " << (o.caught() ? o.text : "right"));
    if (!broken) CHECK_FALSE(o.caught());
    if (o.caught()) caught_by.push_back(name);
  }
  emu::set_schedule(saved);
  if (broken) {
    std::string list;
    for (const std::string& s : caught_by) list += " " + s;
    INFO(label << " caught by:" << (list.empty() ? " none" : list));
    bool by_ci = false;
    for (const char* ci : kCiSchedules)
      for (const std::string& s : caught_by) by_ci = by_ci || s == ci;
    CHECK(by_ci);
    // The prototype's finding, kept as a check: one random warp order alone also catches it.
    CHECK(std::find(caught_by.begin(), caught_by.end(), "warps-random") != caught_by.end());
  }
}

}  // namespace

TEST_CASE("tile reuse with both barriers is right under every schedule", "[emulation][barrier]") {
  check_variant("tile product", false, run_tile_product<true, true>);
}

TEST_CASE("tile reuse without the barrier after loading is caught", "[emulation][barrier]") {
  check_variant("tile product without sync after load", true, run_tile_product<false, true>);
}

TEST_CASE("tile reuse without the barrier before overwriting is caught", "[emulation][barrier]") {
  check_variant("tile product without sync after use", true, run_tile_product<true, false>);
}

TEST_CASE("a block reduction reusing its buffer with both barriers is right",
          "[emulation][barrier]") {
  check_variant("two block sums", false, run_two_sums<true, true>);
}

TEST_CASE("a block reduction without the barrier after writing is caught", "[emulation][barrier]") {
  check_variant("two block sums without sync after write", true, run_two_sums<false, true>);
}

TEST_CASE("a block reduction without the barrier before reusing its buffer is caught",
          "[emulation][barrier]") {
  check_variant("two block sums without sync before reuse", true, run_two_sums<true, false>);
}
