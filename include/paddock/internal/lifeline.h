// File: paddock/internal/lifeline.h
// -----------------------------------------------------------------------------
// `Lifeline`: how a cache's destructor and its background tasks meet. A task
// holds a `Lifeline::Pass` while it runs; the destructor closes the lifeline
// (no new pass is given) and waits until every pass is gone. A task that runs
// after the cache is gone finds the lifeline closed and touches nothing of
// the cache. Shared by the cache and its tasks (std::shared_ptr).

#ifndef PADDOCK_INTERNAL_LIFELINE_H_
#define PADDOCK_INTERNAL_LIFELINE_H_

#include <atomic>
#include <condition_variable>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "paddock/internal/mutex.h"

namespace paddock::internal {

class Lifeline {
 public:
  // Proof that a task may use the cache until destroyed. Move-only; an
  // empty pass (the lifeline was closed) grants nothing.
  class Pass {
   public:
    Pass() = default;
    Pass(Pass&& other) noexcept
        : lifeline_(std::exchange(other.lifeline_, nullptr)) {}
    Pass& operator=(Pass&&) = delete;
    ~Pass() {
      if (lifeline_ != nullptr) lifeline_->Exit();
    }
    explicit operator bool() const { return lifeline_ != nullptr; }

   private:
    friend class Lifeline;
    explicit Pass(Lifeline* lifeline) : lifeline_(lifeline) {}
    Lifeline* lifeline_ = nullptr;
  };

  // Marks the calling thread as inside one of the cache's own callbacks (a
  // GetAsync `done`, and so a coroutine resumed by Await) for its lifetime.
  // Scopes nest (a callback that calls into another cache). Not movable.
  class CallbackScope {
   public:
    explicit CallbackScope(const Lifeline* lifeline) noexcept;
    CallbackScope(const CallbackScope&) = delete;
    CallbackScope& operator=(const CallbackScope&) = delete;
    ~CallbackScope();

   private:
    friend class Lifeline;
    const Lifeline* const lifeline_;
    CallbackScope* const outer_;
  };

  Lifeline() = default;
  Lifeline(const Lifeline&) = delete;
  Lifeline& operator=(const Lifeline&) = delete;

  // Returns a pass, or an empty one once Close has begun. Never blocks
  // beyond a short lock. Thread-safe.
  Pass Enter();

  // Whether CloseAndWait has begun: a task that would wait on something
  // outside this process (another process's fill) stops instead, so that
  // the destructor waits for this process's own work only. Thread-safe.
  bool closing() const { return closed_.load(std::memory_order_acquire); }

  // Stops giving passes and blocks until every pass given is destroyed.
  // Must not be called while the calling thread holds a pass. Called inside
  // one of this lifeline's CallbackScopes (a cache destroyed from its own
  // callback, which its destructor would wait for, or which would go on
  // using the freed cache), it aborts the process with a message that says
  // so: a deadlock or a use after free is the alternative.
  void CloseAndWait();

 private:
  void Exit();

  Mutex mu_;
  std::condition_variable cv_;
  // Written under mu_; read under it by Enter, without it by closing().
  std::atomic<bool> closed_{false};
  int running_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace paddock::internal

#endif  // PADDOCK_INTERNAL_LIFELINE_H_
