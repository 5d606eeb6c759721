// File: paddock/internal/epoch.h
// -----------------------------------------------------------------------------
// Epoch-based memory reclamation (Fraser 2004), process-wide. Readers bracket
// lock-free reads with an `EpochGuard`; writers hand unlinked memory to
// `Retire()`, which frees it once no guard that could have seen it is active.
//
// A guard writes only a slot owned by the calling thread, so readers of one
// hot entry do not contend. Its announcement must be ordered before the
// reader's later loads (a store-load ordering). Where Linux's
// membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED) is available the reader makes
// it with a plain store and the rare epoch advance pays instead, by making
// every running thread execute a full barrier (an asymmetric fence, as in
// liburcu and folly). Elsewhere, and under ThreadSanitizer (which does not
// model that fence), the reader uses a seq_cst exchange.

#ifndef PADDOCK_INTERNAL_EPOCH_H_
#define PADDOCK_INTERNAL_EPOCH_H_

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "absl/base/attributes.h"

namespace paddock::internal {

// Per-thread stripes (per_thread_counters.h) are allocated in chunks of
// kStripesPerChunk lines, at most kStripeChunks of them; threads past those
// share one line.
inline constexpr uint32_t kStripesPerChunk = 64;
inline constexpr uint32_t kStripeChunks = 256;

// One per thread that has used a guard; reused after the thread exits.
struct alignas(64) ThreadRecord {
  // 0 when outside any guard; otherwise (epoch << 1) | 1. Only the owning
  // thread writes it, so it also tells that thread whether a guard is open.
  std::atomic<uint64_t> state{0};
  // Dense, stable while the owning thread lives; indexes per-thread stripes.
  uint32_t index = 0;
  // Where the stripe of `index` is, kept so that a counter on the hit path
  // finds it without dividing or checking bounds: the chunk (kStripeChunks
  // for a thread past them) and the line in it (0 then).
  uint32_t stripe_chunk = 0;
  uint32_t stripe_line = 0;
  // Set while a live thread owns this record.
  std::atomic<bool> in_use{false};
  ThreadRecord* next = nullptr;  // Immutable once published.
};

// Returns a record for the calling thread, registering the thread on first
// use. The caller keeps it in ThreadRecordSlot(), which the release at thread
// exit clears.
ThreadRecord* AcquireThreadRecord();

// The calling thread's cached record pointer; null until its first use.
ABSL_ATTRIBUTE_ALWAYS_INLINE inline ThreadRecord*& ThreadRecordSlot() {
  // A trivially destructible thread_local: access needs no init guard, and
  // it is usable to the end of thread exit. The record is released by a
  // pthread key's destructor (epoch.cc).
  static thread_local ThreadRecord* record = nullptr;
  return record;
}

// The calling thread's record, or null if it has none yet. Never calls out:
// for hit paths that must not keep registers across a call.
ABSL_ATTRIBUTE_ALWAYS_INLINE inline ThreadRecord* ThreadRecordIfAny() {
  return ThreadRecordSlot();
}

ABSL_ATTRIBUTE_ALWAYS_INLINE inline ThreadRecord* CurrentThreadRecord() {
  ThreadRecord*& record = ThreadRecordSlot();
  if (record == nullptr) [[unlikely]] {
    record = AcquireThreadRecord();
  }
  return record;
}

// The current global epoch. Advanced by `Retire()`.
extern std::atomic<uint64_t> global_epoch;

// Whether readers announce with a plain store (see the file comment). Decided
// once, before the first thread record is handed out, by whether membarrier
// could be registered; cleared for good if a membarrier call fails later.
extern std::atomic<bool> asymmetric_fence;

// Makes the next membarrier call of the reclaimer fail, as a seccomp filter
// installed after start-up would. For tests.
void SimulateMembarrierFailureForTest();

#if defined(__SANITIZE_THREAD__)
inline constexpr bool kAsymmetricFenceAllowed = false;
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
inline constexpr bool kAsymmetricFenceAllowed = false;
#else
inline constexpr bool kAsymmetricFenceAllowed = true;
#endif
#else
inline constexpr bool kAsymmetricFenceAllowed = true;
#endif

// Marks the calling thread as reading shared nodes until destruction. Nests.
class EpochGuard {
 public:
  EpochGuard() : EpochGuard(CurrentThreadRecord()) {}
  // For callers that already hold the calling thread's record.
  ABSL_ATTRIBUTE_ALWAYS_INLINE explicit EpochGuard(ThreadRecord* record)
      : record_(record),
        // The outermost guard is the one that finds no announcement. Not a
        // depth counter: its increment and decrement would make every hit
        // wait on the previous hit's store (store-to-load forwarding).
        outer_(record->state.load(std::memory_order_relaxed) == 0) {
    if (outer_) [[likely]] {
      const uint64_t announce =
          (global_epoch.load(std::memory_order_seq_cst) << 1) | 1;
      if (kAsymmetricFenceAllowed &&
          asymmetric_fence.load(std::memory_order_relaxed)) {
        record_->state.store(announce, std::memory_order_relaxed);
        // The compiler must not move later loads above the store; the CPU
        // may, until the reclaimer's membarrier orders it.
        std::atomic_signal_fence(std::memory_order_seq_cst);
      } else {
        record_->state.exchange(announce, std::memory_order_seq_cst);
        // By the C++ rules a seq_cst RMW does not order the plain (acquire)
        // loads after it before its store: on POWER, or ARM with RCpc
        // loads, a reader could read a slot before its announcement is
        // visible to the reclaimer's scan. The fence pairs with the
        // reclaimer's seq_cst fence (the store-buffering pattern).
        std::atomic_thread_fence(std::memory_order_seq_cst);
      }
    }
  }
  ABSL_ATTRIBUTE_ALWAYS_INLINE ~EpochGuard() {
    if (outer_) {
      record_->state.store(0, std::memory_order_release);
    }
  }
  EpochGuard(const EpochGuard&) = delete;
  EpochGuard& operator=(const EpochGuard&) = delete;

 private:
  ThreadRecord* record_;
  const bool outer_;
};

// Frees `p` with `deleter(p)` once every guard active now has ended.
// Thread-safe. Retirements collect in a small per-thread buffer (16) that is
// handed to the global lists under a lock when full, at TryReclaim() and at
// thread exit; that hand-over may free earlier retirements. So a thread that
// stops retiring holds back at most 15 objects until it exits. What waits in
// the global lists when retirements stop is freed by an idle reclaimer
// thread (epoch.cc), within tens of milliseconds.
void Retire(void* p, void (*deleter)(void*));

template <typename T>
void RetireObject(T* p) {
  Retire(p, [](void* q) { delete static_cast<T*>(q); });
}

// Hands over the calling thread's buffered retirements, then frees
// everything whose grace period has passed. Returns how many objects were
// freed. Thread-safe.
size_t TryReclaim();

// Retired objects not yet freed (in the global lists or the calling
// thread's buffer), for tests.
size_t PendingRetirements();

// How many times any thread has tried to advance the epoch (each try costs
// a process-wide barrier), for tests. Thread-safe.
uint64_t AdvanceTries();

// Retired objects never to be freed: the global lists could not grow to
// take them (std::bad_alloc). Out of memory, a retirement is leaked rather
// than freed early or thrown from a destructor. Thread-safe.
size_t LeakedRetirements();

}  // namespace paddock::internal

#endif  // PADDOCK_INTERNAL_EPOCH_H_
