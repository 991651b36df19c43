#pragma once
// The emulated build's stand-in for the CUDA runtime header (found first on its include path), so
// kernel files keep their #include <cuda_runtime.h>. See ../README.md.
#include "backend/cuda/emulation/device_math.hpp"
#include "backend/cuda/emulation/execution.hpp"
#include "backend/cuda/emulation/runtime.hpp"
