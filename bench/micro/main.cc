// paddock_micro's main: Google Benchmark's, plus the machine (and, when
// scripts/bench starts it, the command and the paddock commit) in the context
// block of every report, which scripts/bench-table prints above the tables.

#include <sched.h>

#include <cstdlib>
#include <fstream>
#include <string>

#include "benchmark/benchmark.h"
#include "sharding.h"

namespace {

// The CPU model as /proc/cpuinfo names it, or "unknown".
std::string CpuModel() {
  std::ifstream cpuinfo("/proc/cpuinfo");
  for (std::string line; std::getline(cpuinfo, line);) {
    if (line.rfind("model name", 0) == 0) {
      const size_t colon = line.find(':');
      if (colon != std::string::npos && colon + 2 <= line.size()) {
        return line.substr(colon + 2);
      }
    }
  }
  return "unknown";
}

// The CPUs this process may run on, as `nproc` counts them.
int UsableCpus() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return 0;
  return CPU_COUNT(&set);
}

}  // namespace

int main(int argc, char** argv) {
  // Set by scripts/bench: how the run was started and what it measured.
  if (const char* command = std::getenv("PADDOCK_BENCH_COMMAND")) {
    benchmark::AddCustomContext("command", command);
  }
  if (const char* commit = std::getenv("PADDOCK_BENCH_COMMIT")) {
    benchmark::AddCustomContext("paddock_commit", commit);
  }
  benchmark::AddCustomContext("cpu_model", CpuModel());
  benchmark::AddCustomContext("nproc", std::to_string(UsableCpus()));
  benchmark::AddCustomContext("compiler", __VERSION__);
#if PADDOCK_HAVE_TBB
  benchmark::AddCustomContext("tbb", "yes");
#else
  benchmark::AddCustomContext("tbb", "no (tbb_concurrent_lru_cache skipped)");
#endif
#if PADDOCK_HAVE_LIBCUCKOO
  benchmark::AddCustomContext("libcuckoo", "yes");
#else
  benchmark::AddCustomContext("libcuckoo", "no (libcuckoo skipped)");
#endif
  // The shards of sharded_mutex_flat_hash_map and of libcuckoo's FIFO bound,
  // which depend on the machine.
  benchmark::AddCustomContext(
      "shards", std::to_string(paddock_bench::Sharding::DefaultCount()));
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
