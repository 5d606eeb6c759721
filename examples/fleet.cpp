// A fleet: four "pods" (processes) serve one hot key from a slow backend.
// Each pod coalesces its own callers, so without a shared tier the fleet
// still loads the key four times per expiry, once per pod. With a
// `paddock::RedisTier` in `Options::shared` the pods ask Redis before they
// load: one pod loads for all of them, the others take its value from Redis.
//
// The example starts its own redis-server on a unix socket in a temporary
// directory, runs the four pods twice (without, then with the tier) on a
// cold key that then expires every ttl, and prints the loads fleet-wide.
// Exits 1 if the run with the tier did not load about once per expiry, and
// 77 (skipped) if redis-server cannot be started.
//
//   fleet                       the demo
//   fleet pod ADDRESS START_MS  one pod, started by the demo: ADDRESS is
//                               "unix:<path>", or "-" for no tier

#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "fmt/format.h"
#include "paddock/cache.h"
#include "paddock/options.h"
#include "paddock/policy.h"
#include "paddock/redis.h"
#include "paddock/stats.h"

namespace {

constexpr int kPods = 4;
constexpr int kThreadsPerPod = 4;
constexpr absl::Duration kTtl = absl::Milliseconds(250);
constexpr absl::Duration kLoad = absl::Milliseconds(50);
constexpr absl::Duration kRun = absl::Seconds(2);
constexpr char kKey[] = "exhibition:launch-day";

// ---- A pod ---------------------------------------------------------------

// Serves kKey from kThreadsPerPod threads for kRun from `start`, then prints
// one line: its loads, shared hits, stale hits and failed Gets.
int RunPod(const std::string& address, absl::Time start) {
  paddock::Options options;
  options.ttl = kTtl;
  if (address != "-") {
    paddock::RedisOptions redis;
    redis.address = address;
    redis.key_prefix = "fleet-example:v1:";  // Version it with the encoding.
    redis.io_timeout = absl::Milliseconds(100);
    redis.lease_for = absl::Seconds(10);
    absl::StatusOr<std::shared_ptr<paddock::RedisTier>> tier =
        paddock::RedisTier::Connect(redis);
    if (!tier.ok()) {
      fmt::print(stderr, "pod: {}\n", tier.status().ToString());
      return 1;
    }
    options.shared = *tier;
  }
  // Stale-while-revalidate: past ttl a pod serves the old page at once
  // while one refresh, fleet-wide with the tier, renders the next.
  paddock::Cache<std::string, std::string, paddock::SoftTtl> cache(
      [](const std::string& key) -> absl::StatusOr<std::string> {
        absl::SleepFor(kLoad);  // The expensive aggregation.
        return absl::StrCat(key, " rendered by pod ", getpid());
      },
      options, paddock::SoftTtl{.stale_for = absl::Seconds(10)});

  absl::SleepFor(start - absl::Now());  // All pods start together.
  const absl::Time end = start + kRun;
  std::atomic<int> failed{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreadsPerPod; ++i) {
    threads.emplace_back([&] {
      while (absl::Now() < end) {
        if (!cache.Get(kKey).ok()) ++failed;
        absl::SleepFor(absl::Milliseconds(5));
      }
    });
  }
  for (std::thread& t : threads) t.join();
  const paddock::Stats stats = cache.stats();
  fmt::print("{} {} {} {}\n", stats.loads, stats.shared_hits, stats.stale_hits,
             failed.load());
  return 0;
}

// ---- The demo ------------------------------------------------------------

// A redis-server of our own: no TCP port, a unix socket in a fresh directory,
// nothing saved. Stopped by pid.
struct RedisServer {
  pid_t pid = 0;
  std::string dir;
  std::string address;
};

// Whether `redis-server` is an executable on PATH: without one the demo is
// skipped; with one, a server that does not start is a failure.
bool RedisServerInstalled() {
  const char* path = std::getenv("PATH");
  for (absl::string_view dir :
       absl::StrSplit(path != nullptr ? path : "/usr/bin:/bin", ':')) {
    if (!dir.empty() &&
        access(absl::StrCat(dir, "/redis-server").c_str(), X_OK) == 0) {
      return true;
    }
  }
  return false;
}

bool StartRedis(RedisServer& server) {
  char dir[] = "/tmp/paddock-fleet-XXXXXX";
  if (mkdtemp(dir) == nullptr) return false;
  server.dir = dir;
  const std::string socket = server.dir + "/redis.sock";
  server.address = "unix:" + socket;
  std::vector<std::string> args = {"redis-server", "--port", "0"};  // No TCP.
  args.insert(args.end(), {"--unixsocket", socket, "--dir", server.dir});
  args.insert(args.end(), {"--save", "", "--appendonly", "no"});  // No disk.
  args.insert(args.end(), {"--logfile", server.dir + "/redis.log"});
  std::vector<char*> argv;
  for (const std::string& arg : args) {
    argv.push_back(const_cast<char*>(arg.c_str()));
  }
  argv.push_back(nullptr);
  server.pid = fork();
  if (server.pid < 0) return false;
  if (server.pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGTERM);  // Never outlive the demo.
    execvp(argv[0], argv.data());
    _exit(127);
  }
  // Ready once a tier can connect.
  paddock::RedisOptions probe;
  probe.address = server.address;
  for (int i = 0; i < 200; ++i) {
    int status = 0;
    if (waitpid(server.pid, &status, WNOHANG) == server.pid) {
      server.pid = 0;  // Exited: it failed to start.
      return false;
    }
    if (paddock::RedisTier::Connect(probe).ok()) return true;
    absl::SleepFor(absl::Milliseconds(50));
  }
  return false;
}

void StopRedis(RedisServer& server) {
  if (server.pid > 0) {
    kill(server.pid, SIGTERM);
    waitpid(server.pid, nullptr, 0);
  }
  std::error_code ignored;
  std::filesystem::remove_all(server.dir, ignored);
}

struct FleetResult {
  int loads = 0;
  int failed = 0;
};

// Runs kPods pods of this program at once; returns their loads summed.
FleetResult RunFleet(const std::string& self, const std::string& address) {
  const int64_t start_ms =
      absl::ToUnixMillis(absl::Now() + absl::Milliseconds(500));
  std::vector<FILE*> pods;
  for (int i = 0; i < kPods; ++i) {
    const std::string command =
        absl::StrCat("'", self, "' pod '", address, "' ", start_ms);
    pods.push_back(popen(command.c_str(), "r"));
  }
  FleetResult result;
  for (int i = 0; i < kPods; ++i) {
    int loads = 0, shared_hits = 0, stale_hits = 0, failed = 0;
    if (pods[i] == nullptr ||
        std::fscanf(pods[i], "%d %d %d %d", &loads, &shared_hits, &stale_hits,
                    &failed) != 4) {
      ++result.failed;
    }
    if (pods[i] != nullptr && pclose(pods[i]) != 0) ++result.failed;
    fmt::print(
        "  pod {}: loaded {} times, took {} values from Redis, {} stale hits\n",
        i + 1, loads, shared_hits, stale_hits);
    result.loads += loads;
    result.failed += failed;
  }
  return result;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 4 && std::strcmp(argv[1], "pod") == 0) {
    return RunPod(argv[2], absl::FromUnixMillis(std::atoll(argv[3])));
  }

  RedisServer redis;
  if (!RedisServerInstalled()) {
    fmt::print("redis-server is not installed: skipped\n");
    return 77;
  }
  if (!StartRedis(redis)) {
    StopRedis(redis);
    fmt::print(stderr, "redis-server is installed but did not start\n");
    return 1;
  }
  const std::string self = std::filesystem::read_symlink("/proc/self/exe");
  fmt::print(
      "{} pods x {} threads, one hot key, load {}, ttl {}, SoftTtl, for {}\n",
      kPods, kThreadsPerPod, absl::FormatDuration(kLoad),
      absl::FormatDuration(kTtl), absl::FormatDuration(kRun));

  fmt::print("\nwithout a shared tier (Options::shared = nullptr):\n");
  const FleetResult alone = RunFleet(self, "-");
  fmt::print("  fleet-wide: {} loads\n", alone.loads);

  fmt::print("\nwith a RedisTier (Options::shared = tier):\n");
  const FleetResult shared = RunFleet(self, redis.address);
  fmt::print("  fleet-wide: {} loads\n", shared.loads);
  StopRedis(redis);

  // A value is fresh for ttl after its load: the cold load, then at most
  // one per ttl. One more is tolerated for a busy machine.
  const int expiries = static_cast<int>(kRun / kTtl);
  const int most = 1 + expiries + 1;
  fmt::print(
      "\none load per expiry: the cold load, then at most one per ttl, {} in "
      "{}\n",
      1 + expiries, absl::FormatDuration(kRun));
  bool ok = true;
  if (shared.loads < 2 || shared.loads > most) {
    fmt::print(
        "FAIL: with the tier the fleet loaded {} times (expected 2 to {})\n",
        shared.loads, most);
    ok = false;
  }
  if (alone.failed + shared.failed > 0) {
    fmt::print("FAIL: {} Gets or pods failed\n", alone.failed + shared.failed);
    ok = false;
  }
  if (ok) {
    fmt::print("OK: the fleet loaded {} times with the tier, {} without\n",
               shared.loads, alone.loads);
  }
  return ok ? 0 : 1;
}
