// Tests of paddock/internal/loader_call.h on a bare CacheCore: what a call of
// the loader (blocking or asynchronous) returns, what a loader's exception
// becomes, and that a load of the key is marked on the thread during the call.

#include "paddock/internal/loader_call.h"

#include <functional>
#include <memory>
#include <stdexcept>
#include <string>

#include "absl/hash/hash.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gtest/gtest.h"
#include "paddock/completion.h"
#include "paddock/internal/cache_core.h"
#include "paddock/internal/load_stack.h"
#include "paddock/options.h"
#include "paddock/policy.h"

namespace paddock::internal {
namespace {

using Core = CacheCore<std::string, std::string, SingleFlight,
                       absl::Hash<std::string>, std::equal_to<std::string>>;
using LoaderCall = Engine<Core>::LoaderCall;

// The core every loader below checks its own load scope against.
const Core* current_core = nullptr;

bool LoadingHere(const std::string& key) {
  return IsLoadingOnThisThread(current_core, current_core->HashOf(key), key,
                               current_core->eq);
}

std::unique_ptr<Core> MakeCore(Core::Loader loader,
                               Core::AsyncLoader async_loader = {}) {
  auto core = std::make_unique<Core>(
      std::move(loader), std::move(async_loader), Options{}, SingleFlight(),
      absl::Hash<std::string>(), std::equal_to<std::string>());
  current_core = core.get();
  return core;
}

TEST(LoaderCallTest, CallsTheLoaderWithTheKeyMarkedAsLoadingHere) {
  auto core =
      MakeCore([](const std::string& key) -> absl::StatusOr<std::string> {
        if (!LoadingHere(key) || LoadingHere("other")) {
          return absl::InternalError("not marked");
        }
        return "value of " + key;
      });
  EXPECT_EQ(LoaderCall(*core).Call("k", core->HashOf(std::string("k"))).value(),
            "value of k");
  EXPECT_FALSE(LoadingHere("k"));  // Only during the call.
}

TEST(LoaderCallTest, ALoadersExceptionBecomesAnInternalErrorNamingIt) {
  auto core = MakeCore([](const std::string&) -> absl::StatusOr<std::string> {
    throw std::runtime_error("boom");
  });
  const absl::StatusOr<std::string> got = LoaderCall(*core).Call("k", 1);
  EXPECT_EQ(got.status().code(), absl::StatusCode::kInternal);
  EXPECT_NE(got.status().message().find("boom"), std::string::npos);

  auto odd = MakeCore(
      [](const std::string&) -> absl::StatusOr<std::string> { throw 42; });
  EXPECT_EQ(LoaderCall(*odd).Call("k", 1).status().code(),
            absl::StatusCode::kInternal);
}

TEST(LoaderCallTest, AnAsyncLoaderGetsItsCompletionAndItsThrowIsReturned) {
  std::optional<Completion<std::string>> kept;
  auto core =
      MakeCore({}, [&](const std::string& key, Completion<std::string> done) {
        if (key == "throw") throw std::runtime_error("async boom");
        EXPECT_TRUE(LoadingHere(key));
        kept.emplace(std::move(done));
      });
  absl::StatusOr<std::string> answer;
  Completion<std::string> done(
      [&](absl::StatusOr<std::string> v, bool) { answer = std::move(v); });
  EXPECT_TRUE(
      LoaderCall(*core)
          .CallAsync("k", core->HashOf(std::string("k")), std::move(done))
          .ok());
  ASSERT_TRUE(kept.has_value());
  (*kept)(std::string("later"));
  EXPECT_EQ(answer.value(), "later");

  // Its completion, dropped as the loader throws, ends nothing here.
  bool dropped = false;
  Completion<std::string> unused(
      [&](const absl::StatusOr<std::string>&, bool was_dropped) {
        dropped = was_dropped;
      });
  const absl::Status thrown =
      LoaderCall(*core).CallAsync("throw", 1, std::move(unused));
  EXPECT_TRUE(dropped);
  EXPECT_EQ(thrown.code(), absl::StatusCode::kInternal);
  EXPECT_NE(thrown.message().find("async boom"), std::string::npos);
}

}  // namespace
}  // namespace paddock::internal
