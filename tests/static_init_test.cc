// A cache used while the program's globals are being constructed: the epoch
// code's lists must exist however early that is. This file's global is
// linked before the library's objects, so its initialiser runs first; before
// the fix, destroying the cache reached a retire list that was not yet built
// (SIGSEGV before main).

#include <string>

#include "absl/status/statusor.h"
#include "gtest/gtest.h"
#include "paddock/cache.h"
#include "paddock/options.h"
#include "paddock/policy.h"

namespace paddock {
namespace {

struct UsesACacheDuringStaticInit {
  UsesACacheDuringStaticInit() {
    Cache<std::string, std::string, SingleFlight> cache(
        [](const std::string& k) -> absl::StatusOr<std::string> { return k; },
        Options{.max_entries = 2, .shards = 1});
    for (const char* k : {"a", "b", "c", "d"}) ok = ok && cache.Get(k).ok();
    cache.Put("a", "put");  // Evicts and retires.
    ok = ok && *cache.Get("a") == "put";
  }  // ~Cache reclaims.
  bool ok = true;
};

UsesACacheDuringStaticInit early;

TEST(StaticInit, ACacheWorksWhileGlobalsAreConstructed) {
  EXPECT_TRUE(early.ok);
}

}  // namespace
}  // namespace paddock
