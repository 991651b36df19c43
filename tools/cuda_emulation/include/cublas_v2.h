#pragma once
// The emulated build's stand-in for cuBLAS (a reference SGEMM; see ../cublas.hpp).
#include "cuda_emulation/cublas.hpp"
