#include "io/file.hpp"

#include <fcntl.h>
#include <cerrno>
#include <cstring>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#include "core/error.hpp"

namespace gdsio {

namespace {

// File systems whose files report a size that is not their content (procfs:
// 0 bytes; sysfs: 4096): reading st_size bytes would return wrong bytes.
const char* pseudo_filesystem(int fd) {
  struct statfs fs{};
  if (::fstatfs(fd, &fs) != 0) return nullptr;
  switch (static_cast<unsigned long>(fs.f_type)) {
    case 0x9fa0UL: return "procfs";
    case 0x62656572UL: return "sysfs";
    case 0x64626720UL: return "debugfs";
    case 0x74726163UL: return "tracefs";
    case 0x73636673UL: return "securityfs";
    case 0x62656570UL: return "configfs";
    case 0x27e0ebUL: return "cgroupfs";
    case 0x63677270UL: return "cgroup2fs";
    default: return nullptr;
  }
}

}  // namespace

FileHandle::FileHandle(std::string path) : path_(std::move(path)) {
  if (path_.find('\0') != std::string::npos) throw ValueError("embedded null byte in the path");
  // O_NONBLOCK: a FIFO (or a device) must not block the open before we can
  // look at what it is; it is cleared again for a regular file.
  fd_ = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd_ < 0) {
    const int err = errno;
    struct stat what{};
    // A Unix socket cannot be opened (ENXIO, "no such device"): say what it is.
    if (err == ENXIO && ::stat(path_.c_str(), &what) == 0 && S_ISSOCK(what.st_mode))
      throw OsError(ENXIO, path_, "is a socket, not a regular file");
    throw OsError(err, path_, std::strerror(err));  // as Python's open() says it
  }
  struct stat st{};
  if (::fstat(fd_, &st) != 0) {
    int err = errno;
    close();
    throw_errno(err, path_, "cannot stat");
  }
  if (S_ISDIR(st.st_mode)) {
    close();
    throw OsError(EISDIR, path_, "is a directory, not a file");
  }
  if (!S_ISREG(st.st_mode) && !S_ISBLK(st.st_mode)) {
    const char* what = non_regular_kind(st.st_mode);
    close();
    throw OsError(EINVAL, path_, std::string("is ") + what + ", not a regular file");
  }
  if (const char* fs = pseudo_filesystem(fd_)) {
    close();
    throw OsError(EINVAL, path_, std::string("is a pseudo-file of ") + fs +
                                     ": its size is not its content; read it with open().read()");
  }
  const int flags = ::fcntl(fd_, F_GETFL);
  if (flags < 0 || ::fcntl(fd_, F_SETFL, flags & ~O_NONBLOCK) != 0) {
    int err = errno;
    close();
    throw_errno(err, path_, "cannot set up");
  }
  is_block_ = S_ISBLK(st.st_mode);
  size_at_open_ = static_cast<std::uint64_t>(st.st_size);
}

const char* non_regular_kind(unsigned mode) {
  return S_ISFIFO(mode) ? "a FIFO (named pipe)" : S_ISCHR(mode) ? "a character device"
         : S_ISSOCK(mode) ? "a socket" : "not a regular file";
}

FileHandle::~FileHandle() { close(); }

void FileHandle::close() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  std::lock_guard<std::mutex> lk(direct_mu_);
  if (direct_fd_ >= 0) ::close(direct_fd_);
  direct_fd_ = -1;
}

std::uint64_t FileHandle::size() const {
  if (is_block_) {  // st_size is 0 for a block device; its end is its size
    const off_t end = ::lseek(fd_, 0, SEEK_END);
    if (end < 0) throw_errno(errno, path_, "cannot size");
    return static_cast<std::uint64_t>(end);
  }
  struct stat st{};
  if (::fstat(fd_, &st) != 0) throw_errno(errno, path_, "cannot stat");
  return static_cast<std::uint64_t>(st.st_size);
}

int FileHandle::direct_fd() {
  std::lock_guard<std::mutex> lk(direct_mu_);
  if (!direct_tried_) {
    direct_tried_ = true;
    // Reopen the file already open, not the path: the path may name another
    // file by now (renamed over), and both descriptors must read the same one.
    const std::string self = "/proc/self/fd/" + std::to_string(fd_);
    direct_fd_ = ::open(self.c_str(), O_RDONLY | O_CLOEXEC | O_DIRECT);
    if (direct_fd_ < 0 && errno == ENOENT) direct_fd_ = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC | O_DIRECT);
    if (direct_fd_ < 0) {
      int err = errno;
      direct_refusal_ = (err == EINVAL)
                            ? "O_DIRECT refused by this filesystem (EINVAL)"
                            : std::string("O_DIRECT open failed: ") + std::strerror(err);
    } else {
      struct stat a{}, b{};
      if (::fstat(fd_, &a) != 0 || ::fstat(direct_fd_, &b) != 0 || a.st_dev != b.st_dev || a.st_ino != b.st_ino) {
        ::close(direct_fd_);
        direct_fd_ = -1;
        direct_refusal_ = "the path names another file than the one opened (replaced since)";
      }
    }
  }
  return direct_fd_;
}

std::string FileHandle::direct_io_refusal() {
  std::lock_guard<std::mutex> lk(direct_mu_);
  return direct_refusal_;
}

std::size_t pread_full(int fd, void* dst, std::size_t n, std::uint64_t offset,
                       const std::string& path) {
  auto* p = static_cast<char*>(dst);
  std::size_t done = 0;
  while (done < n) {
    ssize_t r = ::pread(fd, p + done, n - done, static_cast<off_t>(offset + done));
    if (r < 0) {
      if (errno == EINTR) continue;
      throw_errno(errno, path, "read failed at offset " + std::to_string(offset + done));
    }
    if (r == 0) break;  // end of file
    done += static_cast<std::size_t>(r);
  }
  return done;
}

void throw_truncated(const std::string& path, std::uint64_t offset, std::size_t wanted,
                     std::size_t got) {
  throw OsError(EIO, path,
                detail::concat("ended early (truncated while reading?): wanted ",
                               wanted, " bytes at offset ", offset, ", the file ended after ", got));
}

void FileHandle::pread_exact(void* dst, std::size_t n, std::uint64_t offset) const {
  std::size_t got = pread_full(fd_, dst, n, offset, path_);
  if (got != n) throw_truncated(path_, offset, n, got);
}

}  // namespace gdsio
