// A ring of staging slots filled by a producer outside the core: the remote
// readers' ranged GETs receive each chunk from the socket into a slot (no
// other host copy), then queue the slot's copy to its destination. It is the
// pinned backend's pipeline with the read step handed out: the same pool of
// pinned buffers, the same CUDA copy engine (or the host stand-in in tests),
// the same rule that a slot is refilled only after its last copy completed.
//
// One producer thread per ring (each remote worker owns one); not thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "io/staging_pipeline.hpp"

namespace gdsio {

class StagingRing {
 public:
  // `slots` (>= 2) slots of `slot_bytes` each, acquired lazily from `engine`.
  StagingRing(std::unique_ptr<CopyEngine> engine, std::size_t slots, std::size_t slot_bytes);
  ~StagingRing();  // waits for pending copies, then returns the slots
  StagingRing(const StagingRing&) = delete;
  StagingRing& operator=(const StagingRing&) = delete;

  // The next slot in round-robin order, once the copy queued from it last has
  // completed (the only wait of the pipeline).
  std::size_t next();
  char* data(std::size_t k);
  std::size_t slot_bytes() const { return slot_bytes_; }
  std::size_t slots() const { return n_; }
  // Queues the copy of the first n bytes of slot k to dst.
  void copy(std::size_t k, std::uintptr_t dst, std::size_t n);
  // Waits for every queued copy.
  void drain();
  // Drains, then gives the slots back (idempotent; the destructor calls it).
  void close();
  CopyEngine& engine() { return *engine_; }
  std::uint64_t copies() const { return copies_; }
  std::uint64_t waits() const { return waits_; }

 private:
  StagingSlot& slot(std::size_t k);
  std::unique_ptr<CopyEngine> engine_;
  std::size_t n_;
  std::size_t slot_bytes_;
  std::size_t k_ = 0;
  std::vector<StagingSlot> slots_;
  std::uint64_t copies_ = 0;
  std::uint64_t waits_ = 0;  // next() found its slot's copy still pending
  bool closed_ = false;
};

}  // namespace gdsio
