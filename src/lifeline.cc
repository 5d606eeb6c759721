// Lifeline: a cache's destructor waits for its running background tasks.

#include "paddock/internal/lifeline.h"

namespace paddock::internal {

Lifeline::Pass Lifeline::Enter() {
  MutexLock lock(&mu_);
  if (closed_) return Pass();
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
  MutexLock lock(&mu_);
  closed_ = true;
  mu_.Await(cv_,
            [this]() ABSL_NO_THREAD_SAFETY_ANALYSIS { return running_ == 0; });
}

}  // namespace paddock::internal
