// The fleet of pods: fork, one pipe per pod, shared control.

#include "fleet.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "cpu_affinity.h"
#include "metrics.h"
#include "server.h"

namespace paddock::replay {
namespace {

// A request on the wire: no padding, so no uninitialised byte is written.
struct WireRequest {
  int64_t scheduled;
  int64_t hot;
};

void WaitForPhase(const FleetControl& control, int phase) {
  while (control.phase.load(std::memory_order_acquire) < phase) {
    absl::SleepFor(absl::Milliseconds(1));
  }
}

std::string DescribeExit(int pod, int status) {
  if (WIFSIGNALED(status)) {
    return absl::StrCat("paddock_replay: pod ", pod, " was killed by signal ",
                        WTERMSIG(status));
  }
  return absl::StrCat("paddock_replay: pod ", pod, " exited with code ",
                      WEXITSTATUS(status));
}

}  // namespace

void FleetControl::Fail(int pod, const absl::Status& status) {
  Pod& p = pods[pod];
  std::snprintf(p.error, sizeof(p.error), "%s", status.ToString().c_str());
  p.state.store(kFailed, std::memory_order_release);
}

absl::Status FleetControl::AwaitPods(int count, int state,
                                     absl::Time deadline) const {
  for (;;) {
    bool all = true;
    for (int i = 0; i < count; ++i) {
      const int s = pods[i].state.load(std::memory_order_acquire);
      if (s == kFailed) {
        return absl::InternalError(
            absl::StrCat("paddock_replay: pod ", i, ": ", pods[i].error));
      }
      if (s < state) all = false;
    }
    if (all) return absl::OkStatus();
    if (absl::Now() > deadline) {
      return absl::DeadlineExceededError(absl::StrCat(
          "paddock_replay: a pod did not reach state ", state, " in time"));
    }
    absl::SleepFor(absl::Milliseconds(2));
  }
}

absl::StatusOr<std::unique_ptr<Fleet>> Fleet::Fork(int pods, PodMain pod_main) {
  // A pod that is gone makes Submit's write fail with EPIPE, not kill us.
  ::signal(SIGPIPE, SIG_IGN);
  std::unique_ptr<Fleet> fleet(new Fleet);
  const pid_t parent = ::getpid();
  constexpr int kPipeBytes = 1 << 20;
  bool warned_pipe_size = false;
  for (int i = 0; i < pods; ++i) {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) {
      return absl::ErrnoToStatus(errno, "paddock_replay: pipe");
    }
    // Room for tens of thousands of requests: the generator does not block
    // on a pod whose reader waits for the CPU. A system that refuses (a
    // lower pipe-max-size, a user's pipe pages used up) keeps the pipe as it
    // is: the replay still runs, but its arrivals may wait on a slow pod, so
    // say so.
    if (::fcntl(fds[1], F_SETPIPE_SZ, kPipeBytes) < kPipeBytes &&
        !warned_pipe_size) {
      warned_pipe_size = true;
      std::fprintf(stderr,
                   "paddock_replay: warning: pipes of %d bytes refused (%s); "
                   "see /proc/sys/fs/pipe-max-size and pipe-user-pages-*\n",
                   kPipeBytes, std::strerror(errno));
    }
    std::fflush(nullptr);
    const pid_t pid = ::fork();
    if (pid < 0) {
      ::close(fds[0]);
      ::close(fds[1]);
      return absl::ErrnoToStatus(errno, "paddock_replay: fork");
    }
    if (pid == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != parent) ::_exit(1);
      // Only this pod's read end stays open here, so every pod sees EOF
      // once the replay closes its write ends.
      for (int fd : fleet->fds_) ::close(fd);
      ::close(fds[1]);
      ::_exit(pod_main(i, fds[0]));
    }
    ::close(fds[0]);
    fleet->pids_.push_back(pid);
    fleet->fds_.push_back(fds[1]);
    fleet->cpu_.push_back(0);
    fleet->status_.push_back(-1);
  }
  return fleet;
}

Fleet::~Fleet() {
  CloseRequests();
  for (size_t i = 0; i < pids_.size(); ++i) {
    if (status_[i] >= 0) continue;
    ::kill(pids_[i], SIGKILL);
    int status = 0;
    while (::waitpid(pids_[i], &status, 0) < 0 && errno == EINTR) {
    }
  }
}

void Fleet::Submit(int64_t index, const Request& request) {
  const int fd = fds_[static_cast<size_t>(index) % fds_.size()];
  if (fd < 0) return;
  const WireRequest wire{request.scheduled, request.hot ? 1 : 0};
  const char* p = reinterpret_cast<const char*>(&wire);
  size_t left = sizeof(wire);
  while (left > 0) {
    const ssize_t n = ::write(fd, p, left);
    if (n < 0) {
      if (errno == EINTR) continue;
      return;  // The pod is gone; Reap reports it.
    }
    p += n;
    left -= static_cast<size_t>(n);
  }
}

void Fleet::CloseRequests() {
  for (int& fd : fds_) {
    if (fd >= 0) ::close(fd);
    fd = -1;
  }
}

int64_t Fleet::CpuNanos() {
  int64_t sum = 0;
  for (size_t i = 0; i < pids_.size(); ++i) {
    const int64_t now = ProcessCpuNanos(pids_[i]);
    if (now >= 0) cpu_[i] = now;
    sum += cpu_[i];
  }
  return sum;
}

bool Fleet::Poll(size_t i) {
  if (status_[i] >= 0) return true;
  int status = 0;
  const pid_t r = ::waitpid(pids_[i], &status, WNOHANG);
  if (r == pids_[i]) {
    status_[i] = status;
    return true;
  }
  return false;
}

absl::Status Fleet::AwaitPods(const FleetControl& control, int state,
                              absl::Time deadline) {
  for (;;) {
    // Short waits, so that a pod that died is noticed.
    const absl::Status s = control.AwaitPods(
        pods(), state, std::min(deadline, absl::Now() + absl::Seconds(1)));
    if (!absl::IsDeadlineExceeded(s) || absl::Now() > deadline) return s;
    for (size_t i = 0; i < pids_.size(); ++i) {
      if (Poll(i) &&
          control.pods[i].state.load(std::memory_order_acquire) < state) {
        return absl::InternalError(
            DescribeExit(static_cast<int>(i), status_[i]));
      }
    }
  }
}

absl::Status Fleet::Reap(absl::Time deadline) {
  absl::Status first = absl::OkStatus();
  for (size_t i = 0; i < pids_.size(); ++i) {
    while (!Poll(i) && absl::Now() < deadline) {
      absl::SleepFor(absl::Milliseconds(5));
    }
    if (!Poll(i)) {
      ::kill(pids_[i], SIGKILL);
      int status = 0;
      while (::waitpid(pids_[i], &status, 0) < 0 && errno == EINTR) {
      }
      status_[i] = status;
      if (first.ok()) {
        first = absl::DeadlineExceededError(absl::StrCat(
            "paddock_replay: pod ", i, " did not exit in time; killed it"));
      }
    } else if (status_[i] != 0 && first.ok()) {
      first =
          absl::InternalError(DescribeExit(static_cast<int>(i), status_[i]));
    }
  }
  return first;
}

int ServePod(int pod, int requests_fd, Server& server, FleetControl& control,
             absl::FunctionRef<PolicyResult::CacheCounters()> counters) {
  FleetControl::Pod& self = control.pods[pod];
  self.state.store(FleetControl::kReady, std::memory_order_release);
  std::thread reader([&] {
    // Whole requests are submitted; a partial one waits for its rest.
    char buffer[256 * sizeof(WireRequest)];
    size_t have = 0;
    for (;;) {
      const ssize_t n =
          ::read(requests_fd, buffer + have, sizeof(buffer) - have);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;  // EOF: the replay sent everything.
      have += static_cast<size_t>(n);
      const size_t whole = have / sizeof(WireRequest);
      for (size_t i = 0; i < whole; ++i) {
        WireRequest wire;
        std::memcpy(&wire, buffer + i * sizeof(WireRequest), sizeof(wire));
        server.Submit({wire.scheduled, wire.hot != 0});
      }
      have -= whole * sizeof(WireRequest);
      std::memmove(buffer, buffer + whole * sizeof(WireRequest), have);
    }
  });

  WaitForPhase(control, FleetControl::kCollect);
  self.cache = counters();
  self.state.store(FleetControl::kCollected, std::memory_order_release);

  WaitForPhase(control, FleetControl::kStop);
  server.Stop();
  reader.join();  // Reads to EOF; what arrives now ends as unfinished.
  ::close(requests_fd);
  self.state.store(FleetControl::kStopped, std::memory_order_release);
  return 0;
}

}  // namespace paddock::replay
