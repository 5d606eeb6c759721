// File: tests/redis/child_process.h
// -----------------------------------------------------------------------------
// Starting and stopping other programs from a test: `SpawnProcess` (fork and
// exec, nothing else in between, so it is safe from a test with threads and
// under ThreadSanitizer) and `ChildProcess`, a child whose standard output
// the test reads line by line. A child started here is killed when the
// thread that started it exits (PR_SET_DEATHSIG), so a crashed or killed
// test leaves no process behind.

#ifndef PADDOCK_TESTS_REDIS_CHILD_PROCESS_H_
#define PADDOCK_TESTS_REDIS_CHILD_PROCESS_H_

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace paddock::testing {

// Forks and execs `argv` (argv[0] is a path, or a name looked up in PATH)
// with stdin from /dev/null and stdout and stderr to `output_fd` (not
// closed). Returns the child's pid.
absl::StatusOr<pid_t> SpawnProcess(const std::vector<std::string>& argv,
                                   int output_fd);

// Sends `signal` to `pid` and, for SIGKILL and SIGTERM, reaps it within
// `timeout` (SIGKILL follows SIGTERM if needed). Returns the wait status.
absl::StatusOr<int> KillAndReap(pid_t pid, int signal,
                                absl::Duration timeout = absl::Seconds(10));

// ChildProcess
//
// A running program whose output the test reads. Killed (SIGKILL) and
// reaped when destroyed.
class ChildProcess {
 public:
  static absl::StatusOr<std::unique_ptr<ChildProcess>> Start(
      const std::vector<std::string>& argv);
  ~ChildProcess();
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  // ChildProcess::ReadLine()
  //
  // Returns the next line the child printed (without the newline), waiting
  // up to `timeout`: `absl::DeadlineExceededError` if none came, or
  // `absl::OutOfRangeError` if the child closed its output.
  absl::StatusOr<std::string> ReadLine(absl::Duration timeout);

  // SIGKILLs the child and reaps it. Idempotent.
  void Kill();

  pid_t pid() const { return pid_; }

 private:
  ChildProcess(pid_t pid, int output_fd) : pid_(pid), output_fd_(output_fd) {}

  pid_t pid_;
  int output_fd_;
  std::string buffered_;
};

}  // namespace paddock::testing

#endif  // PADDOCK_TESTS_REDIS_CHILD_PROCESS_H_
