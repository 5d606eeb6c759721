// A helper program for the cache-level fleet tests (fleet_cache_test.cc):
// one "pod" of a fleet, a `paddock::Cache<std::string, std::string>` with
// its own `RedisTier`, driven by its arguments and reporting on stdout one
// line per event. Arguments are `name=value`.
//
//   fleet_cache_child herd address=A prefix=P key=K go=FILE policy=POLICY
//                     threads=N ttl_ms=T load_ms=L run_ms=R lease_ms=M
//       builds the cache, prints "ready", waits until FILE exists, then runs
//       N threads that call Get(K): once each (R = 0), or every 2 ms for R
//       ms. The loader prints "loading <start_us>", sleeps L ms, prints
//       "loaded <start_us> <end_us>" and returns "<pid>-<n>". Once no load
//       runs any more, prints "done gets=… errors=… distinct=… <Stats
//       fields>=…".
//       POLICY: SingleFlight, SoftTtl (stale_for 10 s) or XFetch (beta 0.5).
//   fleet_cache_child watch address=A prefix=P key=K
//       Get(K) with a ttl of a minute, prints "value <v>", then watches the
//       local copy (GetIfPresent every 0.5 ms): once it is gone, prints
//       "dropped <unix_us>", calls Get(K) again and prints "value <v>";
//       until killed.
//
// Times are absl::Now() in Unix microseconds, comparable across processes
// on one machine.

#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "paddock/cache.h"
#include "paddock/options.h"
#include "paddock/policy.h"
#include "paddock/redis.h"
#include "paddock/stats.h"

namespace {

std::mutex print_mu;

// Prints one line and flushes it, whole, whatever thread prints.
void PrintLine(const std::string& line) {
  std::lock_guard<std::mutex> lock(print_mu);
  std::fwrite(line.data(), 1, line.size(), stdout);
  std::fputc('\n', stdout);
  std::fflush(stdout);
}

[[noreturn]] void Fail(const std::string& why) {
  PrintLine(absl::StrCat("error ", why));
  std::exit(1);
}

int64_t NowMicros() { return absl::ToUnixMicros(absl::Now()); }

// The `name=value` arguments.
class Args {
 public:
  Args(int argc, char** argv) {
    for (int i = 2; i < argc; ++i) {
      const std::string_view arg = argv[i];
      const size_t eq = arg.find('=');
      if (eq == std::string_view::npos)
        Fail(absl::StrCat("bad argument ", std::string(arg)));
      values_[std::string(arg.substr(0, eq))] = std::string(arg.substr(eq + 1));
    }
  }
  std::string Text(const std::string& name) const {
    auto it = values_.find(name);
    if (it == values_.end()) Fail(absl::StrCat("missing ", name, "="));
    return it->second;
  }
  int64_t Number(const std::string& name) const {
    int64_t n = 0;
    if (!absl::SimpleAtoi(Text(name), &n)) Fail(absl::StrCat("bad ", name));
    return n;
  }

 private:
  absl::flat_hash_map<std::string, std::string> values_;
};

std::shared_ptr<paddock::RedisTier> ConnectOrDie(const Args& args,
                                                 absl::Duration lease_for) {
  paddock::RedisOptions options;
  options.address = args.Text("address");
  options.key_prefix = args.Text("prefix");
  // Generous: sanitizers and a busy machine slow everything down.
  options.io_timeout = absl::Seconds(2);
  options.lease_for = lease_for;
  absl::StatusOr<std::shared_ptr<paddock::RedisTier>> tier =
      paddock::RedisTier::Connect(options);
  if (!tier.ok()) Fail(std::string(tier.status().message()));
  return *tier;
}

// The loader of a pod: reports each call, takes `load_time`.
class PodLoader {
 public:
  explicit PodLoader(absl::Duration load_time) : load_time_(load_time) {}

  absl::StatusOr<std::string> Load(const std::string&) {
    const int n = ++calls_;
    const int64_t start = NowMicros();
    PrintLine(absl::StrCat("loading ", start));
    absl::SleepFor(load_time_);
    PrintLine(absl::StrCat("loaded ", start, " ", NowMicros()));
    return absl::StrCat(getpid(), "-", n);
  }

 private:
  const absl::Duration load_time_;
  std::atomic<int> calls_{0};
};

std::string StatsLine(const paddock::Stats& s) {
  return absl::StrCat(
      "hits=", s.hits, " stale_hits=", s.stale_hits, " misses=", s.misses,
      " loads=", s.loads, " load_failures=", s.load_failures,
      " coalesced_waits=", s.coalesced_waits, " refreshes=", s.refreshes,
      " wait_timeouts=", s.wait_timeouts,
      " stale_fallbacks=", s.stale_fallbacks, " shared_hits=", s.shared_hits,
      " leases_acquired=", s.leases_acquired, " lease_waits=", s.lease_waits,
      " shared_errors=", s.shared_errors);
}

template <typename Policy>
int Herd(const Args& args, Policy policy) {
  const std::string key = args.Text("key");
  const std::string go = args.Text("go");
  const int threads = static_cast<int>(args.Number("threads"));
  const absl::Duration run = absl::Milliseconds(args.Number("run_ms"));
  PodLoader loader(absl::Milliseconds(args.Number("load_ms")));
  paddock::Options options;
  options.ttl = absl::Milliseconds(args.Number("ttl_ms"));
  options.wait_timeout = absl::Seconds(30);
  options.shared =
      ConnectOrDie(args, absl::Milliseconds(args.Number("lease_ms")));
  paddock::Cache<std::string, std::string, Policy> cache(
      [&](const std::string& k) { return loader.Load(k); }, options, policy);
  PrintLine("ready");

  const absl::Time give_up = absl::Now() + absl::Seconds(60);
  while (access(go.c_str(), F_OK) != 0) {
    if (absl::Now() > give_up) Fail("no go file");
    absl::SleepFor(absl::Milliseconds(1));
  }

  std::atomic<int64_t> gets{0};
  std::atomic<int64_t> errors{0};
  std::mutex seen_mu;
  absl::flat_hash_set<std::string> seen;
  const absl::Time deadline = absl::Now() + run;
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&] {
      absl::flat_hash_set<std::string> mine;
      do {
        absl::StatusOr<std::string> value = cache.Get(key);
        ++gets;
        if (value.ok()) {
          mine.insert(*value);
        } else if (errors++ < 5) {  // The first few; the pipe is finite.
          PrintLine(absl::StrCat("get-error ", value.status().ToString()));
        }
        if (run > absl::ZeroDuration()) {
          absl::SleepFor(absl::Milliseconds(2));
        }
      } while (absl::Now() < deadline);
      std::lock_guard<std::mutex> lock(seen_mu);
      seen.insert(mine.begin(), mine.end());
    });
  }
  for (std::thread& w : workers) w.join();
  // A background refresh may still run (or wait for another pod's fill):
  // report once none does, so that every load is reported before "done".
  while (cache.loads_in_flight() > 0) {
    if (absl::Now() > deadline + absl::Seconds(60)) Fail("loads never ended");
    absl::SleepFor(absl::Milliseconds(1));
  }
  PrintLine(absl::StrCat("done gets=", gets.load(), " errors=", errors.load(),
                         " distinct=", seen.size(), " ",
                         StatsLine(cache.stats())));
  return 0;
}

int Watch(const Args& args) {
  const std::string key = args.Text("key");
  std::atomic<int> calls{0};
  paddock::Options options;
  options.ttl = absl::Minutes(1);
  options.wait_timeout = absl::Seconds(30);
  options.shared = ConnectOrDie(args, absl::Seconds(10));
  paddock::Cache<std::string, std::string, paddock::SingleFlight> cache(
      [&](const std::string&) -> absl::StatusOr<std::string> {
        return absl::StrCat("child-", getpid(), "-", ++calls);
      },
      options);
  for (;;) {
    absl::StatusOr<std::string> value = cache.Get(key);
    if (!value.ok()) Fail(value.status().ToString());
    PrintLine(absl::StrCat("value ", *value));
    while (cache.GetIfPresent(key).has_value()) {
      absl::SleepFor(absl::Microseconds(500));
    }
    PrintLine(absl::StrCat("dropped ", NowMicros()));
  }
}

}  // namespace

int main(int argc, char** argv) {
  const std::string command = argc > 1 ? argv[1] : "";
  const Args args(argc, argv);
  if (command == "herd") {
    const std::string policy = args.Text("policy");
    if (policy == "SingleFlight") return Herd(args, paddock::SingleFlight{});
    if (policy == "SoftTtl") {
      return Herd(args, paddock::SoftTtl{.stale_for = absl::Seconds(10)});
    }
    if (policy == "XFetch") return Herd(args, paddock::XFetch{.beta = 0.5});
    Fail(absl::StrCat("unknown policy ", policy));
  }
  if (command == "watch") return Watch(args);
  std::fprintf(stderr,
               "usage: %s herd address=A prefix=P key=K go=FILE policy=POLICY "
               "threads=N ttl_ms=T load_ms=L run_ms=R lease_ms=M\n"
               "       %s watch address=A prefix=P key=K\n",
               argv[0], argv[0]);
  return 2;
}
