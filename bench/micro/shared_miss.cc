// BM_SharedMiss: what a miss costs with a shared tier (`Options::shared`, a
// `paddock::RedisTier` on a redis-server on a local unix socket), next to a
// miss without one. Every iteration is a `Get` of a key the cache has never
// seen, for `paddock::Cache<uint64_t, uint64_t, SingleFlight>` and a loader
// that costs nothing, so the time is the cache's and Redis's alone:
//
//   BM_SharedMiss<local>              no tier: the miss loads and stores.
//   BM_SharedMiss<redis_lease>        the fleet has no value: Lookup grants
//                                     the lease, the cache loads and Fills.
//   BM_SharedMiss<redis_shared_hit>   another pod filled the key: Lookup
//                                     returns its value, no load.
//
// Counters: `round_trips_per_miss` (calls that reached Redis, each one
// EVALSHA), `loads_per_miss`.
//
// The binary starts its own redis-server (no TCP port, a unix socket in a
// temporary directory, nothing saved) on the first BM_SharedMiss run and
// stops it by pid at exit. Without redis-server in PATH (or at
// $PADDOCK_REDIS_SERVER) these benchmarks are not registered, and the
// context block says so.

#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "benchmark/benchmark.h"
#include "paddock/cache.h"
#include "paddock/options.h"
#include "paddock/policy.h"
#include "paddock/redis.h"

namespace paddock_bench {
namespace {

// redis-server's path, from $PADDOCK_REDIS_SERVER or PATH; nullopt if none.
std::optional<std::string> FindRedisServer() {
  if (const char* given = std::getenv("PADDOCK_REDIS_SERVER");
      given != nullptr && *given != '\0') {
    return std::string(given);
  }
  const char* path = std::getenv("PATH");
  for (absl::string_view dir :
       absl::StrSplit(path != nullptr ? path : "/usr/bin:/bin", ':')) {
    std::string candidate = absl::StrCat(dir, "/redis-server");
    if (!dir.empty() && access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return std::nullopt;
}

// The benchmark's own redis-server, started once, stopped at exit.
class LocalRedis {
 public:
  // The running server, started on first use; nullptr if it failed to start.
  static LocalRedis* Get() {
    static LocalRedis* const redis = [] {
      auto* r = new LocalRedis();
      if (!r->Start()) {
        delete r;
        return static_cast<LocalRedis*>(nullptr);
      }
      std::atexit([] { delete Get(); });
      return r;
    }();
    return redis;
  }

  ~LocalRedis() {
    if (pid_ > 0) {
      kill(pid_, SIGTERM);
      waitpid(pid_, nullptr, 0);
    }
    std::error_code ignored;
    if (!dir_.empty()) std::filesystem::remove_all(dir_, ignored);
  }

  const std::string& address() const { return address_; }

 private:
  bool Start() {
    const std::optional<std::string> binary = FindRedisServer();
    if (!binary.has_value()) return false;
    char dir[] = "/tmp/paddock-bench-redis-XXXXXX";
    if (mkdtemp(dir) == nullptr) return false;
    dir_ = dir;
    const std::string socket = dir_ + "/redis.sock";
    address_ = "unix:" + socket;
    std::vector<std::string> args = {*binary, "--port", "0"};
    args.insert(args.end(), {"--unixsocket", socket, "--dir", dir_});
    args.insert(args.end(), {"--save", "", "--appendonly", "no"});
    args.insert(args.end(), {"--logfile", dir_ + "/redis.log"});
    std::vector<char*> argv;
    for (const std::string& arg : args) {
      argv.push_back(const_cast<char*>(arg.c_str()));
    }
    argv.push_back(nullptr);
    pid_ = fork();
    if (pid_ < 0) return false;
    if (pid_ == 0) {
      prctl(PR_SET_PDEATHSIG, SIGTERM);
      execv(argv[0], argv.data());
      _exit(127);
    }
    paddock::RedisOptions probe;
    probe.address = address_;
    for (int i = 0; i < 200; ++i) {
      if (waitpid(pid_, nullptr, WNOHANG) == pid_) {
        pid_ = 0;
        return false;
      }
      if (paddock::RedisTier::Connect(probe).ok()) return true;
      absl::SleepFor(absl::Milliseconds(50));
    }
    return false;
  }

  pid_t pid_ = 0;
  std::string dir_;
  std::string address_;
};

using MissCache = paddock::Cache<uint64_t, uint64_t, paddock::SingleFlight>;

enum class Tier { kNone, kLease, kSharedHit };

// A tier of its own on the benchmark's server, under `prefix`.
std::shared_ptr<paddock::RedisTier> ConnectOrSkip(benchmark::State& state,
                                                  const std::string& prefix) {
  LocalRedis* redis = LocalRedis::Get();
  if (redis == nullptr) {
    state.SkipWithError("redis-server did not start");
    return nullptr;
  }
  paddock::RedisOptions options;
  options.address = redis->address();
  options.key_prefix = prefix;
  absl::StatusOr<std::shared_ptr<paddock::RedisTier>> tier =
      paddock::RedisTier::Connect(options);
  if (!tier.ok()) {
    state.SkipWithError(tier.status().ToString().c_str());
    return nullptr;
  }
  return *tier;
}

void BM_SharedMiss(benchmark::State& state, Tier kind) {
  std::atomic<uint64_t> loads{0};
  const auto loader =
      [&loads](const uint64_t& key) -> absl::StatusOr<uint64_t> {
    loads.fetch_add(1, std::memory_order_relaxed);
    return key;
  };
  paddock::Options options{.ttl = absl::Hours(1)};
  // A fresh namespace per run: every key is new to Redis too.
  static std::atomic<int> runs{0};
  const std::string prefix = absl::StrCat("bench", ++runs, ":v1:");
  std::shared_ptr<paddock::RedisTier> tier;
  std::shared_ptr<paddock::RedisTier> filler_tier;
  if (kind != Tier::kNone) {
    tier = ConnectOrSkip(state, prefix);
    if (tier == nullptr) return;
    options.shared = tier;
  }
  // The other pod, which fills each key first (untimed).
  std::optional<MissCache> filler;
  if (kind == Tier::kSharedHit) {
    filler_tier = ConnectOrSkip(state, prefix);
    if (filler_tier == nullptr) return;
    paddock::Options filler_options = options;
    filler_options.shared = filler_tier;
    filler.emplace(loader, filler_options);
  }
  MissCache cache(loader, options);

  uint64_t key = 0;
  const uint64_t calls_before = tier != nullptr ? tier->stats().calls : 0;
  uint64_t filler_loads = 0;
  for (auto _ : state) {
    ++key;
    if (filler.has_value()) {
      state.PauseTiming();
      const uint64_t before = loads.load(std::memory_order_relaxed);
      benchmark::DoNotOptimize(filler->Get(key));
      filler_loads += loads.load(std::memory_order_relaxed) - before;
      state.ResumeTiming();
    }
    absl::StatusOr<uint64_t> value = cache.Get(key);
    if (!value.ok() || *value != key) {
      state.SkipWithError("a miss returned a wrong value or an error");
      break;
    }
  }
  const double iterations = static_cast<double>(state.iterations());
  if (iterations > 0) {
    const uint64_t calls =
        tier != nullptr ? tier->stats().calls - calls_before : 0;
    state.counters["round_trips_per_miss"] =
        static_cast<double>(calls) / iterations;
    state.counters["loads_per_miss"] =
        static_cast<double>(loads.load() - filler_loads) / iterations;
  }
  if (tier != nullptr && cache.stats().shared_errors > 0) {
    state.SkipWithError("the tier failed during the run (shared_errors > 0)");
  }
}

const bool registered = [] {
  const std::optional<std::string> redis_server = FindRedisServer();
  if (!redis_server.has_value()) {
    benchmark::AddCustomContext("redis_server",
                                "not found (BM_SharedMiss skipped)");
    return false;
  }
  benchmark::AddCustomContext("redis_server", *redis_server);
  for (const auto& [tag, kind] :
       {std::pair{"local", Tier::kNone}, std::pair{"redis_lease", Tier::kLease},
        std::pair{"redis_shared_hit", Tier::kSharedHit}}) {
    benchmark::RegisterBenchmark(
        absl::StrCat("BM_SharedMiss<", tag, ">").c_str(),
        [kind = kind](benchmark::State& state) { BM_SharedMiss(state, kind); })
        ->UseRealTime()
        ->Unit(benchmark::kMicrosecond);
  }
  return true;
}();

}  // namespace
}  // namespace paddock_bench
