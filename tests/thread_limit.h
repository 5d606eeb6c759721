// File: tests/thread_limit.h
// -----------------------------------------------------------------------------
// Fault injection for "a thread cannot be started": caps the number of
// processes and threads the calling process's user may run (RLIMIT_NPROC),
// so that std::thread's constructor fails with EAGAIN. Root is exempt from
// that limit, so a root process first becomes `nobody`. Call it only in a
// process of its own (a death test's child): it cannot be undone.

#ifndef PADDOCK_TESTS_THREAD_LIMIT_H_
#define PADDOCK_TESTS_THREAD_LIMIT_H_

#include <sys/resource.h>
#include <unistd.h>

namespace paddock::testing {

// Returns false if the limit could not be set (then skip the test).
inline bool LimitTasksOfThisUser(rlim_t tasks) {
  constexpr uid_t kNobody = 65534;
  if (getuid() == 0 && (setgid(kNobody) != 0 || setuid(kNobody) != 0)) {
    return false;
  }
  const rlimit limit{tasks, tasks};
  return setrlimit(RLIMIT_NPROC, &limit) == 0;
}

}  // namespace paddock::testing

#endif  // PADDOCK_TESTS_THREAD_LIMIT_H_
