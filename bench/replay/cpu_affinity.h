// File: bench/replay/cpu_affinity.h
// -----------------------------------------------------------------------------
// Pinning threads to CPUs: the server (workers, cache, loads) on one CPU, the
// load generator on another, as the seed ran a 1-core pod and k6 apart.

#ifndef PADDOCK_BENCH_REPLAY_CPU_AFFINITY_H_
#define PADDOCK_BENCH_REPLAY_CPU_AFFINITY_H_

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace paddock::replay {

// Returns the CPUs the process may run on, in increasing order.
std::vector<int> AllowedCpus();

// Pins the calling thread to `cpu`. Threads it creates afterwards inherit the
// pinning. Returns the OS error, with the CPU, on failure.
absl::Status PinCurrentThread(int cpu);

// Pins every thread process `pid` has now to `cpu` (for a server the replay
// started: it inherited the pinning of the thread that forked it). Returns
// the OS error, with the CPU, on failure.
absl::Status PinProcess(pid_t pid, int cpu);

// Runs the calling thread under SCHED_FIFO at the lowest real-time priority,
// so that it preempts ordinary threads on its CPU as soon as it wakes: for
// the load generator and the sampler when a busy database shares their CPU.
// Needs CAP_SYS_NICE (root); returns the OS error otherwise.
absl::Status MakeCurrentThreadRealTime();

// Where the replay's threads run.
struct CpuPlan {
  int server_cpu = 0;
  int client_cpu = 0;
  std::string warning;  // Non-empty if both share one CPU.
};

// Chooses the CPUs: the flags' values when >= 0, otherwise the load generator
// on the first allowed CPU and the server on the second.
CpuPlan PlanCpus(int server_cpu, int client_cpu);

// Time one CPU spent busy (any process, including steal by the hypervisor)
// and in total, from /proc/stat, in clock ticks.
struct CpuTicks {
  unsigned long long busy = 0;
  unsigned long long total = 0;
};
// Returns the ticks of `cpu`, or zeros if /proc/stat cannot be read.
CpuTicks ReadCpuTicks(int cpu);

// Returns the CPU time the whole process has consumed, in nanoseconds.
int64_t ProcessCpuNanos();

// Returns the CPU time process `pid` (a child of this one) has consumed, in
// nanoseconds, or -1 if it cannot be read (the process is gone).
int64_t ProcessCpuNanos(pid_t pid);

// Returns the CPU time process `root` and its direct children (a
// PostgreSQL postmaster and its backends) have consumed, in nanoseconds, from
// /proc (clock-tick resolution); -1 if `root` is gone.
int64_t ProcessTreeCpuNanos(pid_t root);

// CpuMeter
//
// Splits one CPU's time between the replay's processes and everything else:
// the CPU's busy ticks (/proc/stat) against the CPU time the replay says its
// threads on that CPU consumed (a running total, passed to Start and Lap).
// Not thread-safe: one thread reads it.
class CpuMeter {
 public:
  struct Shares {
    double busy = 0;    // Any process, hypervisor steal included.
    double replay = 0;  // The replay's threads on this CPU.
    double other() const { return busy > replay ? busy - replay : 0; }
  };

  explicit CpuMeter(int cpu) : cpu_(cpu) {}

  // Starts a measurement at `now` (MonotonicNanos()).
  void Start(int64_t now, int64_t replay_cpu_nanos);

  // Returns the shares since the last Start() or Lap(), and starts anew.
  Shares Lap(int64_t now, int64_t replay_cpu_nanos);

 private:
  const int cpu_;
  CpuTicks ticks_;
  int64_t replay_ = 0, at_ = 0;
};

// Returns the CPU model name from /proc/cpuinfo, or "unknown".
std::string CpuModelName();

}  // namespace paddock::replay

#endif  // PADDOCK_BENCH_REPLAY_CPU_AFFINITY_H_
