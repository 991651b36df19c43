#pragma once
// Emulated CUDA execution model: kernels compiled as plain C++ run on the CPU.
//
// A launch runs its blocks one after another on the calling host thread. The threads of a block
// are fibers (Boost.Context), resumed by a scheduler in an order chosen by the schedule below.
// Every synchronisation point parks its fiber: __syncthreads() waits until every live (not yet
// returned) thread of the block waits at the SAME __syncthreads; a warp-level operation
// (__shfl_*_sync, __ballot_sync, __syncwarp) waits until every lane named in its mask has
// arrived, then exchanges the values. Between two synchronisation points a fiber runs without
// interruption, so what a schedule varies is which thread's stretch runs first; a kernel that is
// correct only under one order is missing a barrier.
//
// Static __shared__ variables are placed in one linker section that is filled with 0xFF bytes
// (NaN as float or double) when each block starts, so a read of shared memory nobody wrote in this
// block shows up. There is one copy of it per process: launches from different host threads (the
// workers of a multi-GPU run) take turns.
//
// Detected errors end the launch with cudaErrorLaunchFailure (sticky on the device) and a message
// naming the kernel, its launch site and what went wrong: threads waiting at two different
// __syncthreads, a warp operation whose mask names a lane that has returned (or that does not
// exist), a warp operation left waiting forever. Invalid configurations (more than 1024 threads,
// a grid dimension over CUDA's limits, more than 48 KB of dynamic shared memory) return
// cudaErrorInvalidConfiguration / cudaErrorInvalidValue like a real launch. See README.md for what
// is not emulated.
//
// Schedule (MNIST_CUDA_EMULATION_SCHEDULE, or set_schedule()): forward | reverse | random resume
// every runnable thread once per pass in index order, reversed or shuffled; warps-forward |
// warps-reverse | warps-random run each warp (lanes in that order) as far as it can get before
// the next warp starts, warps taken in that order. MNIST_CUDA_EMULATION_SEED seeds "random".

#include "cuda_emulation/runtime.hpp"

#include <sys/mman.h>

#include <algorithm>
#include <boost/context/fiber.hpp>
#include <cstdint>
#include <memory>
#include <random>
#include <stdexcept>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

// ---- qualifiers and built-in types --------------------------------------------------------
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __shared__ __attribute__((section("mnist_emulated_shared"), aligned(16))) static

struct uint3 {
  unsigned x, y, z;
};
struct dim3 {
  unsigned x, y, z;
  constexpr dim3(unsigned vx = 1, unsigned vy = 1, unsigned vz = 1) : x(vx), y(vy), z(vz) {}
  constexpr dim3(uint3 v) : x(v.x), y(v.y), z(v.z) {}
};
struct alignas(16) double2 {
  double x, y;
};
struct alignas(8) float2 {
  float x, y;
};
inline double2 make_double2(double x, double y) {
  return double2{x, y};
}
inline float2 make_float2(float x, float y) {
  return float2{x, y};
}
constexpr int warpSize = 32;

// The built-in index variables: per host thread, set by the scheduler before it resumes a fiber
// (all fibers of a launch run on the launching host thread).
inline thread_local uint3 threadIdx{0, 0, 0};
inline thread_local uint3 blockIdx{0, 0, 0};
inline thread_local dim3 blockDim{1, 1, 1};
inline thread_local dim3 gridDim{1, 1, 1};

// The section's bounds, defined by the linker (weak: a program without __shared__ has none).
extern "C" char __start_mnist_emulated_shared[] __attribute__((weak));
extern "C" char __stop_mnist_emulated_shared[] __attribute__((weak));

namespace mnist::cuda::emulation {

// ---- schedules ----------------------------------------------------------------------------
enum class Order { forward, reverse, random };
struct Schedule {
  Order order = Order::forward;
  bool by_warp = false;  // warp by warp instead of one stretch per thread per pass
  unsigned seed = 1;     // for Order::random
};

inline const char* const kScheduleNames[] = {"forward",       "reverse",       "random",
                                             "warps-forward", "warps-reverse", "warps-random"};

inline std::string schedule_name(const Schedule& s) {
  return kScheduleNames[static_cast<int>(s.order) + (s.by_warp ? 3 : 0)];
}

// "forward", "warps-reverse", ...; throws std::invalid_argument naming the known ones.
inline Schedule parse_schedule(const std::string& name, unsigned seed = 1) {
  for (int i = 0; i < 6; ++i)
    if (name == kScheduleNames[i]) return Schedule{static_cast<Order>(i % 3), i >= 3, seed};
  std::string known;
  for (const char* n : kScheduleNames) known += (known.empty() ? "" : ", ") + std::string(n);
  throw std::invalid_argument("emulated CUDA: unknown schedule '" + name + "'; known: " + known);
}

namespace detail {

inline Schedule& current_schedule() {
  static Schedule schedule = [] {
    const char* seed = std::getenv("MNIST_CUDA_EMULATION_SEED");
    const unsigned s = seed ? static_cast<unsigned>(std::strtoul(seed, nullptr, 10)) : 1u;
    const char* name = std::getenv("MNIST_CUDA_EMULATION_SCHEDULE");
    return parse_schedule(name && *name ? name : "forward", s);
  }();
  return schedule;
}

}  // namespace detail

inline Schedule schedule() {
  return detail::current_schedule();
}
// For tests that try several schedules in one process; takes effect at the next launch.
inline void set_schedule(const Schedule& s) {
  detail::current_schedule() = s;
}

namespace detail {
namespace ctx = boost::context;

// Fiber stacks: mapped once per host thread, with a guard page below each, and reused.
#if MNIST_EMULATION_ASAN
constexpr std::size_t kStackBytes = std::size_t{256} << 10;  // instrumented frames are larger
#else
constexpr std::size_t kStackBytes = std::size_t{64} << 10;
#endif
constexpr std::size_t kGuardBytes = 4096;

class StackPool {
 public:
  ~StackPool() {
    for (void* base : free_) munmap(base, kStackBytes + kGuardBytes);
  }
  ctx::stack_context allocate() {
    void* base;
    if (free_.empty()) {
      base = mmap(nullptr, kStackBytes + kGuardBytes, PROT_READ | PROT_WRITE,
                  MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
      if (base == MAP_FAILED) throw std::bad_alloc();
      mprotect(base, kGuardBytes, PROT_NONE);  // a stack overflow faults instead of corrupting
    } else {
      base = free_.back();
      free_.pop_back();
    }
    ctx::stack_context stack;
    stack.size = kStackBytes;
    stack.sp = static_cast<char*>(base) + kGuardBytes + kStackBytes;
    return stack;
  }
  void deallocate(ctx::stack_context& stack) noexcept {
    free_.push_back(static_cast<char*>(stack.sp) - stack.size - kGuardBytes);
  }

 private:
  std::vector<void*> free_;
};
inline thread_local StackPool stack_pool;
struct PooledStack {
  ctx::stack_context allocate() { return stack_pool.allocate(); }
  void deallocate(ctx::stack_context& stack) noexcept { stack_pool.deallocate(stack); }
};

enum class State : std::uint8_t { runnable, at_barrier, at_warp_op, returned };
enum class WarpOp : std::uint8_t { syncwarp, shuffle, ballot };

struct Site {
  const char* file = "";
  int line = 0;
};
inline std::string text(const Site& s) {
  return std::string(s.file) + ":" + std::to_string(s.line);
}

struct Block;
struct Thread {
  uint3 index{};
  unsigned linear = 0;
  State state = State::runnable;
  ctx::fiber fiber;
  Site site;  // where it waits (barrier or warp operation)
  // A warp operation in progress: what this lane brings and what it gets back.
  WarpOp op = WarpOp::syncwarp;
  unsigned mask = 0;
  int source_lane = 0;
  std::uint64_t value = 0, result = 0;
};

struct Launch {
  const char* kernel;
  Site site;
  int device;
};

struct Block {
  const Launch* launch = nullptr;
  uint3 index{};
  dim3 dim, grid;
  std::vector<Thread> threads;
  std::vector<unsigned> warp_arrived;  // per warp: lanes waiting at a warp operation
  ctx::fiber scheduler;                // the scheduler, while a thread runs
  void (*body)(void*) = nullptr;
  void* body_arg = nullptr;
  std::string error;
  bool draining = false;  // after an error: synchronisation points return at once
};

inline thread_local Thread* running = nullptr;
inline thread_local Block* running_block = nullptr;

inline void fail(Block& b, const std::string& what) {
  if (!b.error.empty()) return;
  b.error = std::string(b.launch->kernel) + " launched at " + text(b.launch->site) +
            " on emulated GPU " + std::to_string(b.launch->device) + ", block (" +
            std::to_string(b.index.x) + "," + std::to_string(b.index.y) + "," +
            std::to_string(b.index.z) + "): " + what;
}

// Back to the scheduler; returns when the scheduler resumes this thread.
inline void park() {
  Block& b = *running_block;
  b.scheduler = std::move(b.scheduler).resume();
}

inline std::string thread_text(const Thread& t) {
  return "thread (" + std::to_string(t.index.x) + "," + std::to_string(t.index.y) + "," +
         std::to_string(t.index.z) + ")";
}

inline void syncthreads(Site site) {
  if (!running) throw std::logic_error("__syncthreads() called outside a kernel");
  if (running_block->draining) return;
  running->site = site;
  running->state = State::at_barrier;
  park();
}

// A lane arrives at a warp operation over `mask`. The last lane of the mask to arrive computes
// every participant's result; every lane then parks, so the schedule decides who continues first.
inline std::uint64_t warp_exchange(WarpOp op, unsigned mask, std::uint64_t value, int source_lane,
                                   Site site) {
  if (!running) throw std::logic_error("warp operation called outside a kernel");
  Thread& self = *running;
  Block& b = *running_block;
  if (b.draining) return value;
  const unsigned lane = self.linear % 32, warp = self.linear / 32, first = warp * 32;
  const unsigned lanes = std::min<unsigned>(32, static_cast<unsigned>(b.threads.size()) - first);
  const char* name = op == WarpOp::shuffle  ? "__shfl_*_sync"
                     : op == WarpOp::ballot ? "__ballot_sync"
                                            : "__syncwarp";
  if (!(mask >> lane & 1u))
    fail(b, std::string(name) + " at " + text(site) + " by lane " + std::to_string(lane) +
                ", which its own mask does not name");
  for (unsigned l = 0; l < 32; ++l) {
    if (!(mask >> l & 1u)) continue;
    if (l >= lanes)
      fail(b, std::string(name) + " at " + text(site) + " names lane " + std::to_string(l) +
                  ", which does not exist (a block of " + std::to_string(b.threads.size()) +
                  " threads)");
    else if (b.threads[first + l].state == State::returned)
      fail(b, std::string(name) + " at " + text(site) + " in " + thread_text(self) +
                  " names lane " + std::to_string(l) + ", which has already returned");
  }
  self.op = op;
  self.mask = mask;
  self.value = value;
  self.source_lane = source_lane;
  self.site = site;
  self.state = State::at_warp_op;
  unsigned& arrived = b.warp_arrived[warp];
  arrived |= 1u << lane;
  if (b.error.empty() && (arrived & mask) == mask) {
    std::uint64_t ballot = 0;
    for (unsigned l = 0; l < lanes; ++l)
      if (mask >> l & 1u) ballot |= std::uint64_t{b.threads[first + l].value != 0} << l;
    for (unsigned l = 0; l < lanes; ++l) {
      if (!(mask >> l & 1u)) continue;
      Thread& t = b.threads[first + l];
      if (t.op != op || t.mask != mask)
        fail(b, std::string(name) + " at " + text(site) + ": lanes " + std::to_string(lane) +
                    " and " + std::to_string(l) + " wait at different warp operations (" +
                    text(t.site) + ") or with different masks");
      if (op == WarpOp::shuffle) {
        const int s = t.source_lane;
        // A source lane outside the mask is undefined on a GPU: it reads as all one bits (NaN).
        t.result = s >= 0 && s < static_cast<int>(lanes) && (mask >> s & 1u)
                       ? b.threads[first + s].value
                       : ~std::uint64_t{0};
      } else {
        t.result = ballot;
      }
      t.state = State::runnable;
    }
    arrived &= ~mask;
  }
  park();
  return b.draining ? value : self.result;
}

inline void poison_shared() {
  char* begin = __start_mnist_emulated_shared;
  char* end = __stop_mnist_emulated_shared;
  if (!begin || end <= begin) return;
#if MNIST_EMULATION_ASAN
  // The section may hold AddressSanitizer's redzones between variables: write them without the
  // memset interceptor, which would report them.
  for (volatile char* p = begin; p < end; ++p) *p = static_cast<char>(0xFF);
#else
  std::memset(begin, 0xFF, static_cast<std::size_t>(end - begin));
#endif
}

// Why the block cannot go on when no thread is runnable, or "" when a barrier can be released.
inline std::string stuck_reason(const Block& b) {
  const Thread* first_barrier = nullptr;
  for (const Thread& t : b.threads) {
    if (t.state == State::at_warp_op) {
      unsigned missing = 0;
      const unsigned warp_first = t.linear / 32 * 32;
      for (unsigned l = 0; l < 32; ++l)
        if ((t.mask >> l & 1u) && warp_first + l < b.threads.size() &&
            b.threads[warp_first + l].state != State::at_warp_op)
          missing = l;
      return "warp operation at " + text(t.site) + " in " + thread_text(t) +
             " waits forever: lane " + std::to_string(missing) +
             " of its mask has returned or waits at __syncthreads";
    }
    if (t.state == State::at_barrier) {
      if (!first_barrier) {
        first_barrier = &t;
      } else if (t.site.line != first_barrier->site.line ||
                 std::strcmp(t.site.file, first_barrier->site.file) != 0) {
        return "threads wait at different __syncthreads: " + text(first_barrier->site) + " (" +
               thread_text(*first_barrier) + ") and " + text(t.site) + " (" + thread_text(t) + ")";
      }
    }
  }
  return {};
}

// After an error, the threads still parked run to their end with every synchronisation point
// returning at once (their results are discarded: the launch has failed). Destroying a parked
// fiber instead would unwind its stack with an exception, which AddressSanitizer cannot follow
// across Boost.Context's stack switches (false reports). A thread that does not end within a
// bound is unwound after all.
inline void drain(Block& b) {
  b.draining = true;
  for (Thread& t : b.threads) {
    for (int step = 0; step < 1000000 && t.state != State::returned && t.fiber; ++step) {
      running = &t;
      threadIdx = t.index;
      t.fiber = std::move(t.fiber).resume();
      running = nullptr;
    }
    t.fiber = ctx::fiber();
  }
}

inline void run_block(Block& b, const Schedule& schedule, std::mt19937& rng) {
  const unsigned n = static_cast<unsigned>(b.threads.size());
  poison_shared();
  blockIdx = b.index;
  std::fill(b.warp_arrived.begin(), b.warp_arrived.end(), 0u);
  running_block = &b;
  for (Thread& t : b.threads) {
    t.state = State::runnable;
    t.fiber = ctx::fiber(std::allocator_arg, PooledStack{}, [&t, &b](ctx::fiber&& scheduler) {
      b.scheduler = std::move(scheduler);
      b.body(b.body_arg);
      t.state = State::returned;
      return std::move(b.scheduler);
    });
  }
  auto arrange = [&](std::vector<unsigned>& v) {
    if (schedule.order == Order::reverse) std::reverse(v.begin(), v.end());
    if (schedule.order == Order::random) std::shuffle(v.begin(), v.end(), rng);
  };
  auto resume = [&](unsigned i) {
    Thread& t = b.threads[i];
    if (t.state != State::runnable || !b.error.empty()) return false;
    running = &t;
    threadIdx = t.index;
    t.fiber = std::move(t.fiber).resume();
    running = nullptr;
    return true;
  };
  std::vector<unsigned> order, warps, lanes;
  while (b.error.empty()) {
    order.clear();
    for (unsigned i = 0; i < n; ++i)
      if (b.threads[i].state == State::runnable) order.push_back(i);
    if (order.empty()) {
      bool all_returned = true, any_barrier = false;
      for (const Thread& t : b.threads) {
        all_returned = all_returned && t.state == State::returned;
        any_barrier = any_barrier || t.state == State::at_barrier;
      }
      if (all_returned) break;
      const std::string why = stuck_reason(b);
      if (!why.empty() || !any_barrier) {
        fail(b, why.empty() ? "no thread can go on" : why);
        break;
      }
      for (Thread& t : b.threads)  // every live thread waits at the same barrier: release it
        if (t.state == State::at_barrier) t.state = State::runnable;
      continue;
    }
    if (!schedule.by_warp) {
      arrange(order);
      for (unsigned i : order) resume(i);
      continue;
    }
    warps.clear();
    for (unsigned w = 0; w * 32 < n; ++w) warps.push_back(w);
    arrange(warps);
    for (unsigned w : warps) {
      for (bool progress = true; progress;) {
        progress = false;
        lanes.clear();
        for (unsigned i = w * 32; i < std::min(n, w * 32 + 32); ++i) lanes.push_back(i);
        arrange(lanes);
        for (unsigned i : lanes) progress = resume(i) || progress;
      }
    }
  }
  if (!b.error.empty()) drain(b);
  running_block = nullptr;
}

inline std::mutex& launch_mutex() {
  static std::mutex m;
  return m;
}

// Runs body(body_arg) as every thread of the grid; returns the error to record, if any.
inline cudaError_t launch(const Launch& where, dim3 grid, dim3 block, std::size_t shared_bytes,
                          void (*body)(void*), void* body_arg) {
  const std::string site = std::string(where.kernel) + " launched at " + text(where.site);
  if (const cudaError_t sticky = sticky_error(); sticky != cudaSuccess) return sticky;
  const unsigned long long threads = 1ull * block.x * block.y * block.z;
  if (threads == 0 || threads > 1024 || block.x > 1024 || block.y > 1024 || block.z > 64)
    return set_error(cudaErrorInvalidConfiguration, site + ": block of " + std::to_string(block.x) +
                                                        "x" + std::to_string(block.y) + "x" +
                                                        std::to_string(block.z) +
                                                        " threads (at most 1024, z at most 64)");
  if (grid.x == 0 || grid.y == 0 || grid.z == 0 || grid.x > 0x7fffffffu || grid.y > 65535 ||
      grid.z > 65535)
    return set_error(cudaErrorInvalidConfiguration,
                     site + ": grid of " + std::to_string(grid.x) + "x" + std::to_string(grid.y) +
                         "x" + std::to_string(grid.z) +
                         " blocks (x from 1 to 2^31-1, y and z from 1 to 65535)");
  if (shared_bytes > (48u << 10))
    return set_error(cudaErrorInvalidValue,
                     site + ": " + std::to_string(shared_bytes) +
                         " bytes of dynamic shared memory; more than 48 KB needs an opt-in "
                         "(cudaFuncSetAttribute) the emulation does not offer");
  std::lock_guard<std::mutex> lock(launch_mutex());
  static unsigned long long launches = 0;
  const Schedule s = current_schedule();
  std::mt19937 rng(s.seed + static_cast<unsigned>(launches++));
  Block b;
  b.launch = &where;
  b.dim = block;
  b.grid = grid;
  b.body = body;
  b.body_arg = body_arg;
  b.threads.resize(threads);
  b.warp_arrived.assign((threads + 31) / 32, 0u);
  for (unsigned i = 0; i < threads; ++i) {
    b.threads[i].linear = i;
    b.threads[i].index = uint3{i % block.x, i / block.x % block.y, i / (block.x * block.y)};
  }
  blockDim = block;
  gridDim = grid;
  // Blocks run one after another, in the schedule's order too (index order, reversed or
  // shuffled), so a kernel that assumes which block finishes last (a "last block" reduction must
  // not) fails under some schedule.
  const unsigned long long blocks = 1ull * grid.x * grid.y * grid.z;
  std::vector<unsigned long long> shuffled;
  if (s.order == Order::random) {
    shuffled.resize(blocks);
    for (unsigned long long i = 0; i < blocks; ++i) shuffled[i] = i;
    std::shuffle(shuffled.begin(), shuffled.end(), rng);
  }
  for (unsigned long long i = 0; i < blocks && b.error.empty(); ++i) {
    const unsigned long long at = s.order == Order::random    ? shuffled[i]
                                  : s.order == Order::reverse ? blocks - 1 - i
                                                              : i;
    b.index = uint3{static_cast<unsigned>(at % grid.x), static_cast<unsigned>(at / grid.x % grid.y),
                    static_cast<unsigned>(at / (1ull * grid.x * grid.y))};
    run_block(b, s, rng);
  }
  if (b.error.empty()) return cudaSuccess;
  std::fprintf(stderr, "emulated CUDA: kernel failed: %s\n", b.error.c_str());
  set_sticky(where.device, b.error);
  return cudaErrorLaunchFailure;
}

}  // namespace detail

// What MNIST_LAUNCH(kernel, grid, block, shared_bytes, stream) makes: called with the kernel's
// arguments, it copies them once (a real launch's parameter buffer) and runs the grid, or, when
// the stream is capturing a graph, records a node that owns that copy and runs the grid on each
// replay (the arguments are those of the capture, as in CUDA).
template <class Kernel>
class PendingLaunch {
 public:
  PendingLaunch(Kernel kernel, detail::Launch where, dim3 grid, dim3 block,
                std::size_t shared_bytes, cudaStream_t stream)
      : kernel_(kernel),
        where_(where),
        grid_(grid),
        block_(block),
        shared_bytes_(shared_bytes),
        stream_(stream) {}

  template <class... Args>
  void operator()(Args&&... args) const {
    if (where_.device != detail::current_device) {
      // A real launch into another device's stream fails the same way.
      detail::set_error(cudaErrorInvalidResourceHandle,
                        std::string(where_.kernel) + " launched at " + detail::text(where_.site) +
                            " into a stream of GPU " + std::to_string(where_.device) +
                            " while GPU " + std::to_string(detail::current_device) + " is current");
      return;
    }
    auto parameters = std::make_tuple(std::decay_t<Args>(std::forward<Args>(args))...);
    if (detail::capturing(stream_)) {
      detail::record(
          stream_, cudaGraphNodeTypeKernel,
          std::string("kernel ") + where_.kernel + " launched at " + detail::text(where_.site),
          [kernel = kernel_, where = where_, grid = grid_, block = block_,
           shared_bytes = shared_bytes_, parameters = std::move(parameters)] {
            return run(kernel, where, grid, block, shared_bytes, parameters);
          });
      return;
    }
    run(kernel_, where_, grid_, block_, shared_bytes_, parameters);
  }

 private:
  template <class Parameters>
  static cudaError_t run(const Kernel& kernel, const detail::Launch& where, dim3 grid, dim3 block,
                         std::size_t shared_bytes, const Parameters& parameters) {
    auto body = [&] { std::apply(kernel, parameters); };
    return detail::launch(
        where, grid, block, shared_bytes, [](void* p) { (*static_cast<decltype(body)*>(p))(); },
        &body);
  }

  Kernel kernel_;
  detail::Launch where_;
  dim3 grid_, block_;
  std::size_t shared_bytes_;
  cudaStream_t stream_;
};

template <class Kernel>
PendingLaunch<Kernel> make_launch(Kernel kernel, const char* name, const char* file, int line,
                                  dim3 grid, dim3 block, std::size_t shared_bytes,
                                  cudaStream_t stream) {
  const int device = stream ? stream->device : detail::current_device;
  return PendingLaunch<Kernel>(kernel, detail::Launch{name, detail::Site{file, line}, device}, grid,
                               block, shared_bytes, stream);
}

}  // namespace mnist::cuda::emulation

// ---- synchronisation and warp intrinsics --------------------------------------------------
// The call site comes from default arguments (__builtin_FILE/__builtin_LINE), so an error names
// the line of the kernel source that called them.
inline void __syncthreads(const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  mnist::cuda::emulation::detail::syncthreads({file, line});
}

namespace mnist::cuda::emulation::detail {
template <class T>
std::uint64_t to_bits(T v) {
  static_assert(sizeof(T) <= 8 && std::is_trivially_copyable<T>::value,
                "warp shuffles exchange at most 8 bytes");
  std::uint64_t bits = 0;
  std::memcpy(&bits, &v, sizeof(T));
  return bits;
}
template <class T>
T from_bits(std::uint64_t bits) {
  T v;
  std::memcpy(&v, &bits, sizeof(T));
  return v;
}
inline int lane() {
  return static_cast<int>(running->linear % 32);
}
template <class T>
T shuffle(unsigned mask, T v, int source_lane, const char* file, int line) {
  return from_bits<T>(warp_exchange(WarpOp::shuffle, mask, to_bits(v), source_lane, {file, line}));
}
}  // namespace mnist::cuda::emulation::detail

template <class T>
T __shfl_sync(unsigned mask, T v, int source, int width = 32, const char* file = __builtin_FILE(),
              int line = __builtin_LINE()) {
  namespace d = mnist::cuda::emulation::detail;
  const int lane = d::lane();
  return d::shuffle(mask, v, (lane & ~(width - 1)) + (source & (width - 1)), file, line);
}
template <class T>
T __shfl_down_sync(unsigned mask, T v, unsigned delta, int width = 32,
                   const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  namespace d = mnist::cuda::emulation::detail;
  const int lane = d::lane(), shift = static_cast<int>(delta);
  return d::shuffle(mask, v, (lane & (width - 1)) + shift < width ? lane + shift : lane, file,
                    line);
}
template <class T>
T __shfl_up_sync(unsigned mask, T v, unsigned delta, int width = 32,
                 const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  namespace d = mnist::cuda::emulation::detail;
  const int lane = d::lane(), shift = static_cast<int>(delta);
  return d::shuffle(mask, v, (lane & (width - 1)) >= shift ? lane - shift : lane, file, line);
}
template <class T>
T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = 32,
                  const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  namespace d = mnist::cuda::emulation::detail;
  const int lane = d::lane(), source = lane ^ lane_mask;
  // A source beyond this lane's segment of `width` lanes reads the lane's own value.
  return d::shuffle(mask, v, (source & ~(width - 1)) > (lane & ~(width - 1)) ? lane : source, file,
                    line);
}
inline unsigned __ballot_sync(unsigned mask, int predicate, const char* file = __builtin_FILE(),
                              int line = __builtin_LINE()) {
  namespace d = mnist::cuda::emulation::detail;
  return static_cast<unsigned>(
      d::warp_exchange(d::WarpOp::ballot, mask, predicate != 0, 0, {file, line}));
}
inline int __any_sync(unsigned mask, int predicate, const char* file = __builtin_FILE(),
                      int line = __builtin_LINE()) {
  return __ballot_sync(mask, predicate, file, line) != 0;
}
inline int __all_sync(unsigned mask, int predicate, const char* file = __builtin_FILE(),
                      int line = __builtin_LINE()) {
  return __ballot_sync(mask, predicate, file, line) == mask;
}
inline void __syncwarp(unsigned mask = 0xffffffffu, const char* file = __builtin_FILE(),
                       int line = __builtin_LINE()) {
  namespace d = mnist::cuda::emulation::detail;
  d::warp_exchange(d::WarpOp::syncwarp, mask, 0, 0, {file, line});
}
