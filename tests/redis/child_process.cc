// SpawnProcess, KillAndReap, ChildProcess.

#include "child_process.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace paddock::testing {
namespace {

// argv[0] as an absolute path, looked up in PATH before the fork (execv in
// the child then needs no allocation).
absl::StatusOr<std::string> Resolve(const std::string& program) {
  if (program.find('/') != std::string::npos) return program;
  const char* path = std::getenv("PATH");
  for (absl::string_view dir :
       absl::StrSplit(path != nullptr ? path : "/usr/bin:/bin", ':')) {
    if (dir.empty()) continue;
    std::string candidate = absl::StrCat(dir, "/", program);
    if (access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return absl::NotFoundError(absl::StrCat(program, " is not in PATH"));
}

}  // namespace

absl::StatusOr<pid_t> SpawnProcess(const std::vector<std::string>& argv,
                                   int output_fd) {
  if (argv.empty()) return absl::InvalidArgumentError("SpawnProcess: no argv");
  absl::StatusOr<std::string> program = Resolve(argv[0]);
  if (!program.ok()) return program.status();
  std::vector<char*> args;
  for (const std::string& arg : argv) {
    args.push_back(const_cast<char*>(arg.c_str()));
  }
  args.push_back(nullptr);
  const int null_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (null_fd < 0) return absl::InternalError("SpawnProcess: no /dev/null");
  const pid_t parent = getpid();

  const pid_t pid = fork();
  if (pid < 0) {
    close(null_fd);
    return absl::InternalError(
        absl::StrCat("SpawnProcess: fork: ", std::strerror(errno)));
  }
  if (pid == 0) {
    // Only async-signal-safe calls from here to execv.
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);  // The parent died already.
    if (dup2(null_fd, STDIN_FILENO) < 0 || dup2(output_fd, STDOUT_FILENO) < 0 ||
        dup2(output_fd, STDERR_FILENO) < 0) {
      _exit(127);
    }
    execv(program->c_str(), args.data());
    _exit(127);
  }
  close(null_fd);
  return pid;
}

absl::StatusOr<int> KillAndReap(pid_t pid, int signal, absl::Duration timeout) {
  if (kill(pid, signal) != 0 && errno != ESRCH) {
    return absl::InternalError(
        absl::StrCat("kill(", pid, "): ", std::strerror(errno)));
  }
  const absl::Time deadline = absl::Now() + timeout;
  while (true) {
    int status = 0;
    const pid_t reaped = waitpid(pid, &status, WNOHANG);
    if (reaped == pid) return status;
    if (reaped < 0 && errno != EINTR) {
      return absl::InternalError(
          absl::StrCat("waitpid(", pid, "): ", std::strerror(errno)));
    }
    if (absl::Now() > deadline) {
      if (signal == SIGKILL) {
        return absl::DeadlineExceededError(
            absl::StrCat("pid ", pid, " survived SIGKILL"));
      }
      return KillAndReap(pid, SIGKILL, timeout);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

absl::StatusOr<std::unique_ptr<ChildProcess>> ChildProcess::Start(
    const std::vector<std::string>& argv) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) {
    return absl::InternalError(absl::StrCat("pipe2: ", std::strerror(errno)));
  }
  absl::StatusOr<pid_t> pid = SpawnProcess(argv, fds[1]);
  close(fds[1]);
  if (!pid.ok()) {
    close(fds[0]);
    return pid.status();
  }
  return std::unique_ptr<ChildProcess>(new ChildProcess(*pid, fds[0]));
}

ChildProcess::~ChildProcess() {
  Kill();
  close(output_fd_);
}

void ChildProcess::Kill() {
  if (pid_ <= 0) return;
  (void)KillAndReap(pid_, SIGKILL);
  pid_ = 0;
}

absl::StatusOr<std::string> ChildProcess::ReadLine(absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (true) {
    const size_t newline = buffered_.find('\n');
    if (newline != std::string::npos) {
      std::string line = buffered_.substr(0, newline);
      buffered_.erase(0, newline + 1);
      return line;
    }
    const absl::Duration remaining = deadline - absl::Now();
    if (remaining <= absl::ZeroDuration()) {
      return absl::DeadlineExceededError(absl::StrCat(
          "no line from pid ", pid_, " within ", absl::FormatDuration(timeout),
          "; have \"", buffered_, "\""));
    }
    pollfd p = {.fd = output_fd_, .events = POLLIN, .revents = 0};
    const int ready =
        poll(&p, 1, static_cast<int>(absl::ToInt64Milliseconds(remaining)) + 1);
    if (ready <= 0) continue;
    char chunk[4096];
    const ssize_t n = read(output_fd_, chunk, sizeof(chunk));
    if (n == 0) {
      return absl::OutOfRangeError(absl::StrCat(
          "pid ", pid_, " closed its output; have \"", buffered_, "\""));
    }
    if (n > 0) buffered_.append(chunk, static_cast<size_t>(n));
  }
}

}  // namespace paddock::testing
