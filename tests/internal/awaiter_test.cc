// Tests of paddock/internal/awaiter.h over a fake source (what a Cache gives
// its awaiter: TryServeNow and GetAsync): ready at once when served at once,
// suspended until the callback otherwise, and a frame destroyed while
// suspended untouched by the late answer.

#include "paddock/internal/awaiter.h"

#include <coroutine>
#include <exception>
#include <optional>
#include <string>
#include <utility>

#include "absl/functional/any_invocable.h"
#include "absl/status/statusor.h"
#include "eager_coroutine.h"
#include "gtest/gtest.h"

namespace paddock::internal {
namespace {

// Serves "hit" at once; any other key waits for Answer().
class FakeSource {
 public:
  using Awaiter = AwaiterFor<FakeSource, std::string, std::string>;

  Awaiter Await(const std::string& key) { return Awaiter(this, key); }
  void Answer(std::string value) {
    std::move(pending_)(absl::StatusOr<std::string>(std::move(value)));
  }
  int async_calls = 0;

 private:
  template <typename, typename, typename>
  friend class ::paddock::internal::AwaiterFor;

  std::optional<absl::StatusOr<std::string>> TryServeNow(
      const std::string& key) {
    if (key == "hit") return absl::StatusOr<std::string>("served at once");
    return std::nullopt;
  }
  template <typename F>
  void GetAsync(const std::string&, F&& done) {
    ++async_calls;
    pending_ = std::forward<F>(done);
  }

  absl::AnyInvocable<void(absl::StatusOr<std::string>) &&> pending_;
};

// Starts at once and stays suspended at its end, for the test to destroy.
using Owned = ::paddock::testing::OwnedCoroutine;

Owned AwaitInto(FakeSource* source, std::string key, std::string* out) {
  absl::StatusOr<std::string> v = co_await source->Await(key);
  *out = *v;
}

TEST(AwaiterTest, AValueServedAtOnceNeverSuspends) {
  FakeSource source;
  std::string out;
  Owned c = AwaitInto(&source, "hit", &out);
  EXPECT_TRUE(c.handle.done());
  EXPECT_EQ(out, "served at once");
  EXPECT_EQ(source.async_calls, 0);
  c.handle.destroy();
}

TEST(AwaiterTest, AMissSuspendsUntilTheCallbackAnswers) {
  FakeSource source;
  std::string out;
  Owned c = AwaitInto(&source, "miss", &out);
  EXPECT_FALSE(c.handle.done());
  EXPECT_EQ(source.async_calls, 1);
  source.Answer("loaded");
  EXPECT_TRUE(c.handle.done());
  EXPECT_EQ(out, "loaded");
  c.handle.destroy();
}

TEST(AwaiterTest, AFrameDestroyedWhileSuspendedIsNotTouchedByTheAnswer) {
  FakeSource source;
  std::string out;
  Owned c = AwaitInto(&source, "miss", &out);
  c.handle.destroy();     // Its awaiter detaches.
  source.Answer("late");  // Under ASan: touches nothing of the frame.
  EXPECT_EQ(out, "");
}

}  // namespace
}  // namespace paddock::internal
