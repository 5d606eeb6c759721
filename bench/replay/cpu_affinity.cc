// Thread pinning with sched_setaffinity.

#include "cpu_affinity.h"

#include <pthread.h>
#include <sched.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <system_error>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace paddock::replay {

std::vector<int> AllowedCpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> cpus;
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return cpus;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (CPU_ISSET(cpu, &set)) cpus.push_back(cpu);
  }
  return cpus;
}

absl::Status PinCurrentThread(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  // pid 0: the calling thread (sched_setaffinity acts on one thread).
  if (sched_setaffinity(0, sizeof(set), &set) != 0) {
    return absl::ErrnoToStatus(
        errno,
        absl::StrCat("paddock_replay: cannot pin a thread to CPU ", cpu));
  }
  return absl::OkStatus();
}

absl::Status PinProcess(pid_t pid, int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  // sched_setaffinity acts on one thread: each of /proc/<pid>/task.
  std::error_code error;
  const std::filesystem::path tasks = absl::StrCat("/proc/", pid, "/task");
  for (const auto& task : std::filesystem::directory_iterator(tasks, error)) {
    const pid_t tid = std::stoi(task.path().filename().string());
    if (sched_setaffinity(tid, sizeof(set), &set) != 0 && errno != ESRCH) {
      return absl::ErrnoToStatus(
          errno, absl::StrCat("paddock_replay: cannot pin process ", pid,
                              " to CPU ", cpu));
    }
  }
  if (error) {
    return absl::NotFoundError(absl::StrCat("paddock_replay: no process ", pid,
                                            ": ", error.message()));
  }
  return absl::OkStatus();
}

absl::Status MakeCurrentThreadRealTime() {
  sched_param param{};
  param.sched_priority = sched_get_priority_min(SCHED_FIFO);
  const int error = pthread_setschedparam(pthread_self(), SCHED_FIFO, &param);
  if (error != 0) {
    return absl::ErrnoToStatus(
        error, "paddock_replay: cannot run a thread under SCHED_FIFO");
  }
  return absl::OkStatus();
}

CpuPlan PlanCpus(int server_cpu, int client_cpu) {
  const std::vector<int> allowed = AllowedCpus();
  CpuPlan plan;
  const int first = allowed.empty() ? 0 : allowed.front();
  const int second = allowed.size() >= 2 ? allowed[1] : first;
  plan.client_cpu = client_cpu >= 0 ? client_cpu : first;
  plan.server_cpu = server_cpu >= 0             ? server_cpu
                    : plan.client_cpu == second ? first
                                                : second;
  if (plan.server_cpu == plan.client_cpu) {
    plan.warning =
        absl::StrCat("warning: the server and the load generator share CPU ",
                     plan.server_cpu,
                     allowed.size() < 2 ? " (only one CPU is available)" : "",
                     "; latencies include the generator's own CPU use");
  }
  return plan;
}

CpuTicks ReadCpuTicks(int cpu) {
  std::ifstream in("/proc/stat");
  const std::string name = absl::StrCat("cpu", cpu, " ");
  std::string line;
  while (std::getline(in, line)) {
    if (!absl::StartsWith(line, name)) continue;
    std::istringstream fields(line.substr(name.size()));
    // user nice system idle iowait irq softirq steal
    unsigned long long v[8] = {};
    for (unsigned long long& x : v) fields >> x;
    CpuTicks t;
    t.busy = v[0] + v[1] + v[2] + v[5] + v[6] + v[7];
    t.total = t.busy + v[3] + v[4];
    return t;
  }
  return {};
}

int64_t ProcessCpuNanos() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec;
}

int64_t ProcessCpuNanos(pid_t pid) {
  clockid_t clock;
  timespec ts;
  if (clock_getcpuclockid(pid, &clock) != 0 || clock_gettime(clock, &ts) != 0) {
    return -1;
  }
  return int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec;
}

namespace {

// Reads /proc/<pid>/stat: the parent's pid and utime + stime, in ticks.
bool ReadStat(const std::string& pid, long& ppid, unsigned long long& ticks) {
  std::ifstream in("/proc/" + pid + "/stat");
  std::string line;
  if (!std::getline(in, line)) return false;
  // The command name, in parentheses, may hold spaces: fields follow the
  // last ')'.
  const size_t close = line.rfind(')');
  if (close == std::string::npos) return false;
  std::istringstream fields(line.substr(close + 1));
  std::string state;
  fields >> state >> ppid;
  std::string skip;
  for (int i = 5; i <= 13; ++i) fields >> skip;  // pgrp .. cmajflt.
  unsigned long long utime = 0, stime = 0;
  fields >> utime >> stime;
  ticks = utime + stime;
  return !fields.fail();
}

}  // namespace

int64_t ProcessTreeCpuNanos(pid_t root) {
  const std::string root_name = std::to_string(root);
  long ppid = 0;
  unsigned long long ticks = 0;
  if (!ReadStat(root_name, ppid, ticks)) return -1;
  unsigned long long total = ticks;
  std::error_code ec;
  for (const std::filesystem::directory_entry& e :
       std::filesystem::directory_iterator("/proc", ec)) {
    const std::string name = e.path().filename().string();
    if (name.empty() || name[0] < '0' || name[0] > '9') continue;
    if (ReadStat(name, ppid, ticks) && ppid == root) total += ticks;
  }
  const long hz = sysconf(_SC_CLK_TCK);
  return static_cast<int64_t>(total) * (1'000'000'000 / (hz > 0 ? hz : 100));
}

void CpuMeter::Start(int64_t now, int64_t replay_cpu_nanos) {
  ticks_ = ReadCpuTicks(cpu_);
  replay_ = replay_cpu_nanos;
  at_ = now;
}

CpuMeter::Shares CpuMeter::Lap(int64_t now, int64_t replay_cpu_nanos) {
  const CpuTicks ticks = ReadCpuTicks(cpu_);
  Shares shares;
  if (ticks.total > ticks_.total && now > at_) {
    shares.busy = static_cast<double>(ticks.busy - ticks_.busy) /
                  static_cast<double>(ticks.total - ticks_.total);
    shares.replay =
        std::max(0.0, static_cast<double>(replay_cpu_nanos - replay_) /
                          static_cast<double>(now - at_));
  }
  ticks_ = ticks;
  replay_ = replay_cpu_nanos;
  at_ = now;
  return shares;
}

std::string CpuModelName() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (absl::StartsWith(line, "model name")) {
      const size_t colon = line.find(':');
      if (colon != std::string::npos) {
        return std::string(absl::StripAsciiWhitespace(line.substr(colon + 1)));
      }
    }
  }
  return "unknown";
}

}  // namespace paddock::replay
