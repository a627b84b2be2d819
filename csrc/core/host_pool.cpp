#include "core/host_pool.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <deque>
#include <mutex>
#include <new>

namespace gdsio {

namespace {

constexpr std::size_t kHuge = std::size_t{2} << 20;
constexpr std::size_t kPage = 4096;
constexpr std::size_t kLazyFreeMin = std::size_t{8} << 20;  // idle blocks from this size on are MADV_FREE

struct Idle {
  void* data;
  std::size_t bytes;
  bool huge;
};

struct Pool {
  std::mutex mu;
  std::deque<Idle> idle;  // oldest first
  std::size_t idle_bytes = 0;
  std::size_t cap = 0;
  std::uint64_t reuses = 0, maps = 0;

  Pool() {
    const long pages = ::sysconf(_SC_PHYS_PAGES);
    const std::size_t phys = pages > 0 ? static_cast<std::size_t>(pages) * kPage : 0;
    cap = std::min(phys / 8, std::size_t{4} << 30);
  }
};

// Never destroyed: tensors freed during interpreter teardown still release here.
Pool& pool() {
  static Pool* p = new Pool();
  return *p;
}

std::size_t round_up(std::size_t v, std::size_t a) { return (v + a - 1) / a * a; }

void* map_fresh(std::size_t bytes, bool huge) {
  if (!huge) {
    void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) throw std::bad_alloc();
    return p;
  }
  // 2 MiB-aligned, so that every 2 MiB of the buffer can be one huge page:
  // map 2 MiB more and unmap the unaligned ends.
  void* raw = ::mmap(nullptr, bytes + kHuge, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) throw std::bad_alloc();
  const auto base = reinterpret_cast<std::uintptr_t>(raw);
  const std::uintptr_t start = round_up(base, kHuge);
  if (start > base) ::munmap(raw, start - base);
  const std::uintptr_t end = start + bytes, raw_end = base + bytes + kHuge;
  if (raw_end > end) ::munmap(reinterpret_cast<void*>(end), raw_end - end);
  void* p = reinterpret_cast<void*>(start);
#ifdef MADV_HUGEPAGE
  ::madvise(p, bytes, MADV_HUGEPAGE);  // a kernel without THP: plain pages, still correct
#endif
  return p;
}

}  // namespace

HostBlock host_acquire(std::size_t nbytes, bool huge) {
  const std::size_t bytes = round_up(std::max<std::size_t>(nbytes, 1), huge ? kHuge : kPage);
  Pool& p = pool();
  {
    std::lock_guard<std::mutex> lk(p.mu);
    // The smallest idle block that fits without wasting more than an eighth.
    auto best = p.idle.end();
    for (auto it = p.idle.begin(); it != p.idle.end(); ++it)
      if (it->huge == huge && it->bytes >= bytes && it->bytes - bytes <= bytes / 8 &&
          (best == p.idle.end() || it->bytes < best->bytes))
        best = it;
    if (best != p.idle.end()) {
      HostBlock b{best->data, best->bytes, true};
      p.idle_bytes -= best->bytes;
      p.idle.erase(best);
      ++p.reuses;
      return b;
    }
    ++p.maps;
  }
  return HostBlock{map_fresh(bytes, huge), bytes, false};
}

void host_release(void* data, std::size_t bytes, bool huge) noexcept {
  if (data == nullptr) return;
  Pool& p = pool();
  std::deque<Idle> drop;
  {
    std::lock_guard<std::mutex> lk(p.mu);
    if (bytes > p.cap) {
      drop.push_back(Idle{data, bytes, huge});
    } else {
      while (p.idle_bytes + bytes > p.cap && !p.idle.empty()) {
        drop.push_back(p.idle.front());
        p.idle_bytes -= p.idle.front().bytes;
        p.idle.pop_front();
      }
#ifdef MADV_FREE
      // Large blocks: the kernel may take the pages back; a reuse keeps them if it did not. Small ones (decoded
      // images) stay as they are: marking 2 MB lazily free costs ~45 us and its reuse ~110 us more of TLB misses
      // here, a third of a fresh buffer's faults, for pages the next image of that size takes at once.
      if (bytes >= kLazyFreeMin) ::madvise(data, bytes, MADV_FREE);
#endif
      p.idle.push_back(Idle{data, bytes, huge});
      p.idle_bytes += bytes;
    }
  }
  for (const Idle& d : drop) ::munmap(d.data, d.bytes);  // outside the lock: munmap of GiBs takes a while
}

HostPoolStats host_pool_stats() {
  Pool& p = pool();
  std::lock_guard<std::mutex> lk(p.mu);
  return HostPoolStats{p.idle_bytes, p.idle.size(), p.cap, p.reuses, p.maps};
}

std::size_t host_pool_trim() {
  Pool& p = pool();
  std::deque<Idle> drop;
  {
    std::lock_guard<std::mutex> lk(p.mu);
    drop.swap(p.idle);
    p.idle_bytes = 0;
  }
  std::size_t n = 0;
  for (const Idle& d : drop) {
    ::munmap(d.data, d.bytes);
    n += d.bytes;
  }
  return n;
}

}  // namespace gdsio
