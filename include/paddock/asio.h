// File: paddock/asio.h
// -----------------------------------------------------------------------------
// `paddock::AsyncGet(cache, key, token)`: a cache lookup as an asio
// asynchronous operation, for standalone asio (1.19 or newer, `<asio.hpp>`,
// namespace `asio`). Target `paddock::asio`, header-only; the core target
// `paddock::paddock` does not need asio.
//
//   asio::awaitable<void> Serve(PageCache& cache, std::string key) {
//     absl::StatusOr<Page> page =
//         co_await paddock::AsyncGet(cache, key, asio::use_awaitable);
//     ...
//   }
//
// asio's `awaitable` accepts only asio's own awaitables in `co_await`, so
// `Cache::Await` cannot be used there; `AsyncGet` is its counterpart, and
// works with any completion token. docs/async.md describes the model.

#ifndef PADDOCK_ASIO_H_
#define PADDOCK_ASIO_H_

#include <asio/associated_allocator.hpp>
#include <asio/associated_cancellation_slot.hpp>
#include <asio/associated_executor.hpp>
#include <asio/async_result.hpp>
#include <asio/cancellation_type.hpp>
#include <asio/execution/executor.hpp>
#include <asio/execution/outstanding_work.hpp>
#include <asio/executor_work_guard.hpp>
#include <asio/post.hpp>
#include <asio/prefer.hpp>
#include <asio/version.hpp>
#include <atomic>
#include <exception>
#include <memory>
#include <optional>
#include <type_traits>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "paddock/cache.h"
#include "paddock/policy.h"

#if ASIO_VERSION < 101900
#error "paddock/asio.h needs standalone asio 1.19 or newer (cancellation slots)"
#endif

namespace paddock {

// paddock::AsyncGet()
//
// Looks `key` up as `cache.GetAsync` does and completes `token` with the
// result: an asio asynchronous operation whose completion signature is
// `void(absl::StatusOr<V>)`, the cache's own result, so that a loader's
// error keeps its code and message and a value needs no default:
//  - `asio::use_awaitable`: `co_await` yields the `absl::StatusOr<V>` (an
//    error is a value, never an exception);
//  - `asio::use_future`: a `std::future<absl::StatusOr<V>>`;
//  - a callable taking `absl::StatusOr<V>`, or any other token for that
//    signature (`asio::bind_executor`, `asio::bind_cancellation_slot`, ...).
// The result is what `Get` would return: coalescing (one load per key
// whatever the number of waiters), policies, stale values, `wait_timeout`,
// errors; `absl::CancelledError` if the cache is destroyed first.
//
// Where it completes: always on the handler's associated executor, as if by
// `asio::post`: never inside `AsyncGet` (a hit is posted too), never on a
// thread of the cache (its executor, its timer thread, its destructor, an
// asynchronous loader's completion). A handler without an associated
// executor runs on `asio::system_executor`, as `asio::post(token)` would;
// bind one with `asio::bind_executor`. Until it completes the operation
// counts as outstanding work of that executor, so `io_context::run` does not
// return while a waiter is pending.
//
// Cancellation: a signal of any type on the handler's associated
// cancellation slot completes the handler at once (posted) with
// `absl::CancelledError`. Only this waiter leaves: the load belongs to the
// key, not to a waiter, so it carries on for the other waiters and stores
// its result, as it would had this waiter stayed (this may also be the
// waiter that started it). As for every asio operation, emit the signal
// from the handler's executor (or strand).
//
// Lifetimes: `key` is copied; the cache must be alive when the operation
// starts (for `use_awaitable`, at the `co_await`). A handler's executor must
// stay usable until the handler has run, and the cache completes what still
// waits when it is destroyed: destroy the cache before the execution context
// its waiters use (declare the `io_context` first), or destroy that context
// only once its `run()` has returned for want of work, which it does not
// while a waiter is pending (after `stop()`, `run()` returns with waiters
// pending, and their completion would post to the destroyed context: destroy
// the cache first then). Either holds for strands too: the operation lets go of
// every copy of the handler's executor before its work, so no copy outlives a
// `run()` that returned. If starting the lookup throws
// (`Hash`, `Eq` or a copy of K or V), the handler completes with
// `absl::InternalError` carrying the exception's `what()`.
//
// Thread-safe as `GetAsync` is. Costs one allocation for the operation's
// state plus the post, on a hit too; `Cache::GetAsync` or `Cache::Await`
// answer a hit inline without either.
template <typename K, typename V, RefreshPolicy P, typename H, typename E,
          ASIO_COMPLETION_TOKEN_FOR(void(absl::StatusOr<V>)) CompletionToken>
auto AsyncGet(Cache<K, V, P, H, E>& cache, const std::type_identity_t<K>& key,
              CompletionToken&& token);

// As above, for a key of another type that the cache looks up by
// (`Cache::kLooksUp<Q>`: a `std::string_view` for a `std::string` key). The
// K is made at once, so a view need not outlive the call even where the
// operation starts later (`use_awaitable`, deferred tokens).
template <typename K, typename V, RefreshPolicy P, typename H, typename E,
          typename Q,
          ASIO_COMPLETION_TOKEN_FOR(void(absl::StatusOr<V>)) CompletionToken>
requires Cache<K, V, P, H, E>::template kLooksUp<Q> auto AsyncGet(
    Cache<K, V, P, H, E>& cache, const Q& key, CompletionToken&& token);

// ---------------------------------------------------------------------------
// Implementation.

namespace asio_internal {

// Outstanding work on an executor, held through a copy of it that `Release`
// gives up together with the work: the copy's destructor runs while the work
// still keeps the executor's context from running out of it. That order
// matters for executors whose copies share state with the context: the last
// copy of a strand locks the context's strand service as it goes, so a copy
// that outlived the work (as `executor_work_guard` keeps one after `reset()`)
// could be destroyed after `run()` returned and its owner destroyed the
// context. A standard executor holds the work as a tracked copy
// (`outstanding_work.tracked`), whose destructor releases its share of the
// state before the work; a Networking TS executor (`on_work_started`) through
// `executor_work_guard`, whose copy has nothing to release (asio's own, such
// as `io_context::strand`, point into the context without owning).
template <typename Executor,
          bool kStandard = asio::execution::is_executor<Executor>::value>
class WorkOn {
 public:
  explicit WorkOn(const Executor& ex)
      : tracked_(std::in_place,
                 asio::prefer(ex, asio::execution::outstanding_work.tracked)) {}

  // An executor that posts to `ex`; valid until Release.
  const auto& executor() const { return *tracked_; }
  // Gives up the copy and the work; touches neither again.
  void Release() { tracked_.reset(); }

 private:
  std::optional<std::decay_t<decltype(asio::prefer(
      std::declval<const Executor&>(),
      asio::execution::outstanding_work.tracked))>>
      tracked_;
};

template <typename Executor>
class WorkOn<Executor, false> {
 public:
  explicit WorkOn(const Executor& ex) : guard_(std::in_place, ex) {}

  Executor executor() const { return guard_->get_executor(); }
  void Release() { guard_.reset(); }

 private:
  std::optional<asio::executor_work_guard<Executor>> guard_;
};

// One AsyncGet in progress: its handler, and the work it holds on the
// handler's executor. Shared by the cache's callback and the cancellation
// slot; whichever calls `Complete` first posts the handler, exactly once,
// and the later one does nothing.
template <typename V, typename Handler>
class AsyncGetOp : public std::enable_shared_from_this<AsyncGetOp<V, Handler>> {
 public:
  using Executor = asio::associated_executor_t<Handler>;

  explicit AsyncGetOp(Handler handler)
      : handler_(std::in_place, std::move(handler)),
        work_(asio::get_associated_executor(*handler_)) {}

  AsyncGetOp(const AsyncGetOp&) = delete;
  AsyncGetOp& operator=(const AsyncGetOp&) = delete;

  // Routes a signal of the handler's cancellation slot, if it has one, to
  // `Complete`. Call before the op is shared: the slot is the handler's
  // executor's business, and this is still its initiation.
  static void ConnectCancellation(const std::shared_ptr<AsyncGetOp>& op) {
    auto slot = asio::get_associated_cancellation_slot(*op->handler_);
    if (slot.is_connected()) slot.template emplace<OnCancel>(op);
  }

  // Posts the handler with `result` unless it was completed already.
  // Thread-safe; from any thread. Never throws. The post allocates with the
  // handler's allocator; if that throws, with the default one; the handler
  // stays in the op until the upcall, so that no failed post destroys it
  // uncalled (only a post that fails both ways does, out of memory).
  void Complete(absl::StatusOr<V> result) noexcept {
    if (completed_.exchange(true, std::memory_order_acq_rel)) return;
    result_.emplace(std::move(result));
    try {
      Post(asio::get_associated_allocator(*handler_));
    } catch (...) {
      try {
        Post(std::allocator<void>());
      } catch (...) {
        // Out of memory: the handler goes with the op.
      }
    }
    // Only now, with this thread out of the post: until then the executor's
    // context cannot run out of work, so its owner cannot see `run()`
    // return and destroy it while the post still signals it. The op keeps
    // no copy of the executor past this (see WorkOn): the cache may hold
    // the op for a while yet, on its own thread.
    work_.Release();
  }

 private:
  // What the cancellation slot holds. It shares the op: a slot may be
  // signalled again after the cache's callback has released it.
  class OnCancel {
   public:
    explicit OnCancel(std::shared_ptr<AsyncGetOp> op) : op_(std::move(op)) {}
    void operator()(asio::cancellation_type_t type) const {
      if (type != asio::cancellation_type::none) {
        op_->Complete(absl::CancelledError("paddock::AsyncGet: cancelled"));
      }
    }

   private:
    std::shared_ptr<AsyncGetOp> op_;
  };

  // The posted call of the handler, on its executor, with `Alloc` for the
  // post's memory.
  template <typename Alloc>
  struct Upcall {
    using allocator_type = Alloc;
    allocator_type get_allocator() const noexcept { return alloc; }

    void operator()() {
      Handler handler = std::move(*op->handler_);
      op->handler_.reset();
      // The slot's handler (which shares the op) goes before the upcall, as
      // asio requires; on this executor, so never during a signal.
      auto slot = asio::get_associated_cancellation_slot(handler);
      if (slot.is_connected()) slot.clear();
      std::move(handler)(*std::move(op->result_));
    }

    std::shared_ptr<AsyncGetOp> op;
    WorkOn<Executor> work;  // Until the upcall is done, on the executor.
    Alloc alloc;
  };

  template <typename Alloc>
  void Post(const Alloc& alloc) {
    asio::post(work_.executor(),
               Upcall<Alloc>{this->shared_from_this(), work_, alloc});
  }

  // Until the upcall takes them: a post that fails leaves them here.
  std::optional<Handler> handler_;
  std::optional<absl::StatusOr<V>> result_;
  WorkOn<Executor> work_;
  std::atomic<bool> completed_{false};
};

template <typename K, typename V, RefreshPolicy P, typename H, typename E>
struct InitiateAsyncGet {
  Cache<K, V, P, H, E>* cache;

  template <typename Handler>
  void operator()(Handler&& handler, const K& key) const {
    using Op = AsyncGetOp<V, std::decay_t<Handler>>;
    auto op = std::make_shared<Op>(std::forward<Handler>(handler));
    Op::ConnectCancellation(op);
    try {
      cache->GetAsync(key, [op](absl::StatusOr<V> result) {
        op->Complete(std::move(result));
      });
    } catch (const std::exception& e) {
      op->Complete(absl::InternalError(absl::StrCat(
          "paddock::AsyncGet: starting the lookup threw: ", e.what())));
    } catch (...) {
      op->Complete(
          absl::InternalError("paddock::AsyncGet: starting the lookup threw"));
    }
  }
};

}  // namespace asio_internal

template <typename K, typename V, RefreshPolicy P, typename H, typename E,
          ASIO_COMPLETION_TOKEN_FOR(void(absl::StatusOr<V>)) CompletionToken>
auto AsyncGet(Cache<K, V, P, H, E>& cache, const std::type_identity_t<K>& key,
              CompletionToken&& token) {
  return asio::async_initiate<CompletionToken, void(absl::StatusOr<V>)>(
      asio_internal::InitiateAsyncGet<K, V, P, H, E>{&cache}, token, key);
}

template <typename K, typename V, RefreshPolicy P, typename H, typename E,
          typename Q,
          ASIO_COMPLETION_TOKEN_FOR(void(absl::StatusOr<V>)) CompletionToken>
requires Cache<K, V, P, H, E>::template kLooksUp<Q> auto AsyncGet(
    Cache<K, V, P, H, E>& cache, const Q& key, CompletionToken&& token) {
  return paddock::AsyncGet(cache, K(key), std::forward<CompletionToken>(token));
}

}  // namespace paddock

#endif  // PADDOCK_ASIO_H_
