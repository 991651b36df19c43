#pragma once
// The emulated build's stand-in for the CUDA runtime header (found first on its include path), so
// kernel files keep their #include <cuda_runtime.h>. See ../README.md.
#include "cuda_emulation/device_math.hpp"
#include "cuda_emulation/execution.hpp"
#include "cuda_emulation/runtime.hpp"
