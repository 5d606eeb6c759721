// Tests of paddock/internal/load_stack.h: the loads running on the current
// thread, which let a loader's Get for the key it is loading fail instead of
// waiting for itself.

#include "paddock/internal/load_stack.h"

#include <cstddef>
#include <functional>
#include <string>
#include <thread>

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace paddock::internal {
namespace {

// Stand-ins for two caches: only their addresses matter.
int cache_a;
int cache_b;

bool Loading(const void* cache, size_t hash, const std::string& key) {
  return IsLoadingOnThisThread(cache, hash, key, std::equal_to<std::string>());
}

// Key equality that ignores case, and counts how often it is asked.
struct CaseInsensitiveEq {
  int* calls;
  bool operator()(const std::string& a, const std::string& b) const {
    ++*calls;
    return absl::EqualsIgnoreCase(a, b);
  }
};

TEST(LoadStackTest, NothingIsLoadingOnAThreadThatStartedNoLoad) {
  EXPECT_EQ(load_stack_top, nullptr);
  EXPECT_FALSE(Loading(&cache_a, 1, "k"));
}

TEST(LoadStackTest, AScopeMarksItsKeyAsLoadingUntilItEnds) {
  const std::string key = "k";
  {
    LoadScope scope(&cache_a, 1, &key);
    EXPECT_TRUE(Loading(&cache_a, 1, "k"));
  }
  EXPECT_FALSE(Loading(&cache_a, 1, "k"));
  EXPECT_EQ(load_stack_top, nullptr);
}

TEST(LoadStackTest, TheFrameRecordsTheCacheTheHashAndTheKeysAddress) {
  const std::string key = "k";
  LoadScope scope(&cache_a, 7, &key);
  ASSERT_NE(load_stack_top, nullptr);
  EXPECT_EQ(load_stack_top->cache, &cache_a);
  EXPECT_EQ(load_stack_top->hash, 7u);
  EXPECT_EQ(load_stack_top->key, &key);
  EXPECT_EQ(load_stack_top->outer, nullptr);
}

TEST(LoadStackTest, OnlyTheSameCacheHashAndKeyCountAsLoading) {
  const std::string key = "k";
  LoadScope scope(&cache_a, 1, &key);
  EXPECT_TRUE(Loading(&cache_a, 1, "k"));
  EXPECT_FALSE(Loading(&cache_b, 1, "k"));      // Another cache.
  EXPECT_FALSE(Loading(&cache_a, 2, "k"));      // Another hash.
  EXPECT_FALSE(Loading(&cache_a, 1, "other"));  // A collision: another key.
}

TEST(LoadStackTest, KeysAreComparedWithTheCachesEquality) {
  const std::string key = "Key";
  LoadScope scope(&cache_a, 1, &key);
  int calls = 0;
  EXPECT_TRUE(IsLoadingOnThisThread(&cache_a, 1, std::string("KEY"),
                                    CaseInsensitiveEq{&calls}));
  EXPECT_EQ(calls, 1);
  EXPECT_FALSE(Loading(&cache_a, 1, "KEY"));  // std::equal_to disagrees.
}

// A frame's key is read as the caller's key type only once cache and hash
// match: frames of other caches, whose keys may be of another type, are never
// compared.
TEST(LoadStackTest, EqualityIsAskedOnlyWhenTheCacheAndTheHashMatch) {
  const int other_cache_key = 42;
  const std::string key = "k";
  LoadScope other_cache(&cache_b, 1, &other_cache_key);
  LoadScope other_hash(&cache_a, 2, &key);
  int calls = 0;
  EXPECT_FALSE(IsLoadingOnThisThread(&cache_a, 1, std::string("k"),
                                     CaseInsensitiveEq{&calls}));
  EXPECT_EQ(calls, 0);
}

// A loader of "a" that calls Get("b"), whose loader calls Get("a"): both are
// visible from the innermost load, and each scope's end uncovers the next.
TEST(LoadStackTest, NestedScopesAreAllVisibleAndEndInnermostFirst) {
  const std::string a = "a", b = "b";
  {
    LoadScope outer(&cache_a, 1, &a);
    const LoadFrame* const outer_frame = load_stack_top;
    {
      LoadScope inner(&cache_a, 2, &b);
      EXPECT_TRUE(Loading(&cache_a, 1, "a"));
      EXPECT_TRUE(Loading(&cache_a, 2, "b"));
      EXPECT_EQ(load_stack_top->outer, outer_frame);
    }
    EXPECT_EQ(load_stack_top, outer_frame);
    EXPECT_TRUE(Loading(&cache_a, 1, "a"));
    EXPECT_FALSE(Loading(&cache_a, 2, "b"));
  }
  EXPECT_EQ(load_stack_top, nullptr);
}

TEST(LoadStackTest, TheSameKeyInTwoCachesIsTwoLoads) {
  const std::string key = "k";
  LoadScope in_a(&cache_a, 1, &key);
  EXPECT_FALSE(Loading(&cache_b, 1, "k"));
  {
    LoadScope in_b(&cache_b, 1, &key);
    EXPECT_TRUE(Loading(&cache_a, 1, "k"));
    EXPECT_TRUE(Loading(&cache_b, 1, "k"));
  }
  EXPECT_TRUE(Loading(&cache_a, 1, "k"));
  EXPECT_FALSE(Loading(&cache_b, 1, "k"));
}

// Recursion through another thread is not detected (it is bounded by
// wait_timeout instead): each thread sees only its own loads.
TEST(LoadStackTest, EachThreadSeesOnlyItsOwnLoads) {
  const std::string key = "k";
  LoadScope here(&cache_a, 1, &key);
  bool seen_there = true;
  bool own_there = false;
  std::thread there([&] {
    seen_there = Loading(&cache_a, 1, "k");
    const std::string other = "other";
    LoadScope scope(&cache_a, 3, &other);
    own_there = Loading(&cache_a, 3, "other");
  });
  there.join();
  EXPECT_FALSE(seen_there);
  EXPECT_TRUE(own_there);
  EXPECT_FALSE(Loading(&cache_a, 3, "other"));
  EXPECT_TRUE(Loading(&cache_a, 1, "k"));
}

}  // namespace
}  // namespace paddock::internal
