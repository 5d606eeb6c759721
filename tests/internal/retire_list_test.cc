// Tests for internal::RetireList: what a writer unlinks under its lock is
// retired only after it, every node and object exactly once, and nothing is
// freed while a reader's guard that may still see it is active.

#include "paddock/internal/retire_list.h"

#include <atomic>
#include <cstdlib>

#include "gtest/gtest.h"
#include "paddock/internal/epoch.h"

namespace paddock::internal {
namespace {

std::atomic<int> nodes_freed{0};
std::atomic<int> objects_freed{0};

struct Node {
  Node* older = nullptr;
  ~Node() { nodes_freed.fetch_add(1); }
};

void FreeObject(void* p) {
  objects_freed.fetch_add(1);
  std::free(p);
}

void ReclaimAll() {
  for (int i = 0; i < 10; ++i) TryReclaim();
}

TEST(RetireListTest, RetiresEveryNodeAndObjectOnceWhenNoGuardIsActive) {
  const int nodes = nodes_freed, objects = objects_freed;
  {
    RetireList<Node> list;
    for (int i = 0; i < 5; ++i) list.Add(new Node);
    list.AddObject(std::malloc(16), FreeObject);
    list.AddObject(std::malloc(16), FreeObject);
    EXPECT_EQ(nodes_freed, nodes);  // Taken, not retired yet.
    list.RetireAll();
    list.RetireAll();  // Nothing left: a second call retires nothing.
  }
  ReclaimAll();
  EXPECT_EQ(nodes_freed, nodes + 5);
  EXPECT_EQ(objects_freed, objects + 2);
}

TEST(RetireListTest, TheDestructorRetiresWhatIsLeft) {
  const int nodes = nodes_freed;
  {
    RetireList<Node> list;
    list.Add(new Node);
  }
  ReclaimAll();
  EXPECT_EQ(nodes_freed, nodes + 1);
}

TEST(RetireListTest, NothingIsFreedWhileAGuardIsActive) {
  const int nodes = nodes_freed;
  {
    EpochGuard guard;  // A reader that may still see the node.
    RetireList<Node> list;
    list.Add(new Node);
    list.RetireAll();
    TryReclaim();
    EXPECT_EQ(nodes_freed, nodes);
  }
  ReclaimAll();
  EXPECT_EQ(nodes_freed, nodes + 1);
}

}  // namespace
}  // namespace paddock::internal
