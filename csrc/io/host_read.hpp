// Reading one chunk into host memory, buffered or with O_DIRECT, shared by
// the posix backend (into the caller's buffer) and the pinned pipeline (into
// a staging buffer).
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>

#include <vector>

#include "io/file.hpp"
#include "io/read_plan.hpp"

namespace gdsio {

// Page-aligned scratch memory, freed by the destructor.
class AlignedBuffer {
 public:
  AlignedBuffer() = default;
  explicit AlignedBuffer(std::size_t n);
  ~AlignedBuffer();
  AlignedBuffer(AlignedBuffer&& o) noexcept : p_(o.p_), n_(o.n_) { o.p_ = nullptr; o.n_ = 0; }
  AlignedBuffer& operator=(AlignedBuffer&& o) noexcept {
    std::swap(p_, o.p_);
    std::swap(n_, o.n_);
    return *this;
  }
  AlignedBuffer(const AlignedBuffer&) = delete;
  char* data() const noexcept { return static_cast<char*>(p_); }
  std::size_t size() const noexcept { return n_; }

 private:
  void* p_ = nullptr;
  std::size_t n_ = 0;
};

// Capacity an aligned buffer needs to take any chunk of `chunk_bytes` with
// its O_DIRECT head and tail padding.
inline std::size_t direct_span_capacity(std::size_t chunk_bytes) {
  return chunk_bytes + 2 * kDirectAlign;
}

// O_DIRECT read of the aligned span around [off, off+len) into `abuf`
// (page-aligned, direct_span_capacity(len) bytes); returns where byte `off` landed.
char* read_span_direct(const FileHandle& f, int direct_fd, char* abuf, std::uint64_t off,
                       std::size_t len);

// Reads [off, off+len) into `dst`. direct_fd < 0 reads buffered; otherwise the
// aligned body goes straight into `dst` when `dst` and `off` allow it, and the
// rest through `bounce` (allocated on first need).
void read_host_chunk(const FileHandle& f, int direct_fd, char* dst, std::size_t len,
                     std::uint64_t off, AlignedBuffer& bounce, std::size_t chunk_bytes);

// What the host-side readers (posix, pinned) share before their loops: the
// O_DIRECT descriptor when asked for (-1, with the refusal in res.reason, when
// the file system refuses it) and the chunks; fills res.direct_io/chunks/threads.
struct HostReadPlan {
  int direct_fd = -1;
  std::vector<Chunk> chunks;
};
HostReadPlan plan_host_read(FileHandle& f, const std::vector<ReadRequest>& reqs,
                            const ReadOptions& opts, ReadResult& res);

}  // namespace gdsio
