// Tests of paddock/internal/node_pool.h: a thread reuses the blocks it
// freed, keeps at most kMaxCached, and gives them back on Release and at
// exit.

#include "paddock/internal/node_pool.h"

#include <cstdint>
#include <set>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace paddock::internal {
namespace {

using Pool = NodePool<48, 16>;

TEST(NodePoolTest, BlocksAreAlignedAndReusedByTheThreadThatFreedThem) {
  Pool::Release();
  void* a = Pool::Allocate();
  void* b = Pool::Allocate();
  EXPECT_EQ(reinterpret_cast<uintptr_t>(a) % 16, 0u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(b) % 16, 0u);
  Pool::Free(a);
  Pool::Free(b);
  if (!kNodePoolEnabled) GTEST_SKIP() << "the pool is off under ASan and TSan";
  EXPECT_EQ(Pool::cached(), 2u);
  // Last freed, first handed out.
  EXPECT_EQ(Pool::Allocate(), b);
  EXPECT_EQ(Pool::Allocate(), a);
  EXPECT_EQ(Pool::cached(), 0u);
  Pool::Free(a);
  Pool::Free(b);
  Pool::Release();
  EXPECT_EQ(Pool::cached(), 0u);
}

TEST(NodePoolTest, AThreadKeepsAtMostMaxCachedBlocks) {
  Pool::Release();
  std::vector<void*> blocks;
  for (size_t i = 0; i < Pool::kMaxCached + 10; ++i) {
    blocks.push_back(Pool::Allocate());
  }
  for (void* p : blocks) Pool::Free(p);
  EXPECT_LE(Pool::cached(), Pool::kMaxCached);
  Pool::Release();
}

TEST(NodePoolTest, AThreadHoldsAtMost128KiBWhateverTheBlocksSize) {
  constexpr size_t kLarge = size_t{48} * 1024;
  constexpr size_t kHuge = size_t{1024} * 1024;
  using Large = NodePool<kLarge, 16>;
  using Huge = NodePool<kHuge, 16>;
  static_assert(Large::kMaxCached * kLarge <= size_t{128} * 1024);
  static_assert(Huge::kMaxCached == 0);
  void* a = Huge::Allocate();
  void* b = Huge::Allocate();
  Huge::Free(a);
  Huge::Free(b);
  EXPECT_EQ(Huge::cached(), 0u);  // Both went back to the allocator.
  std::vector<void*> blocks;
  for (int i = 0; i < 4; ++i) blocks.push_back(Large::Allocate());
  for (void* p : blocks) Large::Free(p);
  EXPECT_LE(Large::cached(), 2u);
  Large::Release();
}

TEST(NodePoolTest, BlocksFreedOnAnotherThreadGoToThatThreadsList) {
  Pool::Release();
  std::vector<void*> blocks;
  for (int i = 0; i < 8; ++i) blocks.push_back(Pool::Allocate());
  std::thread other([&] {
    for (void* p : blocks) Pool::Free(p);
    if (kNodePoolEnabled) {
      EXPECT_EQ(Pool::cached(), 8u);
    }
    // Returned to the allocator when this thread exits (LeakSanitizer and
    // valgrind see them freed).
  });
  other.join();
  EXPECT_EQ(Pool::cached(), 0u);
  // Distinct blocks come out of a fresh allocation.
  std::set<void*> fresh;
  for (int i = 0; i < 4; ++i) fresh.insert(Pool::Allocate());
  EXPECT_EQ(fresh.size(), 4u);
  for (void* p : fresh) Pool::Free(p);
  Pool::Release();
}

}  // namespace
}  // namespace paddock::internal
