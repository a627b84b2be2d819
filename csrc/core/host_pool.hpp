// Large host buffers that gdsio allocates (read() to the CPU, the tensor
// loaders): anonymous mappings, advised MADV_HUGEPAGE on request, and kept for
// reuse when their owner lets go of them. A fresh 2 GiB buffer costs its page
// faults and the kernel's zeroing of every page (with THP, direct compaction
// too), more than the copy out of the page cache that fills it; malloc gives
// the peers' loops (np.load, safetensors' clones) warm heap memory the same way.
//
// Released buffers stay mapped; those of 8 MiB and more are handed back to the
// kernel lazily (MADV_FREE): under memory pressure it reclaims them without
// swapping, and a reclaimed page reads as zero when touched again (callers
// overwrite it). Smaller ones (decoded images) stay resident for the next.
// The idle total is capped (an eighth of the machine's memory, at most 4 GiB);
// the oldest go first.
#pragma once

#include <cstddef>
#include <cstdint>

namespace gdsio {

struct HostBlock {
  void* data = nullptr;     // where the caller's bytes start (page-aligned)
  std::size_t bytes = 0;    // the mapping's size (>= what was asked)
  bool reused = false;      // came from the idle list (no fresh pages)
};

// A mapping of at least `nbytes` (huge: 2 MiB-aligned and advised MADV_HUGEPAGE).
// Throws std::bad_alloc when the kernel refuses.
HostBlock host_acquire(std::size_t nbytes, bool huge);

// Gives a block from host_acquire back: kept idle for reuse, or unmapped.
void host_release(void* data, std::size_t bytes, bool huge) noexcept;

struct HostPoolStats {
  std::size_t idle_bytes = 0;
  std::size_t idle_blocks = 0;
  std::size_t cap_bytes = 0;
  std::uint64_t reuses = 0;
  std::uint64_t maps = 0;
};
HostPoolStats host_pool_stats();

// Unmaps every idle block (returns the bytes given back).
std::size_t host_pool_trim();

}  // namespace gdsio
