// File: paddock/listener.h
// -----------------------------------------------------------------------------
// `paddock::Listener`: callbacks a cache makes on the events a service wants
// to measure or log (loads, stale serves, waits, evictions). Set one in
// `Options::listener`; with none set, the cache makes no calls.

#ifndef PADDOCK_LISTENER_H_
#define PADDOCK_LISTENER_H_

#include "absl/status/status.h"
#include "absl/time/time.h"

namespace paddock {

// Why a load runs.
enum class LoadKind {
  kForeground,  // A caller found nothing servable and waits for it.
  kRefresh,     // A background refresh of a value still being served.
};

// Listener
//
// Every method has an empty default, so override only what you need. Methods
// are called on the thread where the event happens, never under a cache lock,
// possibly from several threads at once: implementations must be thread-safe
// and quick. A listener must not call back into the cache that calls it. An
// exception thrown from a listener method is caught and dropped: the cache
// carries on as if the method had returned (monitoring must not fail a
// lookup).
class Listener {
 public:
  virtual ~Listener() = default;

  // A loader call is about to start.
  virtual void OnLoadStart(LoadKind kind) { (void)kind; }

  // A loader call returned (or threw: then `status` is an InternalError).
  virtual void OnLoadFinish(LoadKind kind, absl::Duration duration,
                            const absl::Status& status) {
    (void)kind, (void)duration, (void)status;
  }

  // A stale value was served: at once while a refresh runs, or in place of an
  // error or a timeout. `age` is the time since the value was loaded.
  virtual void OnStaleServed(absl::Duration age) { (void)age; }

  // A caller started waiting for a load another caller runs.
  virtual void OnCoalescedWait() {}

  // A caller stopped waiting, at `Options::wait_timeout`, for a load another
  // caller runs. (A caller that finds no free load slot within
  // `wait_timeout` gets DeadlineExceeded without this call.)
  virtual void OnWaitTimeout() {}

  // An entry was removed to stay within `Options::max_entries`.
  virtual void OnEviction() {}
};

}  // namespace paddock

#endif  // PADDOCK_LISTENER_H_
