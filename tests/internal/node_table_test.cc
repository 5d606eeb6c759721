// Tests of paddock/internal/node_table.h: the writer's operations, growth,
// tombstones, colliding hashes, and lock-free Find under a concurrent writer.

#include "paddock/internal/node_table.h"

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <latch>
#include <memory>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "paddock/internal/epoch.h"
#include "paddock/internal/retire_list.h"

namespace paddock::internal {
namespace {

using ::testing::UnorderedElementsAre;
using ::testing::UnorderedElementsAreArray;

struct Node {
  size_t hash;
  int key;
  Node* older = nullptr;  // RetireList's link.
};

// Spreads keys over the table; distinct keys get distinct hashes.
size_t HashOf(int key) {
  return static_cast<size_t>(key) * 0x9e3779b97f4a7c15ULL;
}

// The table owns no nodes: the test keeps them here.
class NodeTableTest : public ::testing::Test {
 protected:
  Node* MakeNode(int key) { return MakeNode(HashOf(key), key); }
  Node* MakeNode(size_t hash, int key) {
    nodes_.push_back(std::make_unique<Node>(Node{hash, key}));
    return nodes_.back().get();
  }

  // Inserts, retiring a replaced slot array at once (no lock is held here).
  void Insert(Node* n) {
    RetireList<Node> retired;
    table_.Insert(n, retired);
  }

  Node* Find(int key) const { return Find(HashOf(key), key); }
  Node* Find(size_t hash, int key) const {
    return table_.Find(hash, [key](const Node* n) { return n->key == key; });
  }

  // Capacity in slots.
  size_t Slots() const {
    return table_.slot_bytes() / sizeof(std::atomic<Node*>);
  }

  std::vector<int> Keys() const {
    std::vector<int> keys;
    table_.ForEach([&](const Node* n) { keys.push_back(n->key); });
    return keys;
  }

  void TearDown() override {
    // Growth retired old slot arrays; free them before the next test.
    TryReclaim();
  }

  NodeTable<Node> table_;
  std::vector<std::unique_ptr<Node>> nodes_;
};

TEST_F(NodeTableTest, GrowthHandsTheOldSlotArrayToTheWritersRetireList) {
  // The writer holds its lock while it inserts: retiring there could free
  // other retired nodes and run their destructors under that lock.
  RetireList<Node> retired;
  // Nothing waits, so the idle reclaimer frees nothing while this counts.
  TryReclaim();
  size_t grown = 0;
  for (int key = 0; key < 64; ++key) {
    const size_t slots_before = Slots();
    const size_t pending_before = PendingRetirements();
    table_.Insert(MakeNode(key), retired);
    if (Slots() != slots_before) {
      ++grown;
      EXPECT_EQ(PendingRetirements(), pending_before) << "retired under lock";
      retired.RetireAll();  // As the writer does once it has unlocked.
      EXPECT_EQ(PendingRetirements(), pending_before + 1);
    }
  }
  EXPECT_GE(grown, 2u);
  for (int key = 0; key < 64; ++key) EXPECT_EQ(Find(key), nodes_[key].get());
}

TEST_F(NodeTableTest, FindInAnEmptyTableReturnsNull) {
  EXPECT_EQ(Find(1), nullptr);
  EXPECT_EQ(table_.size(), 0u);
}

TEST_F(NodeTableTest, FindReturnsTheInsertedNode) {
  Node* one = MakeNode(1);
  Insert(one);
  EXPECT_EQ(Find(1), one);
  EXPECT_EQ(table_.size(), 1u);
}

TEST_F(NodeTableTest, FindOfAKeyNeverInsertedReturnsNull) {
  Insert(MakeNode(1));
  EXPECT_EQ(Find(2), nullptr);
}

TEST_F(NodeTableTest, ReplacePutsTheReplacementWhereTheOldNodeWas) {
  Node* old = MakeNode(7);
  Node* replacement = MakeNode(7);
  Insert(MakeNode(6));
  Insert(old);
  Insert(MakeNode(8));

  table_.Replace(old, replacement);
  EXPECT_EQ(Find(7), replacement);
  EXPECT_EQ(table_.size(), 3u);
  EXPECT_THAT(Keys(), UnorderedElementsAre(6, 7, 8));
}

TEST_F(NodeTableTest, EraseRemovesOnlyThatNode) {
  Node* six = MakeNode(6);
  Node* seven = MakeNode(7);
  Insert(six);
  Insert(seven);

  table_.Erase(six);
  EXPECT_EQ(Find(6), nullptr);
  EXPECT_EQ(Find(7), seven);
  EXPECT_EQ(table_.size(), 1u);
  EXPECT_THAT(Keys(), UnorderedElementsAre(7));
}

TEST_F(NodeTableTest, AnErasedKeyCanBeInsertedAgain) {
  Node* first = MakeNode(3);
  Node* second = MakeNode(3);
  Insert(first);
  table_.Erase(first);
  Insert(second);
  EXPECT_EQ(Find(3), second);
  EXPECT_EQ(table_.size(), 1u);
}

TEST_F(NodeTableTest, GrowsToHoldManyInserts) {
  constexpr int kKeys = 10'000;
  for (int key = 0; key < kKeys; ++key) {
    Insert(MakeNode(key));
    // Half the slots or more stay empty, so probes end.
    ASSERT_LE(2 * table_.size(), Slots()) << "after inserting key " << key;
  }
  EXPECT_EQ(table_.size(), static_cast<size_t>(kKeys));
  for (int key = 0; key < kKeys; ++key) {
    Node* n = Find(key);
    ASSERT_NE(n, nullptr) << "key " << key;
    EXPECT_EQ(n->key, key);
  }
  EXPECT_EQ(Find(kKeys), nullptr);
  EXPECT_EQ(Keys().size(), static_cast<size_t>(kKeys));
}

TEST_F(NodeTableTest, InsertReusesTheTombstoneOfAnErasedNode) {
  // Same hash each round: the insert's probe meets the erased node's slot
  // first. If tombstones were not reused they would pile up and force the
  // slot array to be rebuilt, changing its size.
  Insert(MakeNode(1));
  Insert(MakeNode(2));
  Node* current = MakeNode(3);
  Insert(current);
  const size_t slots = Slots();
  for (int round = 0; round < 1000; ++round) {
    table_.Erase(current);
    current = MakeNode(3);
    Insert(current);
    ASSERT_EQ(Slots(), slots) << "round " << round;
  }
  EXPECT_EQ(Find(3), current);
  EXPECT_EQ(table_.size(), 3u);
}

TEST_F(NodeTableTest, ErasingTheEndOfAProbeRunLeavesNoTombstone) {
  // One node at a time, each erased before the next: every erased slot is
  // followed by an empty one, so it becomes empty itself and the slot array
  // never fills with tombstones (which would force a rebuild, retiring it).
  Insert(MakeNode(0));
  table_.Erase(nodes_.back().get());
  const size_t slots = Slots();
  TryReclaim();  // Nothing waits, for the idle reclaimer to free meanwhile.
  const size_t pending = PendingRetirements();
  for (int key = 1; key < 10'000; ++key) {
    Node* n = MakeNode(key);
    Insert(n);
    table_.Erase(n);
    ASSERT_EQ(PendingRetirements(), pending) << "rebuilt at key " << key;
  }
  EXPECT_EQ(Slots(), slots);
  EXPECT_EQ(table_.size(), 0u);
  EXPECT_EQ(Find(5), nullptr);
}

TEST_F(NodeTableTest, ErasingARunFromItsEndKeepsTheRestFindable) {
  // Five nodes with one hash make one probe run. Erasing from the middle
  // leaves tombstones (later nodes are reached through them); erasing the
  // last then clears the run back to the last live node, which stays
  // findable, as does everything before it.
  constexpr size_t kHash = 42;
  std::vector<Node*> run;
  for (int key = 0; key < 5; ++key) {
    run.push_back(MakeNode(kHash, key));
    Insert(run.back());
  }
  table_.Erase(run[2]);
  table_.Erase(run[3]);
  EXPECT_EQ(Find(kHash, 4), run[4]);  // Through two tombstones.
  table_.Erase(run[4]);
  EXPECT_EQ(Find(kHash, 0), run[0]);
  EXPECT_EQ(Find(kHash, 1), run[1]);
  for (int key = 2; key < 5; ++key) EXPECT_EQ(Find(kHash, key), nullptr);
  Node* again = MakeNode(kHash, 3);
  Insert(again);
  EXPECT_EQ(Find(kHash, 3), again);
  EXPECT_EQ(table_.size(), 3u);
}

TEST_F(NodeTableTest, GrowthDoublesTheSlotArray) {
  // Slots are a large part of an entry's bytes: growth doubles the array
  // (load a quarter to a half), never quadruples it.
  size_t slots = Slots();
  for (int key = 0; key < 4096; ++key) {
    Insert(MakeNode(key));
    if (Slots() != slots) {
      EXPECT_EQ(Slots(), 2 * slots) << "at key " << key;
      slots = Slots();
    }
    ASSERT_LE(2 * table_.size(), Slots());
  }
  EXPECT_LE(Slots(), 4u * 4096);
}

TEST_F(NodeTableTest, ChurnThroughDistinctKeysKeepsTheTableBounded) {
  // Insert a new key and erase the oldest, 20000 times: every erase leaves a
  // tombstone where no insert lands. Cleanup must keep the table small.
  constexpr int kLive = 100;
  std::vector<Node*> live;
  for (int key = 0; key < kLive; ++key) {
    live.push_back(MakeNode(key));
    Insert(live.back());
  }
  for (int key = kLive; key < 20'000 + kLive; ++key) {
    table_.Erase(live[key % kLive]);
    live[key % kLive] = MakeNode(key);
    Insert(live[key % kLive]);
    ASSERT_LE(Slots(), 8u * kLive) << "after key " << key;
  }
  EXPECT_EQ(table_.size(), static_cast<size_t>(kLive));
  for (Node* n : live) EXPECT_EQ(Find(n->key), n);
  EXPECT_EQ(Find(0), nullptr);
}

TEST_F(NodeTableTest, NodesWithTheSameHashAreToldApartByTheirKeys) {
  constexpr size_t kHash = 12345;
  Node* a = MakeNode(kHash, 1);
  Node* b = MakeNode(kHash, 2);
  Node* c = MakeNode(kHash, 3);
  Insert(a);
  Insert(b);
  Insert(c);

  EXPECT_EQ(Find(kHash, 1), a);
  EXPECT_EQ(Find(kHash, 2), b);
  EXPECT_EQ(Find(kHash, 3), c);
  EXPECT_EQ(Find(kHash, 4), nullptr);
}

TEST_F(NodeTableTest, ErasingACollidingNodeLeavesTheOthersFindable) {
  constexpr size_t kHash = 12345;
  Node* a = MakeNode(kHash, 1);
  Node* b = MakeNode(kHash, 2);
  Node* c = MakeNode(kHash, 3);
  Insert(a);
  Insert(b);
  Insert(c);

  // Each node in turn, so the probe must step over a tombstone wherever it is.
  table_.Erase(a);
  EXPECT_EQ(Find(kHash, 1), nullptr);
  EXPECT_EQ(Find(kHash, 2), b);
  EXPECT_EQ(Find(kHash, 3), c);

  Node* b2 = MakeNode(kHash, 2);
  table_.Replace(b, b2);
  EXPECT_EQ(Find(kHash, 2), b2);
  EXPECT_EQ(Find(kHash, 3), c);

  table_.Erase(b2);
  EXPECT_EQ(Find(kHash, 2), nullptr);
  EXPECT_EQ(Find(kHash, 3), c);
  EXPECT_EQ(table_.size(), 1u);
}

TEST_F(NodeTableTest, ProbesWrapAroundTheEndOfTheSlotArray) {
  // All-ones hashes start at the last slot whatever the capacity.
  constexpr size_t kLastSlot = SIZE_MAX;
  std::vector<Node*> colliding;
  for (int key = 0; key < 3; ++key) {
    colliding.push_back(MakeNode(kLastSlot, key));
    Insert(colliding.back());
  }
  Insert(MakeNode(0));  // Hash 0: the first slot, where a wrap lands.
  for (int key = 0; key < 3; ++key)
    EXPECT_EQ(Find(kLastSlot, key), colliding[key]);
  EXPECT_NE(Find(0), nullptr);
}

TEST_F(NodeTableTest, ManyCollidingNodesSurviveGrowth) {
  constexpr int kKeys = 300;
  std::vector<Node*> inserted;
  for (int key = 0; key < kKeys; ++key) {
    // Ten keys per hash.
    inserted.push_back(MakeNode(HashOf(key / 10), key));
    Insert(inserted.back());
  }
  for (Node* n : inserted) EXPECT_EQ(Find(n->hash, n->key), n);
}

TEST_F(NodeTableTest, ForEachVisitsEveryLiveNodeOnce) {
  std::vector<int> expected;
  std::vector<Node*> inserted;
  for (int key = 0; key < 50; ++key) {
    inserted.push_back(MakeNode(key));
    Insert(inserted.back());
  }
  for (int key = 0; key < 50; ++key) {
    if (key % 3 == 0) {
      table_.Erase(inserted[key]);
    } else {
      expected.push_back(key);
    }
  }
  EXPECT_THAT(Keys(), UnorderedElementsAreArray(expected));
}

// A node whose reclamation is only marked, never done, so a reader that
// reaches a reclaimed node reads valid memory and the test can report it.
struct StressNode {
  size_t hash;
  int key;
  std::atomic<bool> reclaimed{false};
  StressNode* older = nullptr;  // RetireList's link.
};

void MarkReclaimed(void* p) {
  static_cast<StressNode*>(p)->reclaimed.store(true, std::memory_order_release);
}

TEST(NodeTableConcurrencyTest, ReadersFindOnlyLiveNodesWithTheirOwnKey) {
  constexpr int kReaders = 2;
  constexpr int kPermanentKeys = 64;  // Inserted first, never erased.
  constexpr int kChurnKeys = 512;     // Inserted and erased by the writer.
  constexpr int kWriterSteps = 30'000;
  // Two keys per hash, so the matcher, not the hash, must tell them apart.
  const auto hash_of = [](int key) { return HashOf(key / 2); };

  NodeTable<StressNode> table;
  std::mutex writer_mu;  // Serialises the writer's operations.
  std::vector<std::unique_ptr<StressNode>> nodes;  // Guarded by writer_mu.
  std::vector<StressNode*> present(kPermanentKeys + kChurnKeys, nullptr);
  const auto insert = [&](int key) {
    nodes.push_back(std::make_unique<StressNode>());
    nodes.back()->hash = hash_of(key);
    nodes.back()->key = key;
    present[key] = nodes.back().get();
    RetireList<StressNode> retired;  // Retires once the scope ends.
    table.Insert(present[key], retired);
  };
  {
    std::lock_guard<std::mutex> lock(writer_mu);
    for (int key = 0; key < kPermanentKeys; ++key) insert(key);
  }

  std::atomic<bool> done{false};
  std::atomic<int> wrong_key{0};
  std::atomic<int> reclaimed_seen{0};
  std::atomic<int> permanent_missed{0};
  std::latch readers_started(kReaders);
  std::vector<std::thread> readers;
  for (int r = 0; r < kReaders; ++r) {
    readers.emplace_back([&, r] {
      std::mt19937 rng(r + 1);
      std::uniform_int_distribution<int> any_key(
          0, kPermanentKeys + kChurnKeys - 1);
      readers_started.count_down();
      while (!done.load(std::memory_order_acquire)) {
        const int key = any_key(rng);
        EpochGuard guard;
        const StressNode* n = table.Find(
            hash_of(key), [key](const StressNode* m) { return m->key == key; });
        if (n == nullptr) {
          if (key < kPermanentKeys) permanent_missed.fetch_add(1);
          continue;
        }
        if (n->key != key || n->hash != hash_of(key)) wrong_key.fetch_add(1);
        if (n->reclaimed.load(std::memory_order_acquire)) {
          reclaimed_seen.fetch_add(1);
        }
      }
    });
  }

  readers_started.wait();
  std::thread writer([&] {
    std::mt19937 rng(12345);
    std::uniform_int_distribution<int> churn_key(
        kPermanentKeys, kPermanentKeys + kChurnKeys - 1);
    for (int step = 0; step < kWriterSteps; ++step) {
      const int key = churn_key(rng);
      std::lock_guard<std::mutex> lock(writer_mu);
      StressNode* old = present[key];
      if (old == nullptr) {
        insert(key);
      } else if (step % 3 == 0) {
        // Replace with a fresh node of the same key.
        nodes.push_back(std::make_unique<StressNode>());
        nodes.back()->hash = old->hash;
        nodes.back()->key = key;
        present[key] = nodes.back().get();
        table.Replace(old, present[key]);
        Retire(old, MarkReclaimed);
      } else {
        table.Erase(old);
        present[key] = nullptr;
        Retire(old, MarkReclaimed);
      }
    }
  });
  writer.join();
  done.store(true, std::memory_order_release);
  for (std::thread& reader : readers) reader.join();

  EXPECT_EQ(wrong_key.load(), 0);
  EXPECT_EQ(reclaimed_seen.load(), 0);
  EXPECT_EQ(permanent_missed.load(), 0);

  // The table agrees with the writer's record of what is present.
  std::lock_guard<std::mutex> lock(writer_mu);
  size_t live = 0;
  for (int key = 0; key < kPermanentKeys + kChurnKeys; ++key) {
    const StressNode* n = table.Find(
        hash_of(key), [key](const StressNode* m) { return m->key == key; });
    EXPECT_EQ(n, present[key]) << "key " << key;
    if (present[key] != nullptr) ++live;
  }
  EXPECT_EQ(table.size(), live);
  TryReclaim();
}

}  // namespace
}  // namespace paddock::internal
