// Tests for internal::SeedOrRandom and the fork salt: a given seed is kept
// (so a seeded run repeats), a zero one is drawn from entropy, and a child
// after fork() gets a salt of its own, so that it does not repeat its
// parent's random choices.

#include "paddock/internal/seed.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <set>

#include "gtest/gtest.h"

namespace paddock::internal {
namespace {

TEST(SeedTest, AGivenSeedIsKept) {
  EXPECT_EQ(SeedOrRandom(1), 1u);
  EXPECT_EQ(SeedOrRandom(0xdeadbeef), 0xdeadbeefu);
}

TEST(SeedTest, ZeroDrawsANonZeroSeedEachTime) {
  std::set<uint64_t> drawn;
  for (int i = 0; i < 16; ++i) {
    const uint64_t seed = SeedOrRandom(0);
    EXPECT_NE(seed, 0u);
    drawn.insert(seed);
  }
  EXPECT_GT(drawn.size(), 14u);  // 64 random bits: no repeats expected.
}

TEST(SeedTest, AChildAfterForkHasASaltOfItsOwn) {
  (void)SeedOrRandom(0);  // Installs the fork handler.
  const uint64_t parent = ForkSalt();
  int pipe_fds[2];
  ASSERT_EQ(pipe(pipe_fds), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    const uint64_t salt = ForkSalt();
    const bool ok = write(pipe_fds[1], &salt, sizeof(salt)) == sizeof(salt);
    _exit(ok ? 0 : 1);
  }
  uint64_t child_salt = parent;
  ASSERT_EQ(read(pipe_fds[0], &child_salt, sizeof(child_salt)),
            static_cast<ssize_t>(sizeof(child_salt)));
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  close(pipe_fds[0]);
  close(pipe_fds[1]);
  EXPECT_NE(child_salt, parent);
  EXPECT_NE(child_salt, 0u);
  EXPECT_EQ(ForkSalt(), parent);  // The parent's is unchanged.
}

}  // namespace
}  // namespace paddock::internal
