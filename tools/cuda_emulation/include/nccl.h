#pragma once
// The emulated build's stand-in for NCCL (ranks in one process; see ../nccl.hpp).
#include "cuda_emulation/nccl.hpp"
