// The `pinned` backend: the staging pipeline with CUDA as copy engine. Pinned
// staging buffers come from a process-wide pool, reused across calls, bounded
// to the largest working set one call needed, and freed by release_staging().
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "io/file.hpp"
#include "io/read_plan.hpp"
#include "io/staging_pipeline.hpp"

namespace gdsio {

// Reads the requests into device memory of opts.device; the copies are ordered
// on opts.stream and have completed when this returns.
ReadResult pinned_read(FileHandle& f, const std::vector<ReadRequest>& reqs, const ReadOptions& opts);

// The CUDA copy engine of the pinned backend (its staging buffers from the
// same pool), for a producer outside the core: a StagingRing fed by ranged
// GETs. The pool keeps up to `reserve_bytes` cached between calls.
std::unique_ptr<CopyEngine> make_cuda_copy_engine(int device, std::uintptr_t stream, std::size_t reserve_bytes);

struct StagingPoolStats {
  std::size_t cached_buffers = 0;
  std::size_t cached_bytes = 0;
  std::size_t in_use_buffers = 0;
  std::size_t limit_bytes = 0;
};
StagingPoolStats staging_pool_stats();
// Frees every cached pinned buffer (at exit, or to give memory back).
void release_staging();

}  // namespace gdsio
