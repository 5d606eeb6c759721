// A helper program for the multi-process tests of the Redis tier: another
// process of the fleet, driven by its arguments, reporting on stdout one
// line per event.
//
//   tier_child hold-lease ADDRESS PREFIX KEY HOLD_MS LEASE_MS
//       asks for KEY's lease (hold_for HOLD_MS, lease period LEASE_MS);
//       prints "granted" or "not-granted", then blocks until killed (the
//       tier keeps the lease alive meanwhile).
//   tier_child subscribe ADDRESS PREFIX
//       subscribes; prints "ready <id>", then "invalidate <key>" and
//       "missed" as callbacks arrive, until killed.

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "paddock/redis.h"

namespace {

[[noreturn]] void BlockForever() {
  while (true) pause();
}

std::shared_ptr<paddock::RedisTier> ConnectOrDie(const char* address,
                                                 const char* prefix,
                                                 absl::Duration lease_for) {
  paddock::RedisOptions options;
  options.address = address;
  options.key_prefix = prefix;
  options.io_timeout = absl::Seconds(2);
  options.lease_for = lease_for;
  absl::StatusOr<std::shared_ptr<paddock::RedisTier>> tier =
      paddock::RedisTier::Connect(options);
  if (!tier.ok()) {
    std::printf("error %s\n", std::string(tier.status().message()).c_str());
    std::fflush(stdout);
    std::exit(1);
  }
  return *tier;
}

class Printer : public paddock::SharedTier::Subscriber {
 public:
  void OnInvalidate(std::string_view key) override {
    std::printf("invalidate %.*s\n", static_cast<int>(key.size()), key.data());
    std::fflush(stdout);
  }
  void OnMissedInvalidations() override {
    std::printf("missed\n");
    std::fflush(stdout);
  }
};

}  // namespace

int main(int argc, char** argv) {
  const std::string command = argc > 1 ? argv[1] : "";
  if (command == "hold-lease" && argc == 7) {
    auto tier =
        ConnectOrDie(argv[2], argv[3], absl::Milliseconds(std::atoi(argv[6])));
    absl::StatusOr<paddock::SharedLookup> lookup =
        tier->Lookup(argv[4], "", absl::Milliseconds(std::atoi(argv[5])));
    const bool granted =
        lookup.ok() && lookup->lease == paddock::SharedLookup::Lease::kGranted;
    std::printf("%s\n", granted ? "granted" : "not-granted");
    std::fflush(stdout);
    BlockForever();
  }
  if (command == "subscribe" && argc == 4) {
    auto tier = ConnectOrDie(argv[2], argv[3], absl::Seconds(10));
    Printer printer;
    std::unique_ptr<paddock::SharedTier::Subscription> subscription =
        tier->Subscribe(&printer);
    std::printf("ready %llu\n",
                static_cast<unsigned long long>(subscription->id()));
    std::fflush(stdout);
    BlockForever();
  }
  std::fprintf(stderr,
               "usage: %s hold-lease ADDRESS PREFIX KEY HOLD_MS LEASE_MS\n"
               "       %s subscribe ADDRESS PREFIX\n",
               argv[0], argv[0]);
  return 2;
}
