// The `pinned` backend: the staging pipeline with CUDA as copy engine. Pinned
// staging buffers come from a process-wide pool, reused across calls, bounded
// to the largest working set one call needed, and freed by release_staging().
#pragma once

#include <cstddef>
#include <vector>

#include "io/file.hpp"
#include "io/read_plan.hpp"

namespace gdsio {

// Reads the requests into device memory of opts.device; the copies are ordered
// on opts.stream and have completed when this returns.
ReadResult pinned_read(FileHandle& f, const std::vector<ReadRequest>& reqs, const ReadOptions& opts);

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
