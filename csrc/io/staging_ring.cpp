#include "io/staging_ring.hpp"

#include <exception>
#include <optional>

#include "core/cuda_rt.hpp"
#include "core/error.hpp"

namespace gdsio {

namespace {
// The engine's device current for one call, the caller's context restored
// after (DeviceGuard), as every other entry point does: with one remote worker
// the ring runs on the caller's own thread, and a read into cuda:1 must not
// leave cuda:1 current there. The host stand-in has no device.
class EngineScope {
 public:
  explicit EngineScope(CopyEngine& e) {
    if (e.device() >= 0) guard_.emplace(e.device());
    else e.bind_thread();
  }

 private:
  std::optional<DeviceGuard> guard_;
};
}  // namespace

StagingRing::StagingRing(std::unique_ptr<CopyEngine> engine, std::size_t slots, std::size_t slot_bytes)
    : engine_(std::move(engine)), n_(slots), slot_bytes_(slot_bytes) {
  GDSIO_EXPECT(slots >= 2 && slots <= 64, ValueError, "a staging ring needs 2 to 64 slots, got ", slots);
  GDSIO_EXPECT(slot_bytes > 0 && slot_bytes <= (std::size_t{1} << 30), ValueError,
               "slot_bytes must be between 1 byte and 1 GiB, got ", slot_bytes);
  slots_.reserve(n_);
}

StagingRing::~StagingRing() {
  try {
    close();
  } catch (...) {
    // A failed wait was already reported by the call that saw it; close()
    // abandoned the slot (never reused, never freed under a copy).
  }
}

StagingSlot& StagingRing::slot(std::size_t k) {
  GDSIO_EXPECT(!closed_, ValueError, "the staging ring is closed");
  GDSIO_EXPECT(k < slots_.size(), ValueError, "no staging slot ", k, " (", slots_.size(), " acquired)");
  return slots_[k];
}

std::size_t StagingRing::next() {
  GDSIO_EXPECT(!closed_, ValueError, "the staging ring is closed");
  EngineScope scope(*engine_);
  if (slots_.size() < n_ && k_ == slots_.size()) slots_.push_back(engine_->acquire(slot_bytes_));
  const std::size_t k = k_ % slots_.size();
  ++k_;
  StagingSlot& s = slots_[k];
  if (s.pending) {
    ++waits_;
    engine_->wait(s);  // the copy queued from this slot a round ago
  }
  return k;
}

char* StagingRing::data(std::size_t k) { return slot(k).host; }

void StagingRing::copy(std::size_t k, std::uintptr_t dst, std::size_t n) {
  StagingSlot& s = slot(k);
  GDSIO_EXPECT(n <= s.capacity, ValueError, "a copy of ", n, " bytes from a ", s.capacity, "-byte slot");
  GDSIO_EXPECT(!s.pending, ValueError, "staging slot ", k, " still has a copy queued; take slots with next()");
  EngineScope scope(*engine_);
  engine_->copy_async(reinterpret_cast<char*>(dst), s.host, n, s);
  ++copies_;
}

void StagingRing::drain() {
  EngineScope scope(*engine_);
  for (auto& s : slots_)
    if (s.pending) engine_->wait(s);
}

void StagingRing::close() {
  if (closed_) return;
  closed_ = true;
  std::exception_ptr first;
  std::optional<EngineScope> scope;
  try {
    scope.emplace(*engine_);
  } catch (...) {
    first = std::current_exception();  // the device is gone: the waits below fail and abandon their slots
  }
  for (auto& s : slots_) {
    try {
      if (s.pending) engine_->wait(s);
      engine_->release(s);
    } catch (...) {
      engine_->abandon(s);  // a copy may still read it
      if (!first) first = std::current_exception();
    }
  }
  slots_.clear();
  if (first) std::rethrow_exception(first);
}

}  // namespace gdsio
