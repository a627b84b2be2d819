#include "io/many_files.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <new>

#include "core/error.hpp"
#include "io/file.hpp"
#include "io/thread_pool.hpp"

namespace gdsio {

namespace {

// Items per claim: small enough to balance, large enough that claiming costs nothing.
constexpr std::size_t kBlock = 16;

template <typename Fn>
void over_blocks(std::size_t n, std::size_t threads, const Fn& fn) {
  const std::size_t blocks = (n + kBlock - 1) / kBlock;
  parallel_for(blocks, threads, [&](std::size_t, WorkQueue& q) {
    std::size_t b;
    while (q.claim(&b))
      for (std::size_t i = b * kBlock; i < n && i < (b + 1) * kBlock; ++i) fn(i);
  });
}

}  // namespace

std::vector<std::uint64_t> file_sizes(const std::vector<std::string>& paths, std::size_t threads) {
  std::vector<std::uint64_t> sizes(paths.size());
  over_blocks(paths.size(), threads, [&](std::size_t i) {
    const std::string& p = paths[i];
    if (p.find('\0') != std::string::npos) throw ValueError("embedded null byte in the path");
    struct stat st{};
    if (::stat(p.c_str(), &st) != 0) {
      const int err = errno;
      throw OsError(err, p, std::strerror(err));  // as Python's os.stat() says it
    }
    if (S_ISDIR(st.st_mode)) throw OsError(EISDIR, p, "is a directory, not a file");
    // (pseudo-files pass here; read_paths' FileHandle refuses them)
    if (!S_ISREG(st.st_mode)) throw OsError(EINVAL, p, "is " + std::string(non_regular_kind(st.st_mode)) + ", not a regular file");
    sizes[i] = static_cast<std::uint64_t>(st.st_size);
  });
  return sizes;
}

std::uint64_t read_paths(const std::vector<PathRead>& reads, std::size_t threads) {
  std::uint64_t total = 0;
  for (const auto& r : reads) {
    GDSIO_EXPECT(r.size == 0 || r.dst != nullptr, ValueError, "reads: null destination for '", r.path, "'");
    total += r.size;
  }
  over_blocks(reads.size(), threads, [&](std::size_t i) {
    const PathRead& r = reads[i];
    const FileHandle f(r.path);  // checks it is a regular file; closed on every path
    f.pread_exact(r.dst, static_cast<std::size_t>(r.size), r.file_offset);
  });
  return total;
}

std::uint64_t read_whole_file(const std::string& path, std::uint64_t max_bytes, void** data) {
  *data = nullptr;
  const FileHandle f(path);  // refuses what File refuses (FIFOs, sockets, pseudo-files), never blocks
  const std::uint64_t n = f.size_at_open();
  if (n > max_bytes || f.is_block()) return n;  // block devices: st_size is 0, the general path sizes them
  void* p = nullptr;
  if (posix_memalign(&p, 64, n > 0 ? static_cast<std::size_t>(n) : 64) != 0) throw std::bad_alloc();
  try {
    f.pread_exact(p, static_cast<std::size_t>(n), 0);
  } catch (...) {
    std::free(p);
    throw;
  }
  *data = p;
  return n;
}

std::int64_t read_file_into(const std::string& path, void* dst, std::uint64_t n) {
  const FileHandle f(path);  // refuses what File refuses (FIFOs, sockets, pseudo-files), never blocks
  if (f.is_block() || f.size_at_open() < n) return -1;
  f.pread_exact(dst, static_cast<std::size_t>(n), 0);
  return static_cast<std::int64_t>(n);
}

}  // namespace gdsio
