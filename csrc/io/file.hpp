// An open file: a buffered descriptor always, an O_DIRECT one on request.
// Both are closed by the destructor, on every path. Opening never blocks:
// a FIFO, a socket, a character device or a procfs/sysfs pseudo-file (whose
// size is not its content) is refused with OSError(EINVAL) naming what it is.
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>

namespace gdsio {

// O_DIRECT wants the file offset, the length and the memory address aligned to
// the logical block size; 4096 covers every device we meet.
constexpr std::size_t kDirectAlign = 4096;

inline std::uint64_t align_down(std::uint64_t v, std::uint64_t a) { return v - v % a; }
inline std::uint64_t align_up(std::uint64_t v, std::uint64_t a) { return align_down(v + a - 1, a); }

class FileHandle {
 public:
  explicit FileHandle(std::string path);
  ~FileHandle();
  FileHandle(const FileHandle&) = delete;
  FileHandle& operator=(const FileHandle&) = delete;

  const std::string& path() const noexcept { return path_; }
  int fd() const noexcept { return fd_; }
  // Size now (fstat), so that a file that grew or shrank since open is seen.
  std::uint64_t size() const;
  // st_size of the fstat made at open (0 for a block device), for one-shot reads.
  std::uint64_t size_at_open() const noexcept { return size_at_open_; }
  bool is_block() const noexcept { return is_block_; }

  // The O_DIRECT descriptor, opened on first use; -1 when this file system
  // refuses O_DIRECT, with the reason in direct_io_refusal().
  int direct_fd();
  std::string direct_io_refusal();

  // Reads exactly `n` bytes at `offset` through the buffered descriptor,
  // retrying EINTR and short reads. Throws OsError if the file ends first.
  void pread_exact(void* dst, std::size_t n, std::uint64_t offset) const;

  void close();

 private:
  std::string path_;
  int fd_ = -1;
  std::mutex direct_mu_;
  int direct_fd_ = -1;
  bool direct_tried_ = false;
  bool is_block_ = false;
  std::uint64_t size_at_open_ = 0;
  std::string direct_refusal_;
};

// What a file of this st_mode is, for errors: "a FIFO (named pipe)", "a socket", ...
const char* non_regular_kind(unsigned mode);

// pread until `n` bytes or end of file, retrying EINTR; returns the count read.
std::size_t pread_full(int fd, void* dst, std::size_t n, std::uint64_t offset,
                       const std::string& path);

[[noreturn]] void throw_truncated(const std::string& path, std::uint64_t offset,
                                  std::size_t wanted, std::size_t got);

}  // namespace gdsio
