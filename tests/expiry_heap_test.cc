// Tests of paddock/internal/expiry_heap.h: Top() is always the node expiring
// first, checked by hand and against a std::multiset under random operations.

#include "paddock/internal/expiry_heap.h"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <random>
#include <set>
#include <vector>

#include "gtest/gtest.h"

namespace paddock::internal {
namespace {

struct Node {
  int64_t keep_until;
  size_t heap_index = 0;
  int64_t evict_after() const { return keep_until; }
};

class ExpiryHeapTest : public ::testing::Test {
 protected:
  Node* MakeNode(int64_t keep_until) {
    nodes_.push_back(std::make_unique<Node>(Node{keep_until}));
    return nodes_.back().get();
  }
  Node* Push(int64_t keep_until) {
    Node* n = MakeNode(keep_until);
    heap_.Push(n);
    return n;
  }

  ExpiryHeap<Node> heap_;
  std::vector<std::unique_ptr<Node>> nodes_;
};

TEST_F(ExpiryHeapTest, AnEmptyHeapHasNoTop) {
  EXPECT_EQ(heap_.Top(), nullptr);
  EXPECT_EQ(heap_.size(), 0u);
}

TEST_F(ExpiryHeapTest, TopIsTheNodeExpiringFirst) {
  Push(30);
  Node* first = Push(10);
  Push(20);
  EXPECT_EQ(heap_.Top(), first);
  EXPECT_EQ(heap_.size(), 3u);
}

TEST_F(ExpiryHeapTest, RemovingTheTopPromotesTheNextToExpire) {
  Node* a = Push(10);
  Node* b = Push(20);
  Node* c = Push(30);
  heap_.Remove(a);
  EXPECT_EQ(heap_.Top(), b);
  heap_.Remove(b);
  EXPECT_EQ(heap_.Top(), c);
  heap_.Remove(c);
  EXPECT_EQ(heap_.Top(), nullptr);
}

TEST_F(ExpiryHeapTest, RemovingANodeOtherThanTheTopKeepsTheTop) {
  Node* a = Push(10);
  Push(20);
  Node* c = Push(30);
  heap_.Remove(c);
  EXPECT_EQ(heap_.Top(), a);
  EXPECT_EQ(heap_.size(), 2u);
}

TEST_F(ExpiryHeapTest, RemovingTheLastPushedNodeWorks) {
  Node* a = Push(10);
  Node* b = Push(5);
  heap_.Remove(b);
  EXPECT_EQ(heap_.Top(), a);
  EXPECT_EQ(heap_.size(), 1u);
}

TEST_F(ExpiryHeapTest, ReplacingWithAnEarlierExpiryMovesTheReplacementUp) {
  Push(10);
  Push(20);
  Node* c = Push(30);
  Node* earliest = MakeNode(1);
  heap_.Replace(c, earliest);
  EXPECT_EQ(heap_.Top(), earliest);
  EXPECT_EQ(heap_.size(), 3u);
}

TEST_F(ExpiryHeapTest, ReplacingTheTopWithALaterExpiryMovesItDown) {
  Node* a = Push(10);
  Node* b = Push(20);
  Push(30);
  heap_.Replace(a, MakeNode(100));
  EXPECT_EQ(heap_.Top(), b);
  heap_.Remove(b);
  EXPECT_EQ(heap_.Top()->keep_until, 30);
  heap_.Remove(heap_.Top());
  EXPECT_EQ(heap_.Top()->keep_until, 100);
}

TEST_F(ExpiryHeapTest, ClearEmptiesTheHeap) {
  Push(1);
  Push(2);
  heap_.Clear();
  EXPECT_EQ(heap_.Top(), nullptr);
  EXPECT_EQ(heap_.size(), 0u);
}

TEST_F(ExpiryHeapTest, RandomOperationsKeepTheEarliestExpiryOnTop) {
  std::mt19937_64 rng(42);
  // A narrow range of times, so equal expiries are common.
  std::uniform_int_distribution<int64_t> time(0, 200);
  std::multiset<int64_t> model;
  std::vector<Node*> in_heap;
  const auto pick = [&] {
    return std::uniform_int_distribution<size_t>(0, in_heap.size() - 1)(rng);
  };
  for (int step = 0; step < 20'000; ++step) {
    const int op = std::uniform_int_distribution<int>(0, 9)(rng);
    if (in_heap.empty() || op <= 3) {
      Node* n = Push(time(rng));
      in_heap.push_back(n);
      model.insert(n->keep_until);
    } else if (op <= 5) {
      // Remove any node.
      const size_t i = pick();
      heap_.Remove(in_heap[i]);
      model.erase(model.find(in_heap[i]->keep_until));
      in_heap[i] = in_heap.back();
      in_heap.pop_back();
    } else if (op == 6) {
      // Remove the top, as eviction of an expired entry does.
      Node* top = heap_.Top();
      heap_.Remove(top);
      model.erase(model.begin());
      std::erase(in_heap, top);
    } else {
      const size_t i = pick();
      Node* replacement = MakeNode(time(rng));
      heap_.Replace(in_heap[i], replacement);
      model.erase(model.find(in_heap[i]->keep_until));
      model.insert(replacement->keep_until);
      in_heap[i] = replacement;
    }

    ASSERT_EQ(heap_.size(), model.size()) << "step " << step;
    if (model.empty()) {
      ASSERT_EQ(heap_.Top(), nullptr) << "step " << step;
    } else {
      ASSERT_NE(heap_.Top(), nullptr) << "step " << step;
      ASSERT_EQ(heap_.Top()->keep_until, *model.begin()) << "step " << step;
    }
  }

  // Draining by Top() yields the times in order.
  std::vector<int64_t> drained;
  while (Node* top = heap_.Top()) {
    drained.push_back(top->keep_until);
    heap_.Remove(top);
  }
  EXPECT_EQ(drained, std::vector<int64_t>(model.begin(), model.end()));
}

}  // namespace
}  // namespace paddock::internal
