// What the replay driver asks of the emulated device: the launches it saw,
// the faults the kernels made, and the device and stream a launch must use.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "cuda_emu.hpp"

namespace gdsio_emu {

struct LaunchRecord {
  std::string kernel;  // as written at the launch site
  std::string where;   // file:line
  dim3 grid, block;
  std::size_t static_shared = 0, dynamic_shared = 0, param_bytes = 0;
  cudaStream_t stream = nullptr;
  int device = -1;
  cudaError_t result = cudaSuccess;  // what cudaGetLastError() reports for it
  std::string why;                   // the limit it broke, when it failed
  std::uint64_t blocks = 0;          // blocks run
  std::uint64_t phases = 0;          // team runs between barriers, over all blocks
};

// Launches since the last call (and clears the list).
std::vector<LaunchRecord> take_launches();
// Kernel faults since the last call: divergent barriers, too much shared
// memory, a fiber's stack overflow is a crash instead.
std::vector<std::string> take_faults();

// The emulated machine: `count` devices, and the device and stream every
// launch must use (a launch elsewhere is a fault).
void set_device_count(int count);
void expect_launch_target(int device, cudaStream_t stream);

// The call log: the runtime calls that order work (stream and event waits,
// copies, pinned allocations), and whatever the fake NVIDIA libraries log
// through gdsio_emu_log, in the order made. Off until switched on.
void set_call_log(bool on);
std::vector<std::string> take_calls();

// The fiber switch in use ("x86-64 assembly" or "ucontext").
const char* fiber_switch_name();

}  // namespace gdsio_emu

// For the fake libraries (dlopen'ed; the test executables export it).
extern "C" void gdsio_emu_log(const char* line);
