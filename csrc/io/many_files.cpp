#include "io/many_files.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
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
    struct stat st{};
    if (::stat(p.c_str(), &st) != 0) throw_errno(errno, p, "cannot stat '" + p + "'");
    if (S_ISDIR(st.st_mode)) throw OsError(EISDIR, p, "'" + p + "' is a directory, not a file");
    if (!S_ISREG(st.st_mode)) throw OsError(EINVAL, p, "'" + p + "' is not a regular file");
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
  // FileHandle's checks, with the fstat it makes kept for the size.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw_errno(errno, path, "cannot open '" + path + "'");
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat st{};
  if (::fstat(fd, &st) != 0) throw_errno(errno, path, "cannot stat '" + path + "'");
  if (S_ISDIR(st.st_mode)) throw OsError(EISDIR, path, "'" + path + "' is a directory, not a file");
  if (!S_ISREG(st.st_mode) && !S_ISBLK(st.st_mode)) throw OsError(EINVAL, path, "'" + path + "' is not a regular file");
  const std::uint64_t n = static_cast<std::uint64_t>(st.st_size);
  if (n > max_bytes || S_ISBLK(st.st_mode)) return n;  // block devices: st_size is 0, the general path sizes them
  void* p = nullptr;
  if (posix_memalign(&p, 64, n > 0 ? static_cast<std::size_t>(n) : 64) != 0) throw std::bad_alloc();
  try {
    const std::size_t got = pread_full(fd, p, static_cast<std::size_t>(n), 0, path);
    if (got != n) throw_truncated(path, 0, static_cast<std::size_t>(n), got);
  } catch (...) {
    std::free(p);
    throw;
  }
  *data = p;
  return n;
}

}  // namespace gdsio
