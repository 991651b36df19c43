// Stream capture and graphs in the emulation: what is issued into a capturing stream is recorded,
// not run; a replay runs it again and gives what the eager launches gave; and what CUDA refuses
// during a capture (a host synchronisation, a copy to or from pageable memory, an allocation)
// fails with CUDA's error and invalidates the capture, so code meant to be captured is checked in
// CI without a GPU.
#include <catch2/catch.hpp>

#include <cuda_runtime.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "backend/cuda/launch.cuh"

namespace {

constexpr int kN = 300;  // not a multiple of the block: every grid has a tail

__global__ void affine_kernel(int n, float a, const float* x, float b, float* y) {
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (i < n) y[i] = a * x[i] + b;
}

// Each element becomes its running sum within its block (uses shared memory and barriers).
__global__ void block_prefix_kernel(int n, float* x) {
  __shared__ float tile[128];
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  tile[threadIdx.x] = i < n ? x[i] : 0.0f;
  __syncthreads();
  if (threadIdx.x == 0)
    for (unsigned t = 1; t < blockDim.x; ++t) tile[t] += tile[t - 1];
  __syncthreads();
  if (i < n) x[i] = tile[threadIdx.x];
}

template <class T>
T* device_array(std::size_t n) {
  T* p = nullptr;
  REQUIRE(cudaMalloc(&p, n * sizeof(T)) == cudaSuccess);
  return p;
}

struct Buffers {
  float* pinned_in = nullptr;  // host, page-locked
  float* x = nullptr;
  float* y = nullptr;
  float* z = nullptr;
  float* pinned_out = nullptr;
  Buffers() {
    REQUIRE(cudaMallocHost(&pinned_in, kN * sizeof(float)) == cudaSuccess);
    REQUIRE(cudaMallocHost(&pinned_out, kN * sizeof(float)) == cudaSuccess);
    x = device_array<float>(kN);
    y = device_array<float>(kN);
    z = device_array<float>(kN);
  }
  ~Buffers() {
    cudaFreeHost(pinned_in);
    cudaFreeHost(pinned_out);
    cudaFree(x);
    cudaFree(y);
    cudaFree(z);
  }
};

// A small step: upload, two kernels, a memset, a device copy, a download, all on `stream`.
void issue_step(cudaStream_t stream, const Buffers& b) {
  const unsigned blocks = (kN + 127) / 128;
  REQUIRE(cudaMemcpyAsync(b.x, b.pinned_in, kN * sizeof(float), cudaMemcpyHostToDevice, stream) ==
          cudaSuccess);
  REQUIRE(cudaMemsetAsync(b.z, 0, kN * sizeof(float), stream) == cudaSuccess);
  MNIST_LAUNCH(affine_kernel, blocks, 128, 0, stream)(kN, 3.0f, b.x, 0.5f, b.y);
  REQUIRE(cudaGetLastError() == cudaSuccess);
  MNIST_LAUNCH(block_prefix_kernel, blocks, 128, 0, stream)(kN, b.y);
  REQUIRE(cudaGetLastError() == cudaSuccess);
  REQUIRE(cudaMemcpyAsync(b.z, b.y, (kN - 1) * sizeof(float), cudaMemcpyDeviceToDevice, stream) ==
          cudaSuccess);
  REQUIRE(cudaMemcpyAsync(b.pinned_out, b.z, kN * sizeof(float), cudaMemcpyDeviceToHost, stream) ==
          cudaSuccess);
}

std::vector<float> out_of(const Buffers& b) {
  return std::vector<float>(b.pinned_out, b.pinned_out + kN);
}

void fill_input(const Buffers& b, float offset) {
  for (int i = 0; i < kN; ++i) b.pinned_in[i] = std::sin(0.1f * i) + offset;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

cudaStream_t new_stream() {
  cudaStream_t s = nullptr;
  REQUIRE(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess);
  return s;
}

cudaStreamCaptureStatus status_of(cudaStream_t s) {
  cudaStreamCaptureStatus status{};
  REQUIRE(cudaStreamIsCapturing(s, &status) == cudaSuccess);
  return status;
}

}  // namespace

TEST_CASE("a captured graph replays the launches, copies and memsets in order, as eager did",
          "[emulation][capture]") {
  cudaGetLastError();
  const cudaStream_t stream = new_stream();
  Buffers b;
  fill_input(b, 0.0f);
  issue_step(stream, b);
  REQUIRE(cudaStreamSynchronize(stream) == cudaSuccess);
  const std::vector<float> eager = out_of(b);
  CHECK(eager[kN - 1] == 0.0f);  // the device copy left the memset's zero there
  CHECK(eager[1] == 3.0f * b.pinned_in[0] + 0.5f + 3.0f * b.pinned_in[1] + 0.5f);

  std::memset(b.pinned_out, 0x7f, kN * sizeof(float));
  REQUIRE(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal) == cudaSuccess);
  CHECK(status_of(stream) == cudaStreamCaptureStatusActive);
  issue_step(stream, b);
  cudaGraph_t graph = nullptr;
  REQUIRE(cudaStreamEndCapture(stream, &graph) == cudaSuccess);
  REQUIRE(graph != nullptr);
  CHECK(status_of(stream) == cudaStreamCaptureStatusNone);
  // Nothing ran while capturing.
  CHECK(b.pinned_out[0] != eager[0]);

  // The graph holds the six operations, in order, each with its type.
  std::size_t count = 0;
  REQUIRE(cudaGraphGetNodes(graph, nullptr, &count) == cudaSuccess);
  REQUIRE(count == 6);
  std::vector<cudaGraphNode_t> nodes(count);
  REQUIRE(cudaGraphGetNodes(graph, nodes.data(), &count) == cudaSuccess);
  const cudaGraphNodeType want[] = {cudaGraphNodeTypeMemcpy, cudaGraphNodeTypeMemset,
                                    cudaGraphNodeTypeKernel, cudaGraphNodeTypeKernel,
                                    cudaGraphNodeTypeMemcpy, cudaGraphNodeTypeMemcpy};
  for (std::size_t i = 0; i < count; ++i) {
    cudaGraphNodeType type{};
    REQUIRE(cudaGraphNodeGetType(nodes[i], &type) == cudaSuccess);
    CHECK(type == want[i]);
  }

  cudaGraphExec_t exec = nullptr;
  REQUIRE(cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess);
  REQUIRE(cudaGraphLaunch(exec, stream) == cudaSuccess);
  REQUIRE(cudaStreamSynchronize(stream) == cudaSuccess);
  CHECK(same_bits(out_of(b), eager));
  // A second replay reads the pinned input as it is at launch, like a GPU's.
  fill_input(b, 1.0f);
  issue_step(stream, b);
  REQUIRE(cudaStreamSynchronize(stream) == cudaSuccess);
  const std::vector<float> eager_shifted = out_of(b);
  std::memset(b.pinned_out, 0, kN * sizeof(float));
  REQUIRE(cudaGraphLaunch(exec, stream) == cudaSuccess);
  REQUIRE(cudaStreamSynchronize(stream) == cudaSuccess);
  CHECK(same_bits(out_of(b), eager_shifted));
  CHECK_FALSE(same_bits(eager_shifted, eager));

  CHECK(cudaGraphExecDestroy(exec) == cudaSuccess);
  CHECK(cudaGraphDestroy(graph) == cudaSuccess);
  CHECK(cudaStreamDestroy(stream) == cudaSuccess);
}

TEST_CASE("a host synchronisation during capture fails and invalidates the capture",
          "[emulation][capture]") {
  cudaGetLastError();
  const cudaStream_t stream = new_stream();
  Buffers b;
  fill_input(b, 0.0f);
  enum class Sync { stream, device, event };
  for (const Sync sync : {Sync::stream, Sync::device, Sync::event}) {
    CAPTURE(static_cast<int>(sync));
    cudaEvent_t event = nullptr;
    REQUIRE(cudaEventCreateWithFlags(&event, cudaEventDisableTiming) == cudaSuccess);
    REQUIRE(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal) == cudaSuccess);
    issue_step(stream, b);
    switch (sync) {
      case Sync::stream:
        CHECK(cudaStreamSynchronize(stream) == cudaErrorStreamCaptureUnsupported);
        break;
      case Sync::device:
        CHECK(cudaDeviceSynchronize() == cudaErrorStreamCaptureUnsupported);
        break;
      case Sync::event:
        REQUIRE(cudaEventRecord(event, stream) == cudaSuccess);
        CHECK(cudaEventSynchronize(event) == cudaErrorCapturedEvent);
        break;
    }
    CHECK(status_of(stream) == cudaStreamCaptureStatusInvalidated);
    // Later work into the invalidated capture is refused too.
    CHECK(cudaMemsetAsync(b.z, 0, sizeof(float), stream) == cudaErrorStreamCaptureInvalidated);
    cudaGraph_t graph = reinterpret_cast<cudaGraph_t>(&b);  // must be overwritten
    CHECK(cudaStreamEndCapture(stream, &graph) == cudaErrorStreamCaptureInvalidated);
    CHECK(graph == nullptr);
    const std::string text = cudaGetErrorString(cudaErrorStreamCaptureInvalidated);
    INFO(text);
    CHECK_THAT(text, Catch::Contains(sync == Sync::stream   ? "cudaStreamSynchronize"
                                     : sync == Sync::device ? "cudaDeviceSynchronize"
                                                            : "cudaEventSynchronize"));
    CHECK(status_of(stream) == cudaStreamCaptureStatusNone);
    CHECK(cudaEventDestroy(event) == cudaSuccess);
    cudaGetLastError();
  }
  // The stream works eagerly again once the capture has ended.
  std::memset(b.pinned_out, 0, kN * sizeof(float));
  issue_step(stream, b);
  CHECK(cudaStreamSynchronize(stream) == cudaSuccess);
  CHECK(b.pinned_out[0] == 3.0f * b.pinned_in[0] + 0.5f);
  CHECK(cudaStreamDestroy(stream) == cudaSuccess);
}

TEST_CASE("a copy to or from pageable host memory during capture fails and invalidates it",
          "[emulation][capture]") {
  cudaGetLastError();
  const cudaStream_t stream = new_stream();
  Buffers b;
  std::vector<float> pageable(kN, 1.0f);
  for (const bool upload : {true, false}) {
    CAPTURE(upload);
    REQUIRE(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal) == cudaSuccess);
    const cudaError_t status = upload ? cudaMemcpyAsync(b.x, pageable.data(), kN * sizeof(float),
                                                        cudaMemcpyHostToDevice, stream)
                                      : cudaMemcpyAsync(pageable.data(), b.x, kN * sizeof(float),
                                                        cudaMemcpyDeviceToHost, stream);
    CHECK(status == cudaErrorStreamCaptureUnsupported);
    CHECK_THAT(std::string(cudaGetErrorString(status)), Catch::Contains("pageable"));
    CHECK(status_of(stream) == cudaStreamCaptureStatusInvalidated);
    cudaGraph_t graph = nullptr;
    CHECK(cudaStreamEndCapture(stream, &graph) == cudaErrorStreamCaptureInvalidated);
    CHECK(graph == nullptr);
    cudaGetLastError();
  }
  // Outside a capture the same copy is allowed (the runtime stages it).
  CHECK(cudaMemcpyAsync(b.x, pageable.data(), kN * sizeof(float), cudaMemcpyHostToDevice, stream) ==
        cudaSuccess);
  CHECK(cudaStreamDestroy(stream) == cudaSuccess);
}

TEST_CASE("an allocation during a capture fails unless the capture is relaxed",
          "[emulation][capture]") {
  cudaGetLastError();
  const cudaStream_t stream = new_stream();
  REQUIRE(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal) == cudaSuccess);
  float* p = nullptr;
  CHECK(cudaMalloc(&p, 64) == cudaErrorStreamCaptureUnsupported);
  CHECK(p == nullptr);
  cudaGraph_t graph = nullptr;
  CHECK(cudaStreamEndCapture(stream, &graph) == cudaErrorStreamCaptureInvalidated);
  cudaGetLastError();

  REQUIRE(cudaStreamBeginCapture(stream, cudaStreamCaptureModeRelaxed) == cudaSuccess);
  CHECK(cudaMalloc(&p, 64) == cudaSuccess);
  CHECK(cudaFree(p) == cudaSuccess);
  REQUIRE(cudaStreamEndCapture(stream, &graph) == cudaSuccess);
  REQUIRE(graph != nullptr);
  std::size_t count = 99;
  CHECK(cudaGraphGetNodes(graph, nullptr, &count) == cudaSuccess);
  CHECK(count == 0);
  CHECK(cudaGraphDestroy(graph) == cudaSuccess);
  CHECK(cudaStreamDestroy(stream) == cudaSuccess);
}

TEST_CASE("a capture refuses to wait for an event recorded outside it", "[emulation][capture]") {
  cudaGetLastError();
  const cudaStream_t stream = new_stream(), other = new_stream();
  cudaEvent_t outside = nullptr;
  REQUIRE(cudaEventCreateWithFlags(&outside, cudaEventDisableTiming) == cudaSuccess);
  REQUIRE(cudaEventRecord(outside, other) == cudaSuccess);
  REQUIRE(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal) == cudaSuccess);
  CHECK(cudaStreamWaitEvent(stream, outside, 0) == cudaErrorStreamCaptureIsolation);
  cudaGraph_t graph = nullptr;
  CHECK(cudaStreamEndCapture(stream, &graph) == cudaErrorStreamCaptureInvalidated);
  cudaGetLastError();
  CHECK(cudaEventDestroy(outside) == cudaSuccess);
  CHECK(cudaStreamDestroy(stream) == cudaSuccess);
  CHECK(cudaStreamDestroy(other) == cudaSuccess);
}
