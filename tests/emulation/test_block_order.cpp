// Blocks run one after another in the schedule's order (index order, reversed, or shuffled anew
// for each launch), as a GPU may run them in any order. So a kernel that reduces across its blocks
// ("last block", launch.cuh arrive_last) is right under every schedule, and one that assumes the
// highest block finishes last is caught by a schedule CI runs (warps-reverse).
#include <catch2/catch.hpp>

#include <cuda_runtime.h>

#include <algorithm>
#include <numeric>
#include <string>
#include <vector>

#include "backend/cuda/launch.cuh"

namespace emu = mnist::cuda::emulation;

namespace {

constexpr int kBlocks = 40;

__shared__ int last_block;

// Each block records when it ran.
__global__ void record_order_kernel(unsigned* next, int* order) {
  if (threadIdx.x == 0) order[atomicAdd(next, 1u)] = static_cast<int>(blockIdx.x);
}

// Block b contributes b + 1. The block that counts in last adds every contribution and says who
// it was; with assume_highest_last it instead trusts block gridDim.x - 1 to be last (wrong on a
// GPU, and under a reversed or shuffled block order).
__global__ void last_block_sum_kernel(bool assume_highest_last, int* partial, unsigned* counter,
                                      int* total, int* last) {
  if (threadIdx.x == 0) partial[blockIdx.x] = static_cast<int>(blockIdx.x) + 1;
  const bool is_last = mnist::cuda::arrive_last(counter, last_block);
  const bool adds = assume_highest_last ? blockIdx.x == gridDim.x - 1 : is_last;
  if (adds && threadIdx.x == 0) {
    const volatile int* all = partial;
    int sum = 0;
    for (unsigned b = 0; b < gridDim.x; ++b) sum += all[b];
    *total = sum;
    *last = static_cast<int>(blockIdx.x);
  }
  if (is_last) mnist::cuda::depart_last(counter);
}

template <class T>
T* device_zeros(std::size_t n) {
  T* p = nullptr;
  REQUIRE(cudaMalloc(&p, n * sizeof(T)) == cudaSuccess);
  REQUIRE(cudaMemset(p, 0, n * sizeof(T)) == cudaSuccess);
  return p;
}

template <class T>
std::vector<T> to_host(const T* p, std::size_t n) {
  std::vector<T> host(n);
  REQUIRE(cudaMemcpy(host.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost) == cudaSuccess);
  return host;
}

// Runs f under the named schedule, then restores the one before.
template <class F>
void under(const std::string& name, F&& f) {
  const emu::Schedule saved = emu::schedule();
  emu::set_schedule(emu::parse_schedule(name, 11));
  f();
  emu::set_schedule(saved);
}

}  // namespace

TEST_CASE("blocks run in the schedule's order", "[emulation][blocks]") {
  std::vector<int> identity(kBlocks);
  std::iota(identity.begin(), identity.end(), 0);
  for (const char* name : emu::kScheduleNames) {
    INFO("schedule " << name);
    under(name, [&] {
      std::vector<std::vector<int>> orders;
      for (int run = 0; run < 2; ++run) {
        unsigned* next = device_zeros<unsigned>(1);
        int* order = device_zeros<int>(kBlocks);
        MNIST_LAUNCH(record_order_kernel, kBlocks, 32, 0, nullptr)(next, order);
        REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
        orders.push_back(to_host(order, kBlocks));
        cudaFree(next);
        cudaFree(order);
      }
      std::vector<int> sorted = orders[0];
      std::sort(sorted.begin(), sorted.end());
      CHECK(sorted == identity);  // every block exactly once
      const std::string s = name;
      if (s == "forward" || s == "warps-forward") CHECK(orders[0] == identity);
      if (s == "reverse" || s == "warps-reverse")
        CHECK(orders[0] == std::vector<int>(identity.rbegin(), identity.rend()));
      if (s == "random" || s == "warps-random") {
        CHECK(orders[0] != identity);
        CHECK(orders[0] != orders[1]);  // another order for each launch
      }
    });
  }
}

TEST_CASE(
    "a last-block reduction is right under every block order; trusting the highest block "
    "is caught",
    "[emulation][blocks]") {
  constexpr int kWant = kBlocks * (kBlocks + 1) / 2;
  for (const char* name : emu::kScheduleNames) {
    INFO("schedule " << name);
    under(name, [&] {
      for (const bool assume_highest_last : {false, true}) {
        INFO((assume_highest_last ? "trusting the highest block" : "the last block to count in"));
        int* partial = device_zeros<int>(kBlocks);
        unsigned* counter = device_zeros<unsigned>(1);
        int* total = device_zeros<int>(1);
        int* last = device_zeros<int>(1);
        MNIST_LAUNCH(last_block_sum_kernel, kBlocks, 64, 0, nullptr)
        (assume_highest_last, partial, counter, total, last);
        REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
        const int got = to_host(total, 1)[0];
        const std::string s = name;
        const bool reversed = s == "reverse" || s == "warps-reverse";
        if (!assume_highest_last) {
          CHECK(got == kWant);
        } else if (reversed) {
          CHECK(got != kWant);  // the highest block added before the others had written
        }
        CHECK(to_host(counter, 1)[0] == 0u);  // depart_last left it for the next kernel
        if (!assume_highest_last && reversed) CHECK(to_host(last, 1)[0] == 0);
        cudaFree(partial);
        cudaFree(counter);
        cudaFree(total);
        cudaFree(last);
      }
    });
  }
}
