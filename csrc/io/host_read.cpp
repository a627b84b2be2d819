#include "io/host_read.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <new>

namespace gdsio {

AlignedBuffer::AlignedBuffer(std::size_t n) : n_(n) {
  if (posix_memalign(&p_, kDirectAlign, n) != 0) throw std::bad_alloc();
}

AlignedBuffer::~AlignedBuffer() { std::free(p_); }

char* read_span_direct(const FileHandle& f, int direct_fd, char* abuf, std::uint64_t off,
                       std::size_t len) {
  const std::uint64_t a0 = align_down(off, kDirectAlign);
  const std::uint64_t a1 = align_up(off + len, kDirectAlign);
  const std::size_t need = static_cast<std::size_t>(off + len - a0);
  // The aligned span runs past the end of the file on the last chunk; O_DIRECT
  // then returns a short count, which is fine as long as it covers `need`.
  std::size_t got = pread_full(direct_fd, abuf, static_cast<std::size_t>(a1 - a0), a0, f.path());
  if (got < need) throw_truncated(f.path(), off, len, got > off - a0 ? got - (off - a0) : 0);
  return abuf + (off - a0);
}

void read_host_chunk(const FileHandle& f, int direct_fd, char* dst, std::size_t len,
                     std::uint64_t off, AlignedBuffer& bounce, std::size_t chunk_bytes) {
  if (direct_fd < 0) {
    f.pread_exact(dst, len, off);
    return;
  }
  std::size_t body = 0;
  if (off % kDirectAlign == 0 && reinterpret_cast<std::uintptr_t>(dst) % kDirectAlign == 0) {
    body = len - len % kDirectAlign;
    if (body > 0) {
      std::size_t got = pread_full(direct_fd, dst, body, off, f.path());
      if (got < body) throw_truncated(f.path(), off, len, got);
    }
  }
  if (body == len) return;
  if (bounce.size() < direct_span_capacity(chunk_bytes))
    bounce = AlignedBuffer(direct_span_capacity(chunk_bytes));
  char* src = read_span_direct(f, direct_fd, bounce.data(), off + body, len - body);
  std::memcpy(dst + body, src, len - body);
}

HostReadPlan plan_host_read(FileHandle& f, const std::vector<ReadRequest>& reqs,
                            const ReadOptions& opts, ReadResult& res) {
  HostReadPlan plan;
  if (opts.direct_io) {
    plan.direct_fd = f.direct_fd();
    if (plan.direct_fd < 0)
      res.reason = f.direct_io_refusal() + "; read through the page cache instead";
  }
  res.direct_io = plan.direct_fd >= 0;
  plan.chunks = plan_chunks(reqs, opts.chunk_bytes);
  res.chunks = plan.chunks.size();
  res.threads = std::min(opts.threads, std::max<std::size_t>(plan.chunks.size(), 1));
  return plan;
}

}  // namespace gdsio
