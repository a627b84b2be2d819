// The pipelined double copy behind the `pinned` backend. Each reader thread
// owns a ring of staging buffers; the disk read into buffer k overlaps the
// asynchronous copy out of buffer k-1, and an event per buffer guards its
// reuse. Nothing waits per chunk: a thread waits only when it comes back to a
// buffer whose copy has not finished, and once at the end for its last copies.
//
// The copy engine is abstract so that the same pipeline runs against CUDA
// (pinned memory, cudaMemcpyAsync on the caller's stream) and against a host
// stand-in that tests check the ordering with on machines without a GPU.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "io/file.hpp"
#include "io/read_plan.hpp"

namespace gdsio {

struct StagingSlot {
  char* host = nullptr;      // page-aligned staging memory, `capacity` bytes
  std::size_t capacity = 0;
  void* allocation = nullptr;  // what the engine allocated (host lies inside it, page-aligned)
  void* event = nullptr;     // engine-specific completion marker
  std::uint64_t ticket = 0;  // engine-specific sequence number
  int device = -1;           // the device its event belongs to (CUDA events are per device)
  bool pending = false;      // a copy out of this slot may still be running
};

class CopyEngine {
 public:
  virtual ~CopyEngine() = default;
  // Called once on each reader thread before it touches the engine.
  virtual void bind_thread() {}
  // The CUDA device its copies go to; -1: none (the host stand-in).
  virtual int device() const { return -1; }
  virtual StagingSlot acquire(std::size_t capacity) = 0;
  // Takes back a slot whose copies have completed.
  virtual void release(StagingSlot& s) = 0;
  // Queues the copy of n bytes from `src` (inside s) to `dst` and marks s pending.
  virtual void copy_async(char* dst, const char* src, std::size_t n, StagingSlot& s) = 0;
  // Blocks until the last copy queued from s has completed; clears pending.
  virtual void wait(StagingSlot& s) = 0;
  // Gives up a slot whose wait failed: a copy may still read it, so it is
  // never reused (and its memory is not freed under the copy).
  virtual void abandon(StagingSlot& s) { s.host = nullptr; }
};

// Reads the requests through `engine`; fills res.chunks, res.threads, res.direct_io.
void staged_read(FileHandle& f, CopyEngine& engine, const std::vector<ReadRequest>& reqs,
                 const ReadOptions& opts, ReadResult& res);

// Host stand-in for the copy engine: one copy thread in FIFO order (as one
// CUDA stream), an optional delay per copy, and a check that no staging slot
// is overwritten while its copy is queued.
struct HostEngineReport {
  std::uint64_t copies = 0;
  std::uint64_t reuse_violations = 0;  // slot bytes changed before their copy ran
  std::uint64_t max_queued = 0;        // most copies queued at once (overlap seen)
  std::uint64_t waits = 0;             // times a reader blocked on a slot
};
HostEngineReport staged_read_host_engine(FileHandle& f, const std::vector<ReadRequest>& reqs,
                                         const ReadOptions& opts, unsigned copy_delay_us,
                                         ReadResult& res);


// The host stand-in on its own, for a StagingRing (io/staging_ring.hpp) that
// tests drive from outside the core; `report` reads what it saw.
std::unique_ptr<CopyEngine> make_host_copy_engine(unsigned copy_delay_us);
HostEngineReport host_copy_engine_report(CopyEngine& engine);

}  // namespace gdsio
