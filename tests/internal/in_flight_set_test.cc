// Tests of paddock/internal/in_flight_set.h: find, insert and erase on both
// sides of the inline array's end, colliding hashes, scans, swap, and a
// randomized comparison with a std::map.

#include "paddock/internal/in_flight_set.h"

#include <cstddef>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace paddock::internal {
namespace {

struct FakeFlight {};
using Set = InFlightSet<std::string, FakeFlight, std::equal_to<std::string>>;
using Entry = Set::Entry;

// Keys live here: a registration points at its key.
class InFlightSetTest : public ::testing::Test {
 protected:
  const std::string& KeyOf(int i) {
    while (keys_.size() <= static_cast<size_t>(i)) {
      keys_.push_back(
          std::make_unique<std::string>("key-" + std::to_string(keys_.size())));
    }
    return *keys_[i];
  }
  // Hashes collide in pairs, so that a hash match alone never decides.
  static size_t HashOf(int i) { return static_cast<size_t>(i / 2); }

  // Inserts key `i` with `pending` as its marker; returns whether inserted.
  bool Insert(int i, PendingLoad<FakeFlight>* pending) {
    const std::string& key = KeyOf(i);
    return set_
        .FindOrInsert(key, HashOf(i),
                      [&] {
                        return Entry{&key, HashOf(i), nullptr, pending};
                      })
        .second;
  }
  Entry* Find(int i) {
    // An equal key at another address: lookups compare keys, not pointers.
    const std::string copy = KeyOf(i);
    return set_.Find(copy, HashOf(i));
  }

  std::vector<std::unique_ptr<std::string>> keys_;
  Set set_;
};

TEST_F(InFlightSetTest, FindsWhatWasInsertedOnBothSidesOfTheInlineArray) {
  constexpr int kKeys = static_cast<int>(Set::kInline) * 3;
  std::vector<PendingLoad<FakeFlight>> pending(kKeys);
  for (int i = 0; i < kKeys; ++i) {
    EXPECT_EQ(Find(i), nullptr);
    EXPECT_TRUE(Insert(i, &pending[i]));
    EXPECT_FALSE(Insert(i, &pending[i])) << "one registration per key";
  }
  EXPECT_EQ(set_.size(), static_cast<size_t>(kKeys));
  for (int i = 0; i < kKeys; ++i) {
    Entry* r = Find(i);
    ASSERT_NE(r, nullptr);
    EXPECT_EQ(r->pending, &pending[i]);
    EXPECT_EQ(*r->key, KeyOf(i));
  }
}

TEST_F(InFlightSetTest, ErasingKeepsTheOthersFindable) {
  constexpr int kKeys = static_cast<int>(Set::kInline) * 2 + 1;
  std::vector<PendingLoad<FakeFlight>> pending(kKeys);
  for (int i = 0; i < kKeys; ++i) Insert(i, &pending[i]);
  // Inline ones first (the last one moves into the hole), then spilled.
  for (int i = 0; i < kKeys; i += 2) set_.Erase(Find(i));
  for (int i = 0; i < kKeys; ++i) {
    Entry* r = Find(i);
    if (i % 2 == 0) {
      EXPECT_EQ(r, nullptr) << i;
    } else {
      ASSERT_NE(r, nullptr) << i;
      EXPECT_EQ(r->pending, &pending[i]);
    }
  }
  EXPECT_EQ(set_.size(), static_cast<size_t>(kKeys / 2));
  // Room freed inline is used again.
  EXPECT_TRUE(Insert(0, &pending[0]));
  EXPECT_EQ(Find(0)->pending, &pending[0]);
}

TEST_F(InFlightSetTest, FindIfForEachAndSwapSeeEveryRegistration) {
  constexpr int kKeys = static_cast<int>(Set::kInline) + 3;
  std::vector<PendingLoad<FakeFlight>> pending(kKeys);
  for (int i = 0; i < kKeys; ++i) Insert(i, &pending[i]);
  for (int i = 0; i < kKeys; ++i) {
    Entry* r =
        set_.FindIf([&](const Entry& e) { return e.pending == &pending[i]; });
    ASSERT_NE(r, nullptr);
    EXPECT_EQ(*r->key, KeyOf(i));
  }
  EXPECT_EQ(set_.FindIf([](const Entry&) { return false; }), nullptr);
  size_t seen = 0;
  set_.ForEach([&](const Entry&) { ++seen; });
  EXPECT_EQ(seen, static_cast<size_t>(kKeys));

  Set other;
  other.swap(set_);
  EXPECT_EQ(set_.size(), 0u);
  EXPECT_EQ(Find(0), nullptr);
  EXPECT_EQ(other.size(), static_cast<size_t>(kKeys));
  for (int i = 0; i < kKeys; ++i) {
    EXPECT_NE(other.Find(KeyOf(i), HashOf(i)), nullptr);
  }
}

// Keys whose comparison throws while `throwing` is set.
bool throwing = false;
struct ThrowingEq {
  bool operator()(const std::string& a, const std::string& b) const {
    if (throwing) throw std::runtime_error("comparison failed");
    return a == b;
  }
};

TEST_F(InFlightSetTest, EraseComparesNoKeysOnEitherSideOfTheInlineArray) {
  InFlightSet<std::string, FakeFlight, ThrowingEq> set;
  constexpr int kKeys = static_cast<int>(Set::kInline) * 2;
  std::vector<PendingLoad<FakeFlight>> pending(kKeys);
  for (int i = 0; i < kKeys; ++i) {
    const std::string& key = KeyOf(i);
    set.FindOrInsert(key, HashOf(i), [&] {
      return Entry{&key, HashOf(i), nullptr, &pending[i]};
    });
  }
  throwing = true;  // As for a leader whose comparison threw (ForgetPending).
  for (int i = kKeys - 1; i >= 0; --i) {
    Entry* r =
        set.FindIf([&](const Entry& e) { return e.pending == &pending[i]; });
    ASSERT_NE(r, nullptr);
    EXPECT_NO_THROW(set.Erase(r));
  }
  throwing = false;
  EXPECT_EQ(set.size(), 0u);
}

TEST_F(InFlightSetTest, MatchesAMapUnderRandomInsertsAndErases) {
  constexpr int kKeys = 24;  // Up to several times the inline array.
  std::vector<PendingLoad<FakeFlight>> pending(kKeys);
  std::map<int, PendingLoad<FakeFlight>*> model;
  std::mt19937 rng(7);
  for (int step = 0; step < 20000; ++step) {
    const int i = static_cast<int>(rng() % kKeys);
    if (rng() % 2 == 0) {
      const bool inserted = Insert(i, &pending[i]);
      EXPECT_EQ(inserted, model.emplace(i, &pending[i]).second);
    } else if (Entry* r = Find(i)) {
      ASSERT_EQ(model.count(i), 1u);
      set_.Erase(r);
      model.erase(i);
    } else {
      EXPECT_EQ(model.count(i), 0u);
    }
    ASSERT_EQ(set_.size(), model.size());
  }
  for (int i = 0; i < kKeys; ++i) {
    Entry* r = Find(i);
    EXPECT_EQ(r != nullptr, model.count(i) == 1) << i;
  }
}

}  // namespace
}  // namespace paddock::internal
