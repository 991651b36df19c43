#pragma once
// Emulated CUDA runtime API: the host-side calls the project makes, on host memory.
//
// Devices: MNIST_CUDA_EMULATION_GPUS (default 1) emulated GPUs, each reporting kDeviceBytes of
// memory; the current device is per host thread, as in CUDA. Memory: cudaMalloc takes exactly the
// bytes asked (no rounding, so AddressSanitizer reports a read one past the end at its source line)
// and fills them with 0xFF bytes (NaN as float, -1 as int), so a read before any write shows.
// Copies and memsets check that their device side lies inside one allocation. Streams and events
// exist but every operation completes before its call returns, in call order.
// Stream capture (CUDA graphs): between cudaStreamBeginCapture and cudaStreamEndCapture the
// launches, copies and memsets issued into the stream are recorded instead of run; a graph
// instantiated from them replays them in order on cudaGraphLaunch. What CUDA refuses during capture
// fails here with CUDA's error and invalidates the capture (cudaStreamEndCapture then returns
// cudaErrorStreamCaptureInvalidated and no graph): a stream, device or event synchronisation, a
// copy to or from pageable host memory, and, unless the capture is relaxed, cudaMalloc/cudaFree.
// Errors: the last error is per host thread; a kernel failure is sticky on its device (every later
// call there returns it), as a real context is after a fault. cudaGetErrorString adds what the
// emulator found (kernel, file, line) to CUDA's own text.

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

// MNIST_EMULATION_ASAN: 1 when AddressSanitizer instruments this build (GCC or Clang).
#if defined(__SANITIZE_ADDRESS__)
#define MNIST_EMULATION_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define MNIST_EMULATION_ASAN 1
#endif
#endif
#ifndef MNIST_EMULATION_ASAN
#define MNIST_EMULATION_ASAN 0
#endif

enum cudaError {
  cudaSuccess = 0,
  cudaErrorInvalidValue = 1,
  cudaErrorMemoryAllocation = 2,
  cudaErrorInvalidConfiguration = 9,
  cudaErrorNoDevice = 100,
  cudaErrorInvalidDevice = 101,
  cudaErrorInvalidResourceHandle = 400,
  cudaErrorIllegalState = 401,
  cudaErrorLaunchFailure = 719,
  cudaErrorStreamCaptureUnsupported = 900,
  cudaErrorStreamCaptureInvalidated = 901,
  cudaErrorStreamCaptureUnmatched = 903,
  cudaErrorStreamCaptureIsolation = 905,
  cudaErrorCapturedEvent = 907,
  cudaErrorStreamCaptureWrongThread = 908,
};
using cudaError_t = cudaError;

enum cudaMemcpyKind {
  cudaMemcpyHostToHost = 0,
  cudaMemcpyHostToDevice = 1,
  cudaMemcpyDeviceToHost = 2,
  cudaMemcpyDeviceToDevice = 3,
  cudaMemcpyDefault = 4,
};
enum cudaMemoryType {
  cudaMemoryTypeUnregistered = 0,
  cudaMemoryTypeHost = 1,
  cudaMemoryTypeDevice = 2,
};
struct cudaPointerAttributes {
  cudaMemoryType type;
  int device;
  void* devicePointer;
  void* hostPointer;
};
struct cudaUUID_t {
  char bytes[16];
};
struct cudaDeviceProp {
  char name[256];
  cudaUUID_t uuid;
  std::size_t totalGlobalMem;
  std::size_t sharedMemPerBlock;
  int warpSize;
  int maxThreadsPerBlock;
  int maxThreadsDim[3];
  int maxGridSize[3];
  int major;
  int minor;
  int multiProcessorCount;
  int pciBusID;
  int pciDeviceID;
  int pciDomainID;
};

enum cudaStreamCaptureMode {
  cudaStreamCaptureModeGlobal = 0,
  cudaStreamCaptureModeThreadLocal = 1,
  cudaStreamCaptureModeRelaxed = 2,
};
enum cudaStreamCaptureStatus {
  cudaStreamCaptureStatusNone = 0,
  cudaStreamCaptureStatusActive = 1,
  cudaStreamCaptureStatusInvalidated = 2,
};
enum cudaGraphNodeType {
  cudaGraphNodeTypeKernel = 0x00,
  cudaGraphNodeTypeMemcpy = 0x01,
  cudaGraphNodeTypeMemset = 0x02,
  cudaGraphNodeTypeGraph = 0x04,
};

// A recorded operation of a graph: what it is, and how to run it again.
struct CUgraphNode_st {
  cudaGraphNodeType type;
  std::string what;  // "kernel relu_forward_kernel launched at relu.cu:27", for errors
  std::function<cudaError_t()> run;
};
struct CUgraph_st {
  int device;
  std::vector<std::shared_ptr<CUgraphNode_st>> nodes;
};
struct CUgraphExec_st {
  int device;
  std::vector<std::shared_ptr<CUgraphNode_st>> nodes;
};
struct CUstream_st {
  int device;
  // While capturing: the graph being recorded (nullptr otherwise), the capture's mode and thread,
  // and once a forbidden call invalidated the capture, why.
  CUgraph_st* capture = nullptr;
  cudaStreamCaptureMode capture_mode = cudaStreamCaptureModeGlobal;
  std::thread::id capture_thread;
  bool capture_invalidated = false;
  std::string capture_invalidated_by;
};
struct CUevent_st {
  std::chrono::steady_clock::time_point recorded;
  CUstream_st* captured_in = nullptr;  // last recorded in this stream while it captured
};
using cudaStream_t = CUstream_st*;
using cudaEvent_t = CUevent_st*;
using cudaGraph_t = CUgraph_st*;
using cudaGraphExec_t = CUgraphExec_st*;
using cudaGraphNode_t = CUgraphNode_st*;
constexpr unsigned cudaStreamDefault = 0, cudaStreamNonBlocking = 1;
constexpr unsigned cudaEventDefault = 0, cudaEventDisableTiming = 2;

namespace mnist::cuda::emulation {

// What each emulated GPU reports as its memory; allocations beyond it fail as on a full GPU.
constexpr std::size_t kDeviceBytes = std::size_t{16} << 30;
constexpr int kMaxDevices = 16;

namespace detail {

struct Allocation {
  std::size_t bytes;
  int device;  // -1: pinned host memory (cudaMallocHost)
};

struct DeviceState {
  std::size_t allocated = 0;
  cudaError_t sticky = cudaSuccess;
  std::string sticky_text;  // what failed, for cudaGetErrorString
};

struct RuntimeState {
  std::mutex mutex;
  std::map<const char*, Allocation> allocations;  // by start address
  DeviceState devices[kMaxDevices];
  std::set<CUstream_st*> streams;  // every live stream, so a device-wide call can find captures
};

inline RuntimeState& runtime() {
  static RuntimeState state;
  return state;
}

inline thread_local int current_device = 0;
inline thread_local cudaError_t last_error = cudaSuccess;
inline thread_local std::string last_error_text;  // the emulator's account of the last error
inline thread_local cudaError_t last_error_described = cudaSuccess;  // which error that text is of

// MNIST_CUDA_EMULATION_GPUS: how many GPUs this process sees (0 to kMaxDevices; unset: 1).
inline int device_count() {
  static const int count = [] {
    const char* text = std::getenv("MNIST_CUDA_EMULATION_GPUS");
    if (!text || !*text) return 1;
    char* end = nullptr;
    const long value = std::strtol(text, &end, 10);
    if (*end != '\0' || value < 0 || value > kMaxDevices) {
      std::fprintf(stderr,
                   "emulated CUDA: MNIST_CUDA_EMULATION_GPUS='%s' is not a count from 0 to %d; "
                   "no GPU is visible\n",
                   text, kMaxDevices);
      return 0;
    }
    return static_cast<int>(value);
  }();
  return count;
}

// Records `code` as this thread's last error (with the emulator's account of it) and returns it.
inline cudaError_t set_error(cudaError_t code, std::string text = {}) {
  last_error = code;
  last_error_described = code;
  last_error_text = std::move(text);
  return code;
}

// The sticky error of the current device, if any: every call on a faulted device returns it.
inline cudaError_t sticky_error() {
  const int device = current_device;
  if (device < 0 || device >= kMaxDevices) return cudaSuccess;
  std::lock_guard<std::mutex> lock(runtime().mutex);
  return runtime().devices[device].sticky;
}

// A kernel failed on `device`: the error sticks there, as a real context's does after a fault.
inline void set_sticky(int device, const std::string& text) {
  {
    std::lock_guard<std::mutex> lock(runtime().mutex);
    DeviceState& d = runtime().devices[device];
    if (d.sticky == cudaSuccess) {
      d.sticky = cudaErrorLaunchFailure;
      d.sticky_text = text;
    }
  }
  set_error(cudaErrorLaunchFailure, text);
}

// The call's result: the device's sticky error if it has one, else `code` (recorded when an error).
inline cudaError_t result(cudaError_t code = cudaSuccess, std::string text = {}) {
  if (const cudaError_t sticky = sticky_error(); sticky != cudaSuccess) return sticky;
  if (code != cudaSuccess) set_error(code, std::move(text));
  return code;
}

inline cudaError_t allocate(void** ptr, std::size_t bytes, int device) {
  if (!ptr) return result(cudaErrorInvalidValue, "null pointer to the allocation's result");
  *ptr = nullptr;
  if (const cudaError_t sticky = sticky_error(); sticky != cudaSuccess) return sticky;
  std::lock_guard<std::mutex> lock(runtime().mutex);
  if (device >= 0 && bytes > kDeviceBytes - runtime().devices[device].allocated)
    return set_error(cudaErrorMemoryAllocation);
#if MNIST_EMULATION_ASAN
  // Exactly `bytes`: AddressSanitizer then reports a read one past the end at its source line.
  void* p = std::malloc(std::max<std::size_t>(bytes, 1));
#else
  // Aligned like cudaMalloc's 256 bytes (aligned_alloc wants a multiple of the alignment).
  void* p = std::aligned_alloc(256, (std::max<std::size_t>(bytes, 1) + 255) / 256 * 256);
#endif
  if (!p) return set_error(cudaErrorMemoryAllocation);
  std::memset(p, 0xFF, bytes);
  runtime().allocations[static_cast<const char*>(p)] = Allocation{bytes, device};
  if (device >= 0) runtime().devices[device].allocated += bytes;
  *ptr = p;
  return cudaSuccess;
}

inline cudaError_t release(void* ptr, bool device_memory) {
  if (!ptr) return cudaSuccess;
  std::lock_guard<std::mutex> lock(runtime().mutex);
  auto it = runtime().allocations.find(static_cast<const char*>(ptr));
  if (it == runtime().allocations.end() || (it->second.device >= 0) != device_memory)
    return set_error(cudaErrorInvalidValue, device_memory
                                                ? "cudaFree of a pointer cudaMalloc did not return"
                                                : "cudaFreeHost of a pointer cudaMallocHost did "
                                                  "not return");
  if (it->second.device >= 0) runtime().devices[it->second.device].allocated -= it->second.bytes;
  runtime().allocations.erase(it);
  std::free(ptr);
  return cudaSuccess;
}

// The allocation holding `ptr`, or nullptr (caller holds the runtime mutex).
inline const std::pair<const char* const, Allocation>* find_allocation(const void* ptr) {
  auto& all = runtime().allocations;
  auto it = all.upper_bound(static_cast<const char*>(ptr));
  if (it == all.begin()) return nullptr;
  --it;
  const char* p = static_cast<const char*>(ptr);
  return p < it->first + std::max<std::size_t>(it->second.bytes, 1) ? &*it : nullptr;
}

// True when [ptr, ptr + bytes) lies inside one device allocation.
inline bool device_range(const void* ptr, std::size_t bytes) {
  std::lock_guard<std::mutex> lock(runtime().mutex);
  const auto* a = find_allocation(ptr);
  if (!a || a->second.device < 0) return false;
  return static_cast<const char*>(ptr) + bytes <= a->first + a->second.bytes;
}

// True when [ptr, ptr + bytes) lies inside one cudaMallocHost allocation (page-locked memory).
inline bool pinned_range(const void* ptr, std::size_t bytes) {
  std::lock_guard<std::mutex> lock(runtime().mutex);
  const auto* a = find_allocation(ptr);
  if (!a || a->second.device >= 0) return false;
  return static_cast<const char*>(ptr) + bytes <= a->first + a->second.bytes;
}

// ---- stream capture -------------------------------------------------------------------------

inline bool capturing(cudaStream_t stream) {
  return stream && stream->capture;
}

// A call CUDA refuses during capture was made into (or waited on) `stream`: the capture is
// invalidated (it can only be ended, which returns no graph) and the call fails.
inline cudaError_t invalidate_capture(cudaStream_t stream, const std::string& call) {
  if (!stream->capture_invalidated) {
    stream->capture_invalidated = true;
    stream->capture_invalidated_by = call;
  }
  return set_error(cudaErrorStreamCaptureUnsupported,
                   call + " while the stream is capturing a graph (the capture is invalidated)");
}

// Records `run` as the next node of the graph `stream` captures, or fails when the capture was
// invalidated by an earlier call.
inline cudaError_t record(cudaStream_t stream, cudaGraphNodeType type, std::string what,
                          std::function<cudaError_t()> run) {
  if (stream->capture_invalidated)
    return set_error(cudaErrorStreamCaptureInvalidated,
                     what + " into a capture invalidated by " + stream->capture_invalidated_by);
  stream->capture->nodes.push_back(
      std::make_shared<CUgraphNode_st>(CUgraphNode_st{type, std::move(what), std::move(run)}));
  return cudaSuccess;
}

// The captures that an allocation or a device-wide synchronisation made by this thread conflicts
// with: every non-relaxed capture on `device` begun by this thread, and every global one.
inline std::vector<CUstream_st*> conflicting_captures(int device) {
  std::vector<CUstream_st*> found;
  std::lock_guard<std::mutex> lock(runtime().mutex);
  for (CUstream_st* s : runtime().streams) {
    if (!s->capture || (device >= 0 && s->device != device)) continue;
    if (s->capture_mode == cudaStreamCaptureModeGlobal ||
        (s->capture_mode == cudaStreamCaptureModeThreadLocal &&
         s->capture_thread == std::this_thread::get_id()))
      found.push_back(s);
  }
  return found;
}

// An "unsafe" call (CUDA's word: cudaMalloc, cudaFree) during a capture it conflicts with fails
// with cudaErrorStreamCaptureUnsupported and invalidates that capture.
inline cudaError_t refuse_if_capturing(int device, const char* call) {
  const std::vector<CUstream_st*> captures = conflicting_captures(device);
  for (CUstream_st* s : captures) invalidate_capture(s, call);
  return captures.empty() ? cudaSuccess : cudaErrorStreamCaptureUnsupported;
}

inline cudaError_t copy(void* dst, const void* src, std::size_t bytes, cudaMemcpyKind kind,
                        cudaStream_t stream = nullptr) {
  if (const cudaError_t sticky = sticky_error(); sticky != cudaSuccess) return sticky;
  const bool dst_device = kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice;
  const bool src_device = kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice;
  if (capturing(stream)) {
    // A graph copies from or to host memory when it runs, so that memory must be page-locked: a
    // pageable buffer would need the host to stage it at capture time.
    if ((!dst_device && !pinned_range(dst, bytes)) || (!src_device && !pinned_range(src, bytes)))
      return invalidate_capture(stream, "cudaMemcpyAsync of " + std::to_string(bytes) +
                                            " bytes to or from pageable host memory");
  }
  if (bytes == 0) return cudaSuccess;
  if ((dst_device && !device_range(dst, bytes)) || (src_device && !device_range(src, bytes)))
    return set_error(cudaErrorInvalidValue,
                     "cudaMemcpy of " + std::to_string(bytes) +
                         " bytes: its device side is not inside one cudaMalloc allocation");
  if (capturing(stream))
    return record(stream, cudaGraphNodeTypeMemcpy,
                  "cudaMemcpyAsync of " + std::to_string(bytes) + " bytes", [=] {
                    std::memmove(dst, src, bytes);
                    return cudaSuccess;
                  });
  std::memmove(dst, src, bytes);
  return cudaSuccess;
}

}  // namespace detail
}  // namespace mnist::cuda::emulation

// ---- the runtime API ------------------------------------------------------------------------

inline const char* cudaGetErrorName(cudaError_t code) {
  switch (code) {
    case cudaSuccess:
      return "cudaSuccess";
    case cudaErrorInvalidValue:
      return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation:
      return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidConfiguration:
      return "cudaErrorInvalidConfiguration";
    case cudaErrorNoDevice:
      return "cudaErrorNoDevice";
    case cudaErrorInvalidDevice:
      return "cudaErrorInvalidDevice";
    case cudaErrorInvalidResourceHandle:
      return "cudaErrorInvalidResourceHandle";
    case cudaErrorLaunchFailure:
      return "cudaErrorLaunchFailure";
    case cudaErrorIllegalState:
      return "cudaErrorIllegalState";
    case cudaErrorStreamCaptureUnsupported:
      return "cudaErrorStreamCaptureUnsupported";
    case cudaErrorStreamCaptureInvalidated:
      return "cudaErrorStreamCaptureInvalidated";
    case cudaErrorStreamCaptureUnmatched:
      return "cudaErrorStreamCaptureUnmatched";
    case cudaErrorStreamCaptureIsolation:
      return "cudaErrorStreamCaptureIsolation";
    case cudaErrorCapturedEvent:
      return "cudaErrorCapturedEvent";
    case cudaErrorStreamCaptureWrongThread:
      return "cudaErrorStreamCaptureWrongThread";
  }
  return "cudaErrorUnknown";
}

// CUDA's text, followed by what the emulator found when it has an account of this error.
inline const char* cudaGetErrorString(cudaError_t code) {
  namespace d = mnist::cuda::emulation::detail;
  const char* base = "unknown error";
  switch (code) {
    case cudaSuccess:
      base = "no error";
      break;
    case cudaErrorInvalidValue:
      base = "invalid argument";
      break;
    case cudaErrorMemoryAllocation:
      base = "out of memory";
      break;
    case cudaErrorInvalidConfiguration:
      base = "invalid configuration argument";
      break;
    case cudaErrorNoDevice:
      base = "no CUDA-capable device is detected";
      break;
    case cudaErrorInvalidDevice:
      base = "invalid device ordinal";
      break;
    case cudaErrorInvalidResourceHandle:
      base = "invalid resource handle";
      break;
    case cudaErrorLaunchFailure:
      base = "unspecified launch failure";
      break;
    case cudaErrorIllegalState:
      base = "the operation cannot be performed in the present state";
      break;
    case cudaErrorStreamCaptureUnsupported:
      base = "operation not permitted when stream is capturing";
      break;
    case cudaErrorStreamCaptureInvalidated:
      base = "operation failed due to a previous error during capture";
      break;
    case cudaErrorStreamCaptureUnmatched:
      base = "capture was not initiated in this stream";
      break;
    case cudaErrorStreamCaptureIsolation:
      base = "dependency created on uncaptured work in another stream";
      break;
    case cudaErrorCapturedEvent:
      base = "operation not permitted on an event last recorded in a capturing stream";
      break;
    case cudaErrorStreamCaptureWrongThread:
      base = "attempt to terminate a thread-local capture sequence from another thread";
      break;
  }
  std::string detail;
  if (code == cudaErrorLaunchFailure && d::current_device >= 0 &&
      d::current_device < mnist::cuda::emulation::kMaxDevices) {
    std::lock_guard<std::mutex> lock(d::runtime().mutex);
    detail = d::runtime().devices[d::current_device].sticky_text;
  }
  if (detail.empty() && code == d::last_error_described) detail = d::last_error_text;
  static thread_local std::string text;
  text = detail.empty() ? base : std::string(base) + " (emulated CUDA: " + detail + ")";
  return text.c_str();
}

inline cudaError_t cudaGetLastError() {
  namespace d = mnist::cuda::emulation::detail;
  if (const cudaError_t sticky = d::sticky_error(); sticky != cudaSuccess) return sticky;
  const cudaError_t code = d::last_error;
  d::last_error = cudaSuccess;  // the text stays, for a cudaGetErrorString(code) that follows
  return code;
}

inline cudaError_t cudaPeekAtLastError() {
  namespace d = mnist::cuda::emulation::detail;
  if (const cudaError_t sticky = d::sticky_error(); sticky != cudaSuccess) return sticky;
  return d::last_error;
}

inline cudaError_t cudaGetDeviceCount(int* count) {
  namespace d = mnist::cuda::emulation::detail;
  *count = d::device_count();
  if (*count == 0) return d::set_error(cudaErrorNoDevice, "MNIST_CUDA_EMULATION_GPUS is 0");
  return cudaSuccess;
}

inline cudaError_t cudaGetDevice(int* device) {
  *device = mnist::cuda::emulation::detail::current_device;
  return cudaSuccess;
}

inline cudaError_t cudaSetDevice(int device) {
  namespace d = mnist::cuda::emulation::detail;
  if (device < 0 || device >= d::device_count())
    return d::set_error(cudaErrorInvalidDevice, "device " + std::to_string(device) + " of " +
                                                    std::to_string(d::device_count()) +
                                                    " emulated");
  d::current_device = device;
  return d::result();
}

inline cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device) {
  namespace d = mnist::cuda::emulation::detail;
  if (device < 0 || device >= d::device_count()) return d::set_error(cudaErrorInvalidDevice);
  *prop = cudaDeviceProp{};
  std::snprintf(prop->name, sizeof prop->name, "Emulated GPU %d (CPU)", device);
  for (int i = 0; i < 16; ++i) prop->uuid.bytes[i] = static_cast<char>(i == 15 ? device : 0xe0 + i);
  prop->totalGlobalMem = mnist::cuda::emulation::kDeviceBytes;
  prop->sharedMemPerBlock = 48 << 10;
  prop->warpSize = 32;
  prop->maxThreadsPerBlock = 1024;
  prop->maxThreadsDim[0] = prop->maxThreadsDim[1] = 1024;
  prop->maxThreadsDim[2] = 64;
  prop->maxGridSize[0] = 0x7fffffff;
  prop->maxGridSize[1] = prop->maxGridSize[2] = 65535;
  prop->major = 9;
  prop->minor = 0;
  prop->multiProcessorCount = 1;
  prop->pciBusID = device;
  return cudaSuccess;
}

inline cudaError_t cudaDeviceGetPCIBusId(char* bus, int length, int device) {
  namespace d = mnist::cuda::emulation::detail;
  if (device < 0 || device >= d::device_count()) return d::set_error(cudaErrorInvalidDevice);
  std::snprintf(bus, static_cast<std::size_t>(length), "emulated:%02x:00.0", device);
  return cudaSuccess;
}

inline cudaError_t cudaDeviceCanAccessPeer(int* can, int device, int peer) {
  namespace d = mnist::cuda::emulation::detail;
  const int count = d::device_count();
  if (device < 0 || device >= count || peer < 0 || peer >= count)
    return d::set_error(cudaErrorInvalidDevice);
  *can = device != peer;
  return cudaSuccess;
}

inline cudaError_t cudaDriverGetVersion(int* version) {
  *version = 0;  // no driver: the emulation runs without one
  return cudaSuccess;
}

inline cudaError_t cudaRuntimeGetVersion(int* version) {
  *version = 0;
  return cudaSuccess;
}

inline cudaError_t cudaMemGetInfo(std::size_t* free_bytes, std::size_t* total_bytes) {
  namespace d = mnist::cuda::emulation::detail;
  std::lock_guard<std::mutex> lock(d::runtime().mutex);
  *total_bytes = mnist::cuda::emulation::kDeviceBytes;
  *free_bytes = *total_bytes - d::runtime().devices[d::current_device].allocated;
  return cudaSuccess;
}

inline cudaError_t cudaMalloc(void** ptr, std::size_t bytes) {
  namespace d = mnist::cuda::emulation::detail;
  if (d::refuse_if_capturing(d::current_device, "cudaMalloc") != cudaSuccess) {
    if (ptr) *ptr = nullptr;
    return cudaErrorStreamCaptureUnsupported;
  }
  return d::allocate(ptr, bytes, d::current_device);
}
template <class T>
cudaError_t cudaMalloc(T** ptr, std::size_t bytes) {
  return cudaMalloc(reinterpret_cast<void**>(ptr), bytes);
}
inline cudaError_t cudaFree(void* ptr) {
  namespace d = mnist::cuda::emulation::detail;
  if (d::refuse_if_capturing(d::current_device, "cudaFree") != cudaSuccess)
    return cudaErrorStreamCaptureUnsupported;
  return d::release(ptr, true);
}
inline cudaError_t cudaMallocHost(void** ptr, std::size_t bytes) {
  return mnist::cuda::emulation::detail::allocate(ptr, bytes, -1);
}
template <class T>
cudaError_t cudaMallocHost(T** ptr, std::size_t bytes) {
  return cudaMallocHost(reinterpret_cast<void**>(ptr), bytes);
}
inline cudaError_t cudaFreeHost(void* ptr) {
  return mnist::cuda::emulation::detail::release(ptr, false);
}

inline cudaError_t cudaPointerGetAttributes(cudaPointerAttributes* attributes, const void* ptr) {
  namespace d = mnist::cuda::emulation::detail;
  *attributes =
      cudaPointerAttributes{cudaMemoryTypeUnregistered, -1, nullptr, const_cast<void*>(ptr)};
  std::lock_guard<std::mutex> lock(d::runtime().mutex);
  if (const auto* a = d::find_allocation(ptr)) {
    attributes->type = a->second.device >= 0 ? cudaMemoryTypeDevice : cudaMemoryTypeHost;
    attributes->device = a->second.device >= 0 ? a->second.device : d::current_device;
    attributes->devicePointer = const_cast<void*>(ptr);
  }
  return cudaSuccess;
}

inline cudaError_t cudaMemcpy(void* dst, const void* src, std::size_t bytes, cudaMemcpyKind kind) {
  return mnist::cuda::emulation::detail::copy(dst, src, bytes, kind);
}
inline cudaError_t cudaMemcpyAsync(void* dst, const void* src, std::size_t bytes,
                                   cudaMemcpyKind kind, cudaStream_t stream = nullptr) {
  return mnist::cuda::emulation::detail::copy(dst, src, bytes, kind, stream);
}
inline cudaError_t cudaMemsetAsync(void* dst, int value, std::size_t bytes,
                                   cudaStream_t stream = nullptr) {
  namespace d = mnist::cuda::emulation::detail;
  if (const cudaError_t sticky = d::sticky_error(); sticky != cudaSuccess) return sticky;
  if (bytes && !d::device_range(dst, bytes))
    return d::set_error(cudaErrorInvalidValue, "cudaMemset of " + std::to_string(bytes) +
                                                   " bytes outside of one cudaMalloc allocation");
  if (d::capturing(stream))
    return d::record(stream, cudaGraphNodeTypeMemset,
                     "cudaMemsetAsync of " + std::to_string(bytes) + " bytes", [=] {
                       std::memset(dst, value, bytes);
                       return cudaSuccess;
                     });
  std::memset(dst, value, bytes);
  return cudaSuccess;
}
inline cudaError_t cudaMemset(void* dst, int value, std::size_t bytes) {
  return cudaMemsetAsync(dst, value, bytes, nullptr);
}

// As in CUDA, frees every allocation of the current device and clears its errors, the sticky one
// included: what a test does after provoking a kernel failure on purpose.
inline cudaError_t cudaDeviceReset() {
  namespace d = mnist::cuda::emulation::detail;
  std::lock_guard<std::mutex> lock(d::runtime().mutex);
  const int device = d::current_device;
  auto& all = d::runtime().allocations;
  for (auto it = all.begin(); it != all.end();) {
    if (it->second.device == device) {
      std::free(const_cast<char*>(it->first));
      it = all.erase(it);
    } else {
      ++it;
    }
  }
  d::runtime().devices[device] = d::DeviceState{};
  d::last_error = cudaSuccess;
  d::last_error_text.clear();
  return cudaSuccess;
}

inline cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned) {
  namespace d = mnist::cuda::emulation::detail;
  *stream = new CUstream_st{};
  (*stream)->device = d::current_device;
  {
    std::lock_guard<std::mutex> lock(d::runtime().mutex);
    d::runtime().streams.insert(*stream);
  }
  return d::result();
}
inline cudaError_t cudaStreamCreate(cudaStream_t* stream) {
  return cudaStreamCreateWithFlags(stream, cudaStreamDefault);
}
inline cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  namespace d = mnist::cuda::emulation::detail;
  if (!stream) return cudaSuccess;
  {
    std::lock_guard<std::mutex> lock(d::runtime().mutex);
    d::runtime().streams.erase(stream);
  }
  delete stream->capture;  // a capture never ended: its graph goes with the stream
  delete stream;
  return cudaSuccess;
}
inline cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  namespace d = mnist::cuda::emulation::detail;
  if (d::capturing(stream)) return d::invalidate_capture(stream, "cudaStreamSynchronize");
  return d::result();
}
inline cudaError_t cudaDeviceSynchronize() {
  namespace d = mnist::cuda::emulation::detail;
  if (d::refuse_if_capturing(d::current_device, "cudaDeviceSynchronize") != cudaSuccess)
    return cudaErrorStreamCaptureUnsupported;
  return d::result();
}
inline cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned) {
  *event = new CUevent_st{};
  return mnist::cuda::emulation::detail::result();
}
inline cudaError_t cudaEventCreate(cudaEvent_t* event) {
  return cudaEventCreateWithFlags(event, cudaEventDefault);
}
inline cudaError_t cudaEventDestroy(cudaEvent_t event) {
  delete event;
  return cudaSuccess;
}
inline cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream = nullptr) {
  namespace d = mnist::cuda::emulation::detail;
  if (!event) return d::result(cudaErrorInvalidResourceHandle);
  // In a capturing stream the record is part of the graph (the emulation keeps no node for it:
  // its streams have no order to join), and the event belongs to the capture until re-recorded.
  event->captured_in = d::capturing(stream) ? stream : nullptr;
  if (!event->captured_in) event->recorded = std::chrono::steady_clock::now();
  return d::result();
}
inline cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  namespace d = mnist::cuda::emulation::detail;
  if (event && event->captured_in && d::capturing(event->captured_in)) {
    d::invalidate_capture(event->captured_in, "cudaEventSynchronize");
    return d::set_error(cudaErrorCapturedEvent,
                        "cudaEventSynchronize of an event recorded in a capturing stream");
  }
  return d::result();
}
inline cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned = 0) {
  namespace d = mnist::cuda::emulation::detail;
  if (!event) return d::result(cudaErrorInvalidResourceHandle);
  // A capture may only wait for events recorded inside the same capture.
  if (d::capturing(stream) && event->captured_in != stream) {
    d::invalidate_capture(stream, "cudaStreamWaitEvent on an event from outside the capture");
    return d::set_error(cudaErrorStreamCaptureIsolation,
                        "cudaStreamWaitEvent in a capturing stream on an event recorded outside "
                        "its capture");
  }
  return d::result();
}
inline cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  *ms = std::chrono::duration<float, std::milli>(end->recorded - start->recorded).count();
  return mnist::cuda::emulation::detail::result();
}

// ---- stream capture and graphs --------------------------------------------------------------

inline cudaError_t cudaStreamBeginCapture(cudaStream_t stream, cudaStreamCaptureMode mode) {
  namespace d = mnist::cuda::emulation::detail;
  if (!stream)
    return d::set_error(cudaErrorStreamCaptureUnsupported, "capture of the legacy default stream");
  if (stream->capture)
    return d::set_error(cudaErrorIllegalState, "the stream is already capturing");
  if (const cudaError_t sticky = d::sticky_error(); sticky != cudaSuccess) return sticky;
  stream->capture = new CUgraph_st{stream->device, {}};
  stream->capture_mode = mode;
  stream->capture_thread = std::this_thread::get_id();
  stream->capture_invalidated = false;
  stream->capture_invalidated_by.clear();
  return cudaSuccess;
}

inline cudaError_t cudaStreamIsCapturing(cudaStream_t stream, cudaStreamCaptureStatus* status) {
  if (!status) return mnist::cuda::emulation::detail::set_error(cudaErrorInvalidValue);
  *status = !stream || !stream->capture   ? cudaStreamCaptureStatusNone
            : stream->capture_invalidated ? cudaStreamCaptureStatusInvalidated
                                          : cudaStreamCaptureStatusActive;
  return cudaSuccess;
}

// Ends the capture; the graph holds what was recorded, or is nullptr when the capture was
// invalidated (then the call returns cudaErrorStreamCaptureInvalidated and names the cause).
inline cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t* graph) {
  namespace d = mnist::cuda::emulation::detail;
  if (!graph) return d::set_error(cudaErrorInvalidValue, "null graph pointer");
  *graph = nullptr;
  if (!stream || !stream->capture)
    return d::set_error(cudaErrorStreamCaptureUnmatched, "the stream is not capturing");
  if (stream->capture_mode != cudaStreamCaptureModeRelaxed &&
      stream->capture_thread != std::this_thread::get_id())
    return d::set_error(cudaErrorStreamCaptureWrongThread,
                        "cudaStreamEndCapture from another thread than the capture's");
  std::unique_ptr<CUgraph_st> captured(stream->capture);
  stream->capture = nullptr;
  if (stream->capture_invalidated)
    return d::set_error(cudaErrorStreamCaptureInvalidated,
                        "the capture was invalidated by " + stream->capture_invalidated_by);
  *graph = captured.release();
  return cudaSuccess;
}

inline cudaError_t cudaGraphDestroy(cudaGraph_t graph) {
  delete graph;
  return cudaSuccess;
}

// The graph's nodes (nodes may be nullptr to ask only for the count).
inline cudaError_t cudaGraphGetNodes(cudaGraph_t graph, cudaGraphNode_t* nodes,
                                     std::size_t* count) {
  if (!graph || !count) return mnist::cuda::emulation::detail::set_error(cudaErrorInvalidValue);
  if (nodes) {
    const std::size_t n = std::min(*count, graph->nodes.size());
    for (std::size_t i = 0; i < n; ++i) nodes[i] = graph->nodes[i].get();
  }
  *count = graph->nodes.size();
  return cudaSuccess;
}
inline cudaError_t cudaGraphNodeGetType(cudaGraphNode_t node, cudaGraphNodeType* type) {
  if (!node || !type) return mnist::cuda::emulation::detail::set_error(cudaErrorInvalidValue);
  *type = node->type;
  return cudaSuccess;
}

inline cudaError_t cudaGraphInstantiate(cudaGraphExec_t* exec, cudaGraph_t graph,
                                        unsigned long long flags = 0) {
  (void)flags;
  if (!exec || !graph) return mnist::cuda::emulation::detail::set_error(cudaErrorInvalidValue);
  *exec = new CUgraphExec_st{graph->device, graph->nodes};
  return cudaSuccess;
}
inline cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec) {
  delete exec;
  return cudaSuccess;
}

// Runs the graph's nodes in the order they were captured (the emulated streams run everything to
// its end, so the launch is complete when this returns). A failing node ends the replay; a
// kernel's failure is sticky on the device, as after an eager launch.
inline cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t stream) {
  namespace d = mnist::cuda::emulation::detail;
  if (!exec) return d::set_error(cudaErrorInvalidResourceHandle, "null graph exec");
  if (const cudaError_t sticky = d::sticky_error(); sticky != cudaSuccess) return sticky;
  if (exec->device != d::current_device || (stream && stream->device != exec->device))
    return d::set_error(cudaErrorInvalidResourceHandle,
                        "graph of GPU " + std::to_string(exec->device) + " launched while GPU " +
                            std::to_string(d::current_device) + " is current");
  if (d::capturing(stream)) {
    // A graph launched into a capture becomes one node of the outer graph.
    std::vector<std::shared_ptr<CUgraphNode_st>> nodes = exec->nodes;
    return d::record(stream, cudaGraphNodeTypeGraph, "cudaGraphLaunch", [nodes] {
      for (const auto& node : nodes)
        if (const cudaError_t e = node->run(); e != cudaSuccess) return e;
      return cudaSuccess;
    });
  }
  for (const auto& node : exec->nodes)
    if (const cudaError_t e = node->run(); e != cudaSuccess) return e;
  return cudaSuccess;
}
