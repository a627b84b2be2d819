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

// Launches since the last call (and clears the list), once every stream has
// run what was queued (the records are then complete).
std::vector<LaunchRecord> take_launches();
// Faults since the last call, once every stream has run what was queued:
// divergent barriers, too much shared memory (a fiber's stack overflow is a
// crash instead), and ordering faults (a pinned source rewritten before its
// queued copy ran, pinned memory freed under a queued copy).
std::vector<std::string> take_faults();

// How the streams' workers run what is queued (see emu_runtime.cpp, "streams"):
// kLazy (the default): nothing runs until something needs it (a host wait on
// a stream or an event, an event query, a stream waiting for another's event,
// the legacy stream's implicit waits), so work the host forgot to wait for
// runs late, after the host has moved on; kEager: as soon as it is queued
// (optionally after `delay_us`), as a device would. GDSIO_EMU_STREAMS=lazy|eager
// and GDSIO_EMU_DELAY_US set them at start.
enum class StreamMode { kLazy, kEager };
void set_stream_mode(StreamMode mode, unsigned delay_us = 0);
StreamMode stream_mode();
// How long a host wait may take before the emulator reports it and aborts
// (GDSIO_EMU_WAIT_S, default 60 s): a wait that never ends is a fault, not a hang.
void set_wait_timeout(double seconds);
// Work queued on all streams and not yet run (0 after a device-wide wait).
std::size_t queued_ops();
// Every stream runs what was queued, then returns (cudaDeviceSynchronize without its log line).
void drain_all();

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
