// The test fixture itself: a real redis-server that tests can pause, kill
// and restart.

#include "redis_server.h"

#include <signal.h>
#include <sys/stat.h>

#include <filesystem>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "gtest/gtest.h"

namespace paddock::testing {
namespace {

std::unique_ptr<RedisServer> StartOrDie() {
  absl::StatusOr<std::unique_ptr<RedisServer>> server = RedisServer::Start();
  EXPECT_TRUE(server.ok()) << server.status();
  return server.ok() ? *std::move(server) : nullptr;
}

TEST(RedisServerTest, StartsOnAUnixSocketInAFreshDirectoryWithoutTcp) {
  std::unique_ptr<RedisServer> server = StartOrDie();
  ASSERT_NE(server, nullptr);
  EXPECT_GT(server->pid(), 0);
  EXPECT_EQ(server->address(), "unix:" + server->socket_path());
  EXPECT_TRUE(std::filesystem::is_socket(server->socket_path()));
  EXPECT_EQ(server->Command({"PING"}).value_or(""), "PONG");
  EXPECT_EQ(server->Command({"CONFIG", "GET", "port"}).value_or(""), "port\n0");
  EXPECT_EQ(server->Command({"CONFIG", "GET", "save"}).value_or(""), "save\n");
}

TEST(RedisServerTest, RemovesItsDirectoryWhenDestroyed) {
  std::unique_ptr<RedisServer> server = StartOrDie();
  ASSERT_NE(server, nullptr);
  const std::string dir = server->dir();
  const pid_t pid = server->pid();
  server.reset();
  EXPECT_FALSE(std::filesystem::exists(dir));
  EXPECT_NE(kill(pid, 0), 0) << "the server outlived its fixture";
}

TEST(RedisServerTest, CommandReportsErrorReplies) {
  std::unique_ptr<RedisServer> server = StartOrDie();
  ASSERT_NE(server, nullptr);
  EXPECT_EQ(server->Command({"SET", "k", "v"}).value_or(""), "OK");
  EXPECT_EQ(server->Command({"GET", "k"}).value_or(""), "v");
  EXPECT_EQ(server->Command({"GET", "missing"}).value_or(""), "(nil)");
  EXPECT_EQ(server->Command({"INCR", "k"}).status().code(),
            absl::StatusCode::kUnknown);
}

TEST(RedisServerTest, PauseStopsAnsweringAndResumeAnswersAgain) {
  std::unique_ptr<RedisServer> server = StartOrDie();
  ASSERT_NE(server, nullptr);
  ASSERT_TRUE(server->Pause().ok());
  EXPECT_TRUE(server->paused());
  // The admin connection times out (2 s) while the server is stopped.
  EXPECT_FALSE(server->Command({"PING"}).ok());
  ASSERT_TRUE(server->Resume().ok());
  EXPECT_EQ(server->Command({"PING"}).value_or(""), "PONG");
}

TEST(RedisServerTest, KillThenRestartServesOnTheSameSocketWithNoData) {
  std::unique_ptr<RedisServer> server = StartOrDie();
  ASSERT_NE(server, nullptr);
  const std::string socket = server->socket_path();
  ASSERT_EQ(server->Command({"SET", "k", "v"}).value_or(""), "OK");
  const pid_t first = server->pid();
  ASSERT_TRUE(server->Kill().ok());
  EXPECT_EQ(server->pid(), 0);
  EXPECT_FALSE(server->Command({"PING"}).ok());
  ASSERT_TRUE(server->Restart().ok());
  EXPECT_NE(server->pid(), first);
  EXPECT_EQ(server->socket_path(), socket);
  EXPECT_EQ(server->Command({"GET", "k"}).value_or(""), "(nil)");
}

TEST(RedisServerTest, RestartWhilePausedReplacesTheServer) {
  std::unique_ptr<RedisServer> server = StartOrDie();
  ASSERT_NE(server, nullptr);
  ASSERT_TRUE(server->Pause().ok());
  ASSERT_TRUE(server->Restart().ok());
  EXPECT_FALSE(server->paused());
  EXPECT_EQ(server->Command({"PING"}).value_or(""), "PONG");
}

}  // namespace
}  // namespace paddock::testing
