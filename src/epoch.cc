// Epoch-based reclamation: thread registry, retire lists, epoch advance.

#include "paddock/internal/epoch.h"

#include <linux/membarrier.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <new>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "paddock/clock.h"
#include "paddock/internal/mutex.h"

namespace paddock::internal {

constinit std::atomic<uint64_t> global_epoch{1};

namespace {

bool RegisterMembarrier() {
  if (!kAsymmetricFenceAllowed) return false;
  const long supported = syscall(__NR_membarrier, MEMBARRIER_CMD_QUERY, 0, 0);
  if (supported < 0 || (supported & MEMBARRIER_CMD_PRIVATE_EXPEDITED) == 0) {
    return false;
  }
  return syscall(__NR_membarrier, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED, 0,
                 0) == 0;
}

// Decides, once per process and before any thread can announce, whether
// readers may announce with a plain store. Every thread that acquires a
// record, and every reclaimer, passes through here first, so all of them see
// the decision (a function-local static's initialisation happens before
// every later use of it).
void InitAsymmetricFenceOnce() {
  static const bool registered = [] {
    const bool ok = RegisterMembarrier();
    asymmetric_fence.store(ok, std::memory_order_release);
    return ok;
  }();
  (void)registered;
}

// Set for good once a membarrier call failed after registration (a seccomp
// filter installed later, say). Readers then announce with the seq_cst path,
// and the reclaimer replaces membarrier by the barrier below, which also
// covers readers that still announce with a plain store (they read the flag
// before it changed).
std::atomic<bool> membarrier_failed{false};
std::atomic<bool> fail_membarrier_for_test{false};

// A process-wide full barrier without membarrier. On x86-64, reducing a
// page's protection makes the kernel interrupt every CPU that runs a thread
// of this process (a TLB shootdown), and an interrupt on x86 orders that
// CPU's earlier stores before its later loads; .NET's runtime uses the same
// mechanism for FlushProcessWriteBuffers. Elsewhere (arm64 invalidates TLBs
// by broadcast, without interrupts) there is no safe replacement, so the
// process stops with a message, as liburcu does.
void FallbackProcessBarrier() {
#if defined(__x86_64__)
  static std::mutex page_mu;
  static void* const page = [] {
    void* p = mmap(nullptr, 4096, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    return p == MAP_FAILED ? nullptr : p;
  }();
  if (page != nullptr) {
    std::lock_guard<std::mutex> lock(page_mu);
    if (mprotect(page, 4096, PROT_READ | PROT_WRITE) == 0) {
      // A write makes the page's translation present (and cached) in this
      // mm, so the downgrade below must shoot it down everywhere.
      static_cast<std::atomic<int>*>(page)->fetch_add(
          1, std::memory_order_seq_cst);
      if (mprotect(page, 4096, PROT_READ) == 0) return;
    }
  }
#endif
  std::fputs(
      "paddock: membarrier() failed after it was registered and no other "
      "process-wide memory barrier is available; stopping rather than risk "
      "freeing memory a reader still uses\n",
      stderr);
  std::abort();
}

// Makes every running thread of the process execute a full memory barrier:
// readers' plain-store announcements are then visible to the scan that
// follows, as a seq_cst exchange on their side would have made them.
void HeavyFence() {
  InitAsymmetricFenceOnce();
  if (membarrier_failed.load(std::memory_order_acquire)) {
    FallbackProcessBarrier();
  } else if (asymmetric_fence.load(std::memory_order_relaxed)) {
    const bool fail = fail_membarrier_for_test.exchange(false);
    if (fail ||
        syscall(__NR_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0) != 0) {
      // New guards take the seq_cst path from now on; guards already
      // announced with a plain store are covered by the fallback barrier,
      // now and at every later advance.
      asymmetric_fence.store(false, std::memory_order_seq_cst);
      membarrier_failed.store(true, std::memory_order_seq_cst);
      FallbackProcessBarrier();
    }
  }
  std::atomic_thread_fence(std::memory_order_seq_cst);
}

struct Retired {
  void* p;
  void (*deleter)(void*);
};

// Records are never freed: a reused record keeps its index, so per-thread
// stripes stay dense.
constinit Mutex registry_mu;
std::atomic<ThreadRecord*> records_head{nullptr};
uint32_t next_index ABSL_GUARDED_BY(registry_mu) = 0;

constinit Mutex retire_mu;
size_t retired_since_advance ABSL_GUARDED_BY(retire_mu) = 0;
// How many objects the three lists hold; changed under retire_mu, read
// without it by the idle reclaimer's handshake (seq_cst, see
// IdleReclaimerLoop).
std::atomic<size_t> waiting_in_lists{0};
// Hand-overs to the lists so far: the idle reclaimer acts only after an
// interval without any (written under retire_mu).
std::atomic<uint64_t> handovers{0};
// Retirements dropped because their list could not grow (see AddLocked).
size_t retirements_leaked ABSL_GUARDED_BY(retire_mu) = 0;
// SystemClock::NowNanos() at the last try to advance; written under
// advance_mu.
std::atomic<int64_t> last_advance_try_nanos{0};
// Whether that try found a guard of an older epoch; written under
// advance_mu. Tries of the advance, for tests.
std::atomic<bool> last_advance_blocked{false};
std::atomic<uint64_t> advance_tries{0};

// One thread advances the epoch at a time, holding this and not retire_mu:
// the advance's process-wide barrier interrupts every CPU running a thread
// of the process (a VM exit each, on a VM), and a thread handing over its
// retirements meanwhile must not sleep on retire_mu for it. A retirement
// that finds an advance under way skips its own (the next one tries again).
constinit Mutex advance_mu;

// Objects retired while the global epoch was E sit in Retired()[E % 3].
// Guarded by retire_mu. Made on first use rather than during static
// initialisation, so a cache destroyed by another global's initialiser finds
// it; never destroyed: what is still waiting at exit stays reachable, not
// leaked.
std::vector<Retired>* RetiredLists() ABSL_EXCLUSIVE_LOCKS_REQUIRED(retire_mu) {
  static std::vector<Retired>* const lists = new std::vector<Retired>[3];
  return lists;
}

// An advance is tried once `kAdvanceEvery` retirements wait for one, but at
// most once per `kMinAdvanceIntervalNanos` unless `kAdvanceAlways` wait: each
// try costs a process-wide barrier (an interrupt of every CPU running the
// process, a VM exit each on a VM), and a cache evicting millions of entries a
// second tried tens of thousands a second (7 % of a 2-thread Zipf run's
// samples, docs/benchmarks.md). What the interval holds back is what the
// process retires in it, bounded by allocation speed (well under 10 MB at
// 10 GB/s), not by the size of a value: large values are retired more
// slowly than the count allows, and then nothing changes.
constexpr size_t kAdvanceEvery = 128;
constexpr size_t kAdvanceAlways = 16 * kAdvanceEvery;
constexpr int64_t kMinAdvanceIntervalNanos = 200'000;

// Each thread collects this many retirements before it takes retire_mu, so
// threads that evict at once do not queue on one lock for every node.
constexpr size_t kRetireBatch = 16;

// A thread's retirements not yet handed to `retired`. Tagging them with the
// epoch current at hand-over, later than the one at Retire(), only delays
// their free: still safe.
struct RetireBuffer {
  Retired items[kRetireBatch];
  size_t size = 0;
  ~RetireBuffer();
};

// Set once the calling thread's buffer is destroyed: later retirements on
// this thread (from other thread_local destructors) bypass it.
thread_local bool buffer_destroyed = false;
thread_local RetireBuffer buffer;

// Releases the calling thread's record when the thread exits. A pthread key's
// destructor, not a thread_local's: glibc runs those after every C++
// thread_local destructor, so a thread_local whose destructor uses a cache
// (constructed before the thread's first guard, so destroyed after any
// owner object of ours) releases the record it takes too, instead of leaking
// one record per thread. Taking a record again in a later key's destructor
// sets the key again, and glibc then calls this once more.
void ReleaseRecordAtThreadExit(void* p) {
  ThreadRecord* record = static_cast<ThreadRecord*>(p);
  if (record->state.load(std::memory_order_relaxed) != 0) {
    return;  // Inside a guard: the record stays announced, never reused.
  }
  // Later guards on this thread must acquire a record of their own.
  ThreadRecordSlot() = nullptr;
  MutexLock lock(&registry_mu);
  record->in_use.store(false, std::memory_order_release);
}

// The key whose destructor releases records; nullopt if none could be made
// (all PTHREAD_KEYS_MAX taken): records are then kept for good.
const std::optional<pthread_key_t>& RecordKey() {
  static const std::optional<pthread_key_t> key =
      []() -> std::optional<pthread_key_t> {
    pthread_key_t k;
    if (pthread_key_create(&k, &ReleaseRecordAtThreadExit) != 0) {
      return std::nullopt;
    }
    return k;
  }();
  return key;
}

// Tries to move the global epoch forward; on success returns the objects that
// became safe to free. Holds advance_mu, which it waits for if `wait`, or
// else gives up if another thread holds it. Call without retire_mu.
std::vector<Retired> Advance(bool wait) ABSL_LOCKS_EXCLUDED(retire_mu) {
  if (wait) {
    advance_mu.Lock();
  } else if (!advance_mu.TryLock()) {
    return {};
  }
  std::vector<Retired> freeable;
  last_advance_try_nanos.store(SystemClock::NowNanos(),
                               std::memory_order_relaxed);
  advance_tries.fetch_add(1, std::memory_order_relaxed);
  HeavyFence();
  // Only an advancer changes the epoch: it stays `epoch` until the store.
  const uint64_t epoch = global_epoch.load(std::memory_order_seq_cst);
  bool quiescent = true;
  for (ThreadRecord* r = records_head.load(std::memory_order_acquire);
       r != nullptr && quiescent; r = r->next) {
    const uint64_t state = r->state.load(std::memory_order_seq_cst);
    quiescent = (state & 1) == 0 || (state >> 1) == epoch;
  }
  last_advance_blocked.store(!quiescent, std::memory_order_relaxed);
  if (quiescent) {
    const uint64_t next = epoch + 1;
    // Under retire_mu, so that a hand-over files its objects under the
    // epoch they were retired in or a later one.
    MutexLock lock(&retire_mu);
    global_epoch.store(next, std::memory_order_seq_cst);
    retired_since_advance = 0;
    // Every active guard now announced `epoch`, so nothing retired at
    // `epoch - 1` or earlier is reachable: that is bucket (next + 1) % 3.
    freeable = std::exchange(RetiredLists()[(next + 1) % 3], {});
    waiting_in_lists.fetch_sub(freeable.size(), std::memory_order_seq_cst);
  }
  advance_mu.Unlock();
  return freeable;
}

size_t Free(std::vector<Retired>& objects) {
  for (const Retired& r : objects) r.deleter(r.p);
  return objects.size();
}

// Moves `items` into the current epoch's list; returns whether an advance is
// due (see kAdvanceEvery). Requires retire_mu.
bool AddLocked(const Retired* items, size_t n)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(retire_mu) {
  std::vector<Retired>& bucket =
      RetiredLists()[global_epoch.load(std::memory_order_seq_cst) % 3];
  try {
    bucket.insert(bucket.end(), items, items + n);
  } catch (const std::bad_alloc&) {
    // Out of memory. The callers are destructors (a writer's, after it
    // changed the table) with no way to fail, and the objects may still be
    // read, so they cannot be freed now: they are leaked, and counted,
    // rather than ending the process. The insertion left the list as it was
    // (a single range insertion at the end is all or nothing).
    retirements_leaked += n;
    return false;
  }
  retired_since_advance += n;
  waiting_in_lists.fetch_add(n, std::memory_order_seq_cst);
  handovers.store(handovers.load(std::memory_order_relaxed) + 1,
                  std::memory_order_relaxed);
  if (retired_since_advance < kAdvanceEvery) return false;
  // Past kAdvanceAlways the interval is waived, unless the last try was
  // blocked by a guard: trying again at once would not pass it (a reader
  // preempted in its guard, a user destructor run inside one) and would cost
  // a barrier every kRetireBatch retirements of every thread while it lasts.
  return (retired_since_advance >= kAdvanceAlways &&
          !last_advance_blocked.load(std::memory_order_relaxed)) ||
         SystemClock::NowNanos() -
                 last_advance_try_nanos.load(std::memory_order_relaxed) >=
             kMinAdvanceIntervalNanos;
}

// The idle reclaimer. Retirements advance the epoch only once 128 wait, so
// when writes stop (a few large values replaced, then quiet) what waits
// would wait for good, whatever its size. A thread of the process's own,
// started at the first retirement that does not advance, tries an advance
// once a whole kIdleIntervalNanos passed without any hand-over while
// anything waits, and sleeps otherwise. While retirements go on they
// advance on their own, on the threads that retire: the entries they free go
// back to those threads' node pools, not to this thread's. What a thread
// still buffers (at most kRetireBatch - 1) it cannot reach.
constexpr int64_t kIdleIntervalNanos = 10'000'000;
// After a try a guard blocked (a reader preempted in its guard, or a user
// destructor run inside one): each try costs a process-wide barrier.
constexpr int64_t kIdleBlockedIntervalNanos = 100'000'000;

void FlushBuffer();

struct Idle {
  std::mutex mu;
  std::condition_variable wake;
  bool running = false;            // Guarded by mu: the thread exists.
  bool wanted = false;             // Guarded by mu: something waits.
  int64_t next_start_attempt = 0;  // Guarded by mu.
};
// Never destroyed: the detached thread may wait on it during exit.
Idle& IdleState() {
  static Idle* const idle = new Idle;
  return *idle;
}
// Whether the reclaimer has been told that something waits; cleared by it
// once the lists are empty. Spares retirements the mutex.
std::atomic<bool> idle_armed{false};

void IdleReclaimerLoop() {
  Idle& idle = IdleState();
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(idle.mu);
      idle.wake.wait(lock, [&] { return idle.wanted; });
    }
    const int64_t interval =
        last_advance_blocked.load(std::memory_order_relaxed)
            ? kIdleBlockedIntervalNanos
            : kIdleIntervalNanos;
    const uint64_t handovers_before = handovers.load(std::memory_order_relaxed);
    std::this_thread::sleep_for(std::chrono::nanoseconds(interval));
    if (handovers.load(std::memory_order_relaxed) == handovers_before &&
        SystemClock::NowNanos() -
                last_advance_try_nanos.load(std::memory_order_relaxed) >=
            interval) {
      std::vector<Retired> freeable = Advance(/*wait=*/false);
      Free(freeable);
      // A deleter may have retired (a value that owns a cache).
      FlushBuffer();
    }
    // Disarm, then look: a retirement that files objects after this load
    // finds the flag cleared and arms again (both seq_cst: one of the two
    // sees the other's write).
    idle_armed.store(false, std::memory_order_seq_cst);
    if (waiting_in_lists.load(std::memory_order_seq_cst) != 0) {
      idle_armed.store(true, std::memory_order_seq_cst);
      continue;
    }
    std::lock_guard<std::mutex> lock(idle.mu);
    if (!idle_armed.load(std::memory_order_relaxed)) idle.wanted = false;
  }
}

void ArmIdleReclaimer() {
  if (idle_armed.load(std::memory_order_seq_cst) ||
      waiting_in_lists.load(std::memory_order_relaxed) == 0) {
    return;
  }
  Idle& idle = IdleState();
  std::lock_guard<std::mutex> lock(idle.mu);
  if (!idle.running) {
    const int64_t now = SystemClock::NowNanos();
    if (now < idle.next_start_attempt) return;
    try {
      std::thread(IdleReclaimerLoop).detach();
    } catch (const std::exception&) {
      // No thread (EAGAIN): retirements still advance by count; try again
      // in a second.
      idle.next_start_attempt = now + 1'000'000'000;
      return;
    }
    idle.running = true;
  }
  idle_armed.store(true, std::memory_order_seq_cst);
  idle.wanted = true;
  idle.wake.notify_one();
}

// fork(): the child has only the thread that forked. The handlers hold every
// lock of this file across the fork, so the child finds none held by a
// thread it does not have, and the child releases the records of those
// threads: one left inside a guard (a reader copying a value as another
// thread forks) would otherwise block every advance in the child, and
// nothing the child retires would be freed. What those threads had buffered
// is left unfreed (at most kRetireBatch - 1 objects each).
void LockAllForFork() ABSL_NO_THREAD_SAFETY_ANALYSIS {
  // The order Advance takes them in; registry_mu nests under none.
  advance_mu.Lock();
  retire_mu.Lock();
  registry_mu.Lock();
  IdleState().mu.lock();  // Taken with no other lock held.
}

void UnlockAllAfterFork() ABSL_NO_THREAD_SAFETY_ANALYSIS {
  IdleState().mu.unlock();
  registry_mu.Unlock();
  retire_mu.Unlock();
  advance_mu.Unlock();
}

void ReleaseOtherThreadsRecordsInChild() ABSL_NO_THREAD_SAFETY_ANALYSIS {
  const ThreadRecord* const mine = ThreadRecordSlot();
  for (ThreadRecord* r = records_head.load(std::memory_order_acquire);
       r != nullptr; r = r->next) {
    if (r == mine) continue;
    r->state.store(0, std::memory_order_relaxed);
    r->in_use.store(false, std::memory_order_relaxed);
  }
  // Nor has it the idle reclaimer: the next retirement that waits starts
  // one. Its condition variable may still count the parent's thread as a
  // waiter.
  Idle& idle = IdleState();
  idle.running = false;
  idle.wanted = false;
  idle.next_start_attempt = 0;
  idle_armed.store(false, std::memory_order_relaxed);
  new (&idle.wake) std::condition_variable;
  UnlockAllAfterFork();
}

void RegisterForkHandlersOnce() {
  static const int registered = pthread_atfork(
      &LockAllForFork, &UnlockAllAfterFork, &ReleaseOtherThreadsRecordsInChild);
  (void)registered;
}

// Hands the calling thread's buffered retirements to the global lists and
// frees what that makes safe. The lock is held only to move pointers.
void FlushBuffer() {
  if (buffer_destroyed || buffer.size == 0) return;
  bool advance;
  {
    MutexLock lock(&retire_mu);
    advance = AddLocked(buffer.items, buffer.size);
    buffer.size = 0;
  }
  if (!advance) {
    ArmIdleReclaimer();
    return;
  }
  std::vector<Retired> freeable = Advance(/*wait=*/false);
  // Deleters run user destructors: never under our lock. One may retire
  // again; the buffer is empty by then.
  Free(freeable);
}

RetireBuffer::~RetireBuffer() {
  // A deleter run by the hand-over may retire again, into this buffer.
  while (size != 0) FlushBuffer();
  buffer_destroyed = true;
}

}  // namespace

// Constant-initialised (false: the seq_cst path) until InitAsymmetricFenceOnce
// decides.
constinit std::atomic<bool> asymmetric_fence{false};

void SimulateMembarrierFailureForTest() {
  InitAsymmetricFenceOnce();
  fail_membarrier_for_test.store(true);
}

ThreadRecord* AcquireThreadRecord() {
  InitAsymmetricFenceOnce();
  RegisterForkHandlersOnce();
  ThreadRecord* record = nullptr;
  {
    MutexLock lock(&registry_mu);
    for (ThreadRecord* r = records_head.load(std::memory_order_acquire);
         r != nullptr; r = r->next) {
      if (!r->in_use.load(std::memory_order_relaxed)) {
        record = r;
        break;
      }
    }
    if (record == nullptr) {
      record = new ThreadRecord;
      record->index = next_index++;
      const uint32_t chunk = record->index / kStripesPerChunk;
      record->stripe_chunk = std::min(chunk, kStripeChunks);
      record->stripe_line =
          chunk < kStripeChunks ? record->index % kStripesPerChunk : 0;
      record->next = records_head.load(std::memory_order_relaxed);
      records_head.store(record, std::memory_order_release);
    }
    record->in_use.store(true, std::memory_order_relaxed);
  }
  if (RecordKey().has_value()) pthread_setspecific(*RecordKey(), record);
  return record;
}

void Retire(void* p, void (*deleter)(void*)) {
  const Retired r{p, deleter};
  if (!buffer_destroyed) {
    buffer.items[buffer.size++] = r;
    if (buffer.size == kRetireBatch) FlushBuffer();
    return;
  }
  bool advance;
  {
    MutexLock lock(&retire_mu);
    advance = AddLocked(&r, 1);
  }
  if (!advance) {
    ArmIdleReclaimer();
    return;
  }
  std::vector<Retired> freeable = Advance(/*wait=*/false);
  Free(freeable);
}

size_t TryReclaim() {
  FlushBuffer();
  size_t freed = 0;
  // Three advances move everything retired before this call out of reach.
  for (int i = 0; i < 3; ++i) {
    std::vector<Retired> freeable = Advance(/*wait=*/true);
    freed += Free(freeable);
  }
  return freed;
}

uint64_t AdvanceTries() {
  return advance_tries.load(std::memory_order_relaxed);
}

size_t LeakedRetirements() {
  MutexLock lock(&retire_mu);
  return retirements_leaked;
}

size_t PendingRetirements() {
  const size_t buffered = buffer_destroyed ? 0 : buffer.size;
  MutexLock lock(&retire_mu);
  const std::vector<Retired>* lists = RetiredLists();
  return buffered + lists[0].size() + lists[1].size() + lists[2].size();
}

}  // namespace paddock::internal
