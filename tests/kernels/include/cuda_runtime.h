// The emulation build resolves the CUDA runtime header to the emulated subset.
#pragma once
#include "../cuda_emu.hpp"
