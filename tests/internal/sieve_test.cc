// Tests of paddock/internal/sieve.h: the SIEVE victim order, Remove and
// Replace, and a randomized comparison with a plain model of SIEVE.

#include "paddock/internal/sieve.h"

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <memory>
#include <optional>
#include <random>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace paddock::internal {
namespace {

using ::testing::ElementsAre;

struct Node {
  explicit Node(int id) : id(id) {}
  int id;
  Node* older = nullptr;
  Node* newer = nullptr;
  std::atomic<bool> visited{false};
};

class SieveTest : public ::testing::Test {
 protected:
  // Pushes a new node with `id` and returns it.
  Node* Push(int id) {
    nodes_.push_back(std::make_unique<Node>(id));
    sieve_.Push(nodes_.back().get());
    return nodes_.back().get();
  }
  Node* MakeNode(int id) {
    nodes_.push_back(std::make_unique<Node>(id));
    return nodes_.back().get();
  }

  // What eviction does: take the victim and unlink it. Returns its id, or -1.
  int Evict() {
    Node* victim = sieve_.Victim();
    if (victim == nullptr) return -1;
    sieve_.Remove(victim);
    return victim->id;
  }

  // Ids from oldest to newest, following `newer`; checks `older` agrees.
  std::vector<int> OldestToNewest() const {
    std::vector<int> ids;
    const Node* previous = nullptr;
    for (const Node* n = sieve_.oldest(); n != nullptr; n = n->newer) {
      EXPECT_EQ(n->older, previous) << "broken older link at " << n->id;
      ids.push_back(n->id);
      previous = n;
    }
    return ids;
  }

  Sieve<Node> sieve_;
  std::vector<std::unique_ptr<Node>> nodes_;
};

TEST_F(SieveTest, AnEmptyQueueHasNoVictim) {
  EXPECT_EQ(sieve_.Victim(), nullptr);
  EXPECT_EQ(sieve_.oldest(), nullptr);
}

TEST_F(SieveTest, NewNodesEnterAtTheHead) {
  Push(1);
  Push(2);
  Push(3);
  EXPECT_EQ(sieve_.oldest()->id, 1);
  EXPECT_THAT(OldestToNewest(), ElementsAre(1, 2, 3));
}

TEST_F(SieveTest, WithNothingVisitedTheOldestIsTheVictim) {
  Node* a = Push(1);
  Push(2);
  Push(3);
  EXPECT_EQ(sieve_.Victim(), a);
  // Victim() does not unlink: asking again names the same node.
  EXPECT_EQ(sieve_.Victim(), a);
  EXPECT_THAT(OldestToNewest(), ElementsAre(1, 2, 3));
}

TEST_F(SieveTest, WithNothingVisitedNodesAreEvictedOldestFirst) {
  for (int id = 1; id <= 5; ++id) Push(id);
  std::vector<int> evicted;
  for (int i = 0; i < 5; ++i) evicted.push_back(Evict());
  EXPECT_THAT(evicted, ElementsAre(1, 2, 3, 4, 5));
  EXPECT_EQ(Evict(), -1);
}

TEST_F(SieveTest, AVisitedNodeGetsASecondChanceAndLosesItsBit) {
  Node* a = Push(1);
  Node* b = Push(2);
  Push(3);
  a->visited = true;
  EXPECT_EQ(sieve_.Victim(), b);
  EXPECT_FALSE(a->visited.load());
  // The survivor keeps its place in the queue.
  EXPECT_THAT(OldestToNewest(), ElementsAre(1, 2, 3));
}

TEST_F(SieveTest, TheHandContinuesFromWhereItStopped) {
  Node* a = Push(1);
  Push(2);
  Push(3);
  a->visited = true;
  EXPECT_EQ(Evict(), 2);  // Passes 1, clearing its bit.
  // 1 is now unvisited and oldest, but the hand is past it: 3 goes first.
  EXPECT_EQ(Evict(), 3);
  // The hand fell off the head and starts again at the tail.
  EXPECT_EQ(Evict(), 1);
}

TEST_F(SieveTest, WhenEveryNodeWasVisitedTheHandWrapsAndTakesTheOldest) {
  Node* a = Push(1);
  Node* b = Push(2);
  Node* c = Push(3);
  a->visited = b->visited = c->visited = true;
  EXPECT_EQ(sieve_.Victim(), a);
  EXPECT_FALSE(a->visited.load());
  EXPECT_FALSE(b->visited.load());
  EXPECT_FALSE(c->visited.load());
}

TEST_F(SieveTest, TheHandWrapsFromTheHeadToTheTail) {
  Node* a = Push(1);
  Node* b = Push(2);
  Node* c = Push(3);
  a->visited = b->visited = true;
  ASSERT_EQ(sieve_.Victim(), c);  // The hand rests on the head.
  a->visited = c->visited = true;
  // Passes 3 at the head, wraps to the tail, passes 1, takes 2.
  EXPECT_EQ(sieve_.Victim(), b);
  EXPECT_FALSE(a->visited.load());
  EXPECT_FALSE(c->visited.load());
}

TEST_F(SieveTest, RemovingTheHandNodeMovesTheHandToTheNextNewer) {
  Node* a = Push(1);
  Node* b = Push(2);
  Push(3);
  Push(4);
  a->visited = true;
  ASSERT_EQ(sieve_.Victim(), b);  // The hand rests on 2.
  sieve_.Remove(b);
  // Continues at 3, not at the (now unvisited) oldest node 1.
  EXPECT_EQ(sieve_.Victim()->id, 3);
  EXPECT_THAT(OldestToNewest(), ElementsAre(1, 3, 4));
}

TEST_F(SieveTest, RemovingTheHandNodeAtTheHeadSendsTheHandToTheTail) {
  Node* a = Push(1);
  Node* b = Push(2);
  Node* c = Push(3);
  a->visited = b->visited = true;
  ASSERT_EQ(sieve_.Victim(), c);  // The hand rests on the head.
  sieve_.Remove(c);
  EXPECT_EQ(sieve_.Victim(), a);
  EXPECT_THAT(OldestToNewest(), ElementsAre(1, 2));
}

TEST_F(SieveTest, RemovingANodeOtherThanTheHandLeavesTheHand) {
  Node* a = Push(1);
  Node* b = Push(2);
  Push(3);
  a->visited = true;
  ASSERT_EQ(sieve_.Victim(), b);
  sieve_.Remove(a);
  EXPECT_EQ(sieve_.Victim(), b);
  EXPECT_EQ(sieve_.oldest(), b);
}

TEST_F(SieveTest, RemovingTheOnlyNodeEmptiesTheQueue) {
  Node* a = Push(1);
  ASSERT_EQ(sieve_.Victim(), a);
  sieve_.Remove(a);
  EXPECT_EQ(sieve_.Victim(), nullptr);
  EXPECT_EQ(sieve_.oldest(), nullptr);
  Node* b = Push(2);
  EXPECT_EQ(sieve_.Victim(), b);
}

TEST_F(SieveTest, RemovingTheHeadLetsTheNextPushBecomeTheHead) {
  Push(1);
  Node* b = Push(2);
  sieve_.Remove(b);
  Push(3);
  EXPECT_THAT(OldestToNewest(), ElementsAre(1, 3));
}

TEST_F(SieveTest, ReplaceKeepsThePositionAndTheVisitedBit) {
  Node* a = Push(1);
  Node* b = Push(2);
  Push(3);
  b->visited = true;
  Node* b2 = MakeNode(20);
  sieve_.Replace(b, b2);
  EXPECT_TRUE(b2->visited.load());
  EXPECT_THAT(OldestToNewest(), ElementsAre(1, 20, 3));

  // 1 goes first; then 20 gets the second chance 2 had earned.
  EXPECT_EQ(sieve_.Victim(), a);
  sieve_.Remove(a);
  EXPECT_EQ(Evict(), 3);
  EXPECT_FALSE(b2->visited.load());
}

TEST_F(SieveTest, ReplaceOfAnUnvisitedNodeLeavesTheReplacementUnvisited) {
  Push(1);
  Node* b = Push(2);
  Node* b2 = MakeNode(20);
  sieve_.Replace(b, b2);
  EXPECT_FALSE(b2->visited.load());
}

TEST_F(SieveTest, ReplaceOfTheOldestAndTheNewestKeepsBothEndsLinked) {
  Node* a = Push(1);
  Push(2);
  Node* c = Push(3);
  sieve_.Replace(a, MakeNode(10));
  sieve_.Replace(c, MakeNode(30));
  EXPECT_EQ(sieve_.oldest()->id, 10);
  Push(4);  // Links onto the replacement of the head.
  EXPECT_THAT(OldestToNewest(), ElementsAre(10, 2, 30, 4));
}

TEST_F(SieveTest, ReplaceOfTheHandNodeMovesTheHandToTheReplacement) {
  Node* a = Push(1);
  Node* b = Push(2);
  Push(3);
  a->visited = true;
  ASSERT_EQ(sieve_.Victim(), b);
  Node* b2 = MakeNode(20);
  sieve_.Replace(b, b2);
  EXPECT_EQ(sieve_.Victim(), b2);
}

// SIEVE as the paper states it, on a vector (oldest first) and an index.
class SieveModel {
 public:
  void Push(int id) { queue_.push_back({id, false}); }
  void Visit(int id) { Find(id)->visited = true; }
  bool Visited(int id) { return Find(id)->visited; }
  void Remove(int id) {
    const auto it = Find(id);
    const size_t i = static_cast<size_t>(it - queue_.begin());
    if (hand_ && *hand_ == i) {
      // The hand moves to the next newer node, or off the head.
      if (i + 1 == queue_.size()) hand_.reset();
    } else if (hand_ && *hand_ > i) {
      --*hand_;
    }
    queue_.erase(it);
  }
  void Replace(int old_id, int new_id) { Find(old_id)->id = new_id; }
  std::optional<int> Victim() {
    if (queue_.empty()) return std::nullopt;
    size_t i = hand_.value_or(0);
    while (queue_[i].visited) {
      queue_[i].visited = false;
      i = i + 1 == queue_.size() ? 0 : i + 1;
    }
    hand_ = i;
    return queue_[i].id;
  }
  std::vector<int> Ids() const {
    std::vector<int> ids;
    for (const Entry& e : queue_) ids.push_back(e.id);
    return ids;
  }

 private:
  struct Entry {
    int id;
    bool visited;
  };
  std::vector<Entry>::iterator Find(int id) {
    return std::find_if(queue_.begin(), queue_.end(),
                        [id](const Entry& e) { return e.id == id; });
  }
  std::vector<Entry> queue_;
  std::optional<size_t> hand_;  // Index; empty means the tail.
};

TEST_F(SieveTest, RandomOperationsMatchAModelOfSieve) {
  constexpr size_t kMaxLinked = 64;
  std::mt19937 rng(20240416);
  SieveModel model;
  std::vector<Node*> linked;  // Nodes in the sieve, any order.
  int next_id = 0;
  const auto pick = [&]() -> Node*& {
    return linked[std::uniform_int_distribution<size_t>(
        0, linked.size() - 1)(rng)];
  };
  for (int step = 0; step < 20'000; ++step) {
    int op = std::uniform_int_distribution<int>(0, 9)(rng);
    // Keeps the queue short so the checks after each step stay cheap.
    if (op <= 2 && linked.size() >= kMaxLinked) op = 7;
    if (linked.empty() || op <= 2) {
      linked.push_back(Push(next_id));
      model.Push(next_id++);
    } else if (op <= 5) {
      Node* n = pick();
      n->visited = true;
      model.Visit(n->id);
    } else if (op <= 7) {
      Node* victim = sieve_.Victim();
      ASSERT_NE(victim, nullptr);
      ASSERT_EQ(victim->id, model.Victim()) << "step " << step;
      if (op == 7) {
        sieve_.Remove(victim);
        model.Remove(victim->id);
        linked.erase(std::find(linked.begin(), linked.end(), victim));
      }
    } else if (op == 8) {
      Node*& n = pick();
      sieve_.Remove(n);
      model.Remove(n->id);
      n = linked.back();
      linked.pop_back();
    } else {
      Node*& n = pick();
      Node* replacement = MakeNode(next_id);
      sieve_.Replace(n, replacement);
      model.Replace(n->id, next_id++);
      n = replacement;
    }
    for (Node* n : linked) {
      ASSERT_EQ(n->visited.load(), model.Visited(n->id))
          << "node " << n->id << " at step " << step;
    }
    ASSERT_EQ(OldestToNewest(), model.Ids()) << "step " << step;
  }
}

}  // namespace
}  // namespace paddock::internal
