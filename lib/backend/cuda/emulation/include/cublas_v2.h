#pragma once
// The emulated build's stand-in for cuBLAS (a reference SGEMM; see ../cublas.hpp).
#include "backend/cuda/emulation/cublas.hpp"
