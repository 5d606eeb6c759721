// Lifeline: a cache's destructor waits for its running background tasks.

#include "paddock/internal/lifeline.h"

#include <cstdio>
#include <cstdlib>

namespace paddock::internal {
namespace {
// The calling thread's innermost callback scope, or null.
thread_local Lifeline::CallbackScope* innermost_scope = nullptr;
}  // namespace

Lifeline::CallbackScope::CallbackScope(const Lifeline* lifeline) noexcept
    : lifeline_(lifeline), outer_(innermost_scope) {
  innermost_scope = this;
}

Lifeline::CallbackScope::~CallbackScope() { innermost_scope = outer_; }

Lifeline::Pass Lifeline::Enter() {
  MutexLock lock(&mu_);
  if (closed_.load(std::memory_order_relaxed)) return Pass();
  ++running_;
  return Pass(this);
}

void Lifeline::Exit() {
  {
    MutexLock lock(&mu_);
    --running_;
  }
  cv_.notify_all();
}

void Lifeline::CloseAndWait() {
  for (const CallbackScope* s = innermost_scope; s != nullptr; s = s->outer_) {
    if (s->lifeline_ == this) {
      std::fputs(
          "paddock: a Cache was destroyed from inside one of its own GetAsync "
          "callbacks (or a coroutine resumed by its Await); destroy it from "
          "elsewhere, e.g. post the destruction to an executor\n",
          stderr);
      std::abort();
    }
  }
  MutexLock lock(&mu_);
  closed_.store(true, std::memory_order_release);
  mu_.Await(cv_,
            [this]() ABSL_NO_THREAD_SAFETY_ANALYSIS { return running_ == 0; });
}

}  // namespace paddock::internal
