// Device micro-checks the next designs of the fused step need, measured in a few seconds by the
// GPU check's `probes` stage (scripts/gpu_check.sh):
//
//   boundary   the cost of a kernel boundary inside a captured graph: a graph of kChain empty
//              kernels one after another (each a full wave of blocks, as a step's kernels are),
//              launched as they are and with programmatic dependent launch (each kernel's blocks
//              may start while its predecessor's last blocks finish; they wait for it with
//              cudaGridDependencySynchronize before doing anything, as a kernel of the step
//              would). Microseconds a graph and a boundary, best of kRepeats timings.
//   grid_sync  a cooperative kernel's grid.sync() with one and two resident blocks per SM (132
//              and 264 blocks on a 132-SM H100/H200): microseconds a barrier. A persistent step
//              kernel would pay it between its phases instead of a boundary.
//
// Not a test and not part of the tool: it prints what it measured, one "probe NAME VALUE UNIT"
// line per figure and a sentence per probe. Exit 0 measured, 1 a CUDA call failed (the call and
// its error printed), 77 no GPU visible. It needs a real GPU (sm_90 for the programmatic launch;
// on older ones that probe is reported as not available): the CUDA emulation runs neither.
#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

namespace {

constexpr int kChain = 12;   // the fused step's kernels today (docs/gpu_speed.md)
constexpr int kRepeats = 5;  // timings per figure; the best is reported
constexpr int kGraphRuns = 200;
constexpr int kSyncs = 2000;  // barriers per cooperative launch
constexpr int kThreads = 256;

#define PROBE_CHECK(expr)                                                   \
  do {                                                                      \
    const cudaError_t probe_error = (expr);                                 \
    if (probe_error != cudaSuccess) {                                       \
      std::fprintf(stderr, "device_probes: %s failed: %s (%s:%d)\n", #expr, \
                   cudaGetErrorString(probe_error), __FILE__, __LINE__);    \
      std::exit(1);                                                         \
    }                                                                       \
  } while (0)

// An empty kernel of the chain: one store by one thread, so the compiler keeps it. `dependent`:
// launched with programmatic dependent launch, it waits for its predecessor's memory before the
// store and lets its successor start as soon as every block got here.
__global__ void chained_kernel(int* sink, int value, bool dependent) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if (dependent) {
    cudaGridDependencySynchronize();
    cudaTriggerProgrammaticLaunchCompletion();
  }
#endif
  if (blockIdx.x == 0 && threadIdx.x == 0) *sink = value;
}

__global__ void grid_sync_kernel(int* sink, int syncs) {
  cooperative_groups::grid_group grid = cooperative_groups::this_grid();
  for (int i = 0; i < syncs; ++i) grid.sync();
  if (blockIdx.x == 0 && threadIdx.x == 0) *sink = syncs;
}

// Microseconds one launch of `graph` takes, best of kRepeats timings of kGraphRuns launches.
float graph_microseconds(cudaGraphExec_t graph, cudaStream_t stream) {
  cudaEvent_t start, stop;
  PROBE_CHECK(cudaEventCreate(&start));
  PROBE_CHECK(cudaEventCreate(&stop));
  for (int i = 0; i < 20; ++i) PROBE_CHECK(cudaGraphLaunch(graph, stream));  // warm
  float best = 1e30f;
  for (int r = 0; r < kRepeats; ++r) {
    PROBE_CHECK(cudaEventRecord(start, stream));
    for (int i = 0; i < kGraphRuns; ++i) PROBE_CHECK(cudaGraphLaunch(graph, stream));
    PROBE_CHECK(cudaEventRecord(stop, stream));
    PROBE_CHECK(cudaEventSynchronize(stop));
    float ms = 0.0f;
    PROBE_CHECK(cudaEventElapsedTime(&ms, start, stop));
    best = std::min(best, 1000.0f * ms / kGraphRuns);
  }
  PROBE_CHECK(cudaEventDestroy(start));
  PROBE_CHECK(cudaEventDestroy(stop));
  return best;
}

// The chain captured into a graph, its kernels launched plainly or with programmatic dependent
// launch (the attribute on every kernel after the first).
cudaGraphExec_t capture_chain(cudaStream_t stream, int blocks, int* sink, bool dependent) {
  PROBE_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  for (int k = 0; k < kChain; ++k) {
    cudaLaunchConfig_t config = {};
    config.gridDim = dim3(blocks);
    config.blockDim = dim3(kThreads);
    config.stream = stream;
    cudaLaunchAttribute attribute[1];
    attribute[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attribute[0].val.programmaticStreamSerializationAllowed = 1;
    config.attrs = attribute;
    config.numAttrs = dependent && k > 0 ? 1 : 0;
    PROBE_CHECK(cudaLaunchKernelEx(&config, chained_kernel, sink, k, dependent));
  }
  cudaGraph_t graph;
  PROBE_CHECK(cudaStreamEndCapture(stream, &graph));
  cudaGraphExec_t exec;
  PROBE_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  PROBE_CHECK(cudaGraphDestroy(graph));
  return exec;
}

void probe_boundary(const cudaDeviceProp& prop, cudaStream_t stream, int* sink) {
  const int blocks = prop.multiProcessorCount;  // one wave, as a step's kernels
  cudaGraphExec_t plain = capture_chain(stream, blocks, sink, false);
  const float plain_us = graph_microseconds(plain, stream);
  PROBE_CHECK(cudaGraphExecDestroy(plain));
  std::printf("probe boundary_graph_us %.2f us\n", plain_us);
  std::printf("probe boundary_us %.3f us\n", plain_us / kChain);
  std::printf(
      "boundary: a graph of %d empty kernels of %d blocks takes %.2f us (%.3f us a kernel)\n",
      kChain, blocks, plain_us, plain_us / kChain);
  if (prop.major < 9) {
    std::printf(
        "boundary: programmatic dependent launch not available (compute capability %d.%d "
        "< 9.0)\n",
        prop.major, prop.minor);
    return;
  }
  cudaGraphExec_t dependent = capture_chain(stream, blocks, sink, true);
  const float dependent_us = graph_microseconds(dependent, stream);
  PROBE_CHECK(cudaGraphExecDestroy(dependent));
  std::printf("probe boundary_pdl_graph_us %.2f us\n", dependent_us);
  std::printf("probe boundary_pdl_us %.3f us\n", dependent_us / kChain);
  std::printf("boundary: with programmatic dependent launch %.2f us (%.3f us a kernel)\n",
              dependent_us, dependent_us / kChain);
}

void probe_grid_sync(const cudaDeviceProp& prop, cudaStream_t stream, int* sink) {
  if (!prop.cooperativeLaunch) {
    std::printf("grid_sync: the device does not support cooperative launches\n");
    return;
  }
  int per_sm = 0;
  PROBE_CHECK(
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, grid_sync_kernel, kThreads, 0));
  cudaEvent_t start, stop;
  PROBE_CHECK(cudaEventCreate(&start));
  PROBE_CHECK(cudaEventCreate(&stop));
  for (int resident : {1, 2}) {
    const int blocks = resident * prop.multiProcessorCount;
    if (resident > per_sm) {
      std::printf("grid_sync: %d blocks would not all be resident (%d a SM fit)\n", blocks, per_sm);
      continue;
    }
    int syncs = kSyncs;
    void* args[] = {&sink, &syncs};
    float best = 1e30f;
    for (int r = 0; r <= kRepeats; ++r) {  // the first launch warms up and is not counted
      PROBE_CHECK(cudaEventRecord(start, stream));
      PROBE_CHECK(cudaLaunchCooperativeKernel(reinterpret_cast<void*>(grid_sync_kernel),
                                              dim3(blocks), dim3(kThreads), args, 0, stream));
      PROBE_CHECK(cudaEventRecord(stop, stream));
      PROBE_CHECK(cudaEventSynchronize(stop));
      float ms = 0.0f;
      PROBE_CHECK(cudaEventElapsedTime(&ms, start, stop));
      if (r > 0) best = std::min(best, 1000.0f * ms / kSyncs);
    }
    std::printf("probe grid_sync_%d_blocks_us %.3f us\n", blocks, best);
    std::printf("grid_sync: %d resident blocks of %d threads: %.3f us a grid.sync()\n", blocks,
                kThreads, best);
  }
  PROBE_CHECK(cudaEventDestroy(start));
  PROBE_CHECK(cudaEventDestroy(stop));
}

}  // namespace

int main() {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("device_probes: no GPU visible; nothing measured\n");
    return 77;
  }
  cudaDeviceProp prop;
  PROBE_CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf("device_probes on %s (%d SMs, compute capability %d.%d)\n", prop.name,
              prop.multiProcessorCount, prop.major, prop.minor);
  cudaStream_t stream;
  PROBE_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  int* sink = nullptr;
  PROBE_CHECK(cudaMalloc(&sink, sizeof(int)));
  probe_boundary(prop, stream, sink);
  probe_grid_sync(prop, stream, sink);
  PROBE_CHECK(cudaFree(sink));
  PROBE_CHECK(cudaStreamDestroy(stream));
  return 0;
}
