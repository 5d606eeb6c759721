// File: tests/eager_coroutine.h
// -----------------------------------------------------------------------------
// `EagerCoroutine`: the least a test needs to `co_await` paddock's awaiters:
// a coroutine type that starts at once, runs to its end on whatever thread
// resumes it, and frees itself there. Its body reports through what it was
// given (a promise, an optional); an exception out of it ends the test
// binary.
//
// `OwnedCoroutine`: the same, but it stays suspended at its end and the test
// owns its frame (`handle`): it can tell whether the body ran to its end
// (`handle.done()`) and destroy the frame while it is suspended, as a
// coroutine's owner may.

#ifndef PADDOCK_TESTS_EAGER_COROUTINE_H_
#define PADDOCK_TESTS_EAGER_COROUTINE_H_

#include <coroutine>
#include <exception>

namespace paddock::testing {

struct EagerCoroutine {
  struct promise_type {
    EagerCoroutine get_return_object() { return {}; }
    std::suspend_never initial_suspend() noexcept { return {}; }
    std::suspend_never final_suspend() noexcept { return {}; }
    void return_void() {}
    void unhandled_exception() { std::terminate(); }
  };
};

struct OwnedCoroutine {
  struct promise_type {
    OwnedCoroutine get_return_object() {
      return OwnedCoroutine{
          std::coroutine_handle<promise_type>::from_promise(*this)};
    }
    std::suspend_never initial_suspend() noexcept { return {}; }
    std::suspend_always final_suspend() noexcept { return {}; }
    void return_void() {}
    void unhandled_exception() { std::terminate(); }
  };
  std::coroutine_handle<promise_type> handle;
};

}  // namespace paddock::testing

#endif  // PADDOCK_TESTS_EAGER_COROUTINE_H_
