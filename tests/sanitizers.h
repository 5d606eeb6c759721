// File: tests/sanitizers.h
// -----------------------------------------------------------------------------
// PADDOCK_TEST_TSAN is 1 when the test is built with ThreadSanitizer (g++
// defines __SANITIZE_THREAD__, clang answers __has_feature), for the few
// tests its runtime cannot run: it defines operator new itself, and it stops
// a forked child that starts a thread.

#ifndef PADDOCK_TESTS_SANITIZERS_H_
#define PADDOCK_TESTS_SANITIZERS_H_

#if defined(__SANITIZE_THREAD__)
#define PADDOCK_TEST_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define PADDOCK_TEST_TSAN 1
#endif
#endif
#ifndef PADDOCK_TEST_TSAN
#define PADDOCK_TEST_TSAN 0
#endif

#endif  // PADDOCK_TESTS_SANITIZERS_H_
