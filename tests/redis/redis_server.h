// File: tests/redis/redis_server.h
// -----------------------------------------------------------------------------
// `paddock::testing::RedisServer`: a real redis-server for one test, in a
// fresh temporary directory, listening on a unix socket only:
//
//   redis-server --port 0 --unixsocket DIR/redis.sock --save '' --appendonly no
//
// (`--port 0` turns TCP off: no fixed port, no clash between tests running
// at once, never a system service). Start() returns once it answers PING.
// The test can pause it (SIGSTOP: a hung server; Redis 7 disables DEBUG
// SLEEP), resume it, kill it, and restart it on the same socket path, which
// is what the tier's fault tests and the fleet tests need. Destroying it
// stops the server (SIGTERM, then SIGKILL) and removes the directory.
//
// The server is started with PR_SET_DEATHSIG: it dies with the thread that
// started (or restarted) it, so a crashed test leaves no server behind.
// Start and restart it from the test's main thread.
//
// Not thread-safe: drive it from one thread. Forked children may use the
// socket (`address()`), not the object.

#ifndef PADDOCK_TESTS_REDIS_REDIS_SERVER_H_
#define PADDOCK_TESTS_REDIS_REDIS_SERVER_H_

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

struct redisContext;

namespace paddock::testing {

// A TCP port on 127.0.0.1 that nobody listens on now (the kernel's pick for
// port 0), for a server a test starts with `--port`; 0 if none. Another
// process may take it before the test does: rare enough for tests.
int FreeLoopbackPort();

class RedisServer {
 public:
  struct Options {
    // The program; the environment variable PADDOCK_REDIS_SERVER overrides
    // it.
    std::string binary = "redis-server";
    // More arguments, e.g. {"--maxmemory", "10mb"}; they come after the
    // defaults above and override them (e.g. {"--port", "7001"}).
    std::vector<std::string> extra_args;
    // When set: written to DIR/redis.conf, which the server loads first (and
    // may rewrite: a sentinel keeps its state there).
    std::string config;
    // Runs it as a Redis Sentinel (`--sentinel`; needs `config`).
    bool sentinel = false;
    // How long Start() and Restart() wait for the first PONG.
    absl::Duration start_timeout = absl::Seconds(10);
  };

  // RedisServer::Start()
  //
  // Creates the directory, starts the server and waits for its PONG.
  // Returns an error with the server's log if it does not come up.
  static absl::StatusOr<std::unique_ptr<RedisServer>> Start(Options options);
  static absl::StatusOr<std::unique_ptr<RedisServer>> Start() {
    return Start(Options());
  }

  // Stops the server and removes its directory.
  ~RedisServer();
  RedisServer(const RedisServer&) = delete;
  RedisServer& operator=(const RedisServer&) = delete;

  // "unix:<dir>/redis.sock", the form `RedisOptions::address` takes.
  std::string address() const { return "unix:" + socket_path_; }
  const std::string& socket_path() const { return socket_path_; }
  const std::string& dir() const { return dir_; }
  // The server's pid, or 0 while it is not running.
  pid_t pid() const { return pid_; }
  bool paused() const { return paused_; }

  // RedisServer::Pause()
  //
  // SIGSTOP: the server keeps its connections and answers nothing, like a
  // hung process. Returns once it is stopped.
  absl::Status Pause();

  // RedisServer::Resume()
  //
  // SIGCONT after Pause(). Returns once it runs again.
  absl::Status Resume();

  // RedisServer::Kill()
  //
  // SIGKILL, like a crash: connections drop, data is gone. Returns once it
  // is reaped.
  absl::Status Kill();

  // RedisServer::Stop()
  //
  // SIGTERM (after SIGCONT if paused), then SIGKILL if it lingers.
  absl::Status Stop();

  // RedisServer::Restart()
  //
  // Kills the server if it runs, starts a new one on the same socket path
  // (empty: nothing is persisted) and waits for its PONG.
  absl::Status Restart();

  // RedisServer::Command()
  //
  // Runs one command on the test's own connection (kept open, so that it
  // stays authenticated across CONFIG SET requirepass, and opened again if
  // the server closed it) and returns the
  // reply as text: strings, statuses and integers as they are, nil as
  // "(nil)", an array as its elements joined by '\n'. An error reply is
  // `absl::UnknownError` with its text.
  absl::StatusOr<std::string> Command(const std::vector<std::string>& args);

  // RedisServer::NetOutputBytes()
  //
  // The bytes the server has written to its clients so far
  // (`total_net_output_bytes` of INFO stats), to tell how much a call
  // transferred. Counts this connection's earlier replies too, each INFO
  // reply included (about 2 KB).
  absl::StatusOr<uint64_t> NetOutputBytes();

 private:
  RedisServer(Options options, std::string dir);

  absl::Status Launch();
  absl::Status WaitForPong();
  std::string LogTail() const;
  void CloseAdmin();

  const Options options_;
  const std::string dir_;
  const std::string socket_path_;
  const std::string config_path_;
  const std::string log_path_;
  pid_t pid_ = 0;
  bool paused_ = false;
  redisContext* admin_ = nullptr;
};

}  // namespace paddock::testing

#endif  // PADDOCK_TESTS_REDIS_REDIS_SERVER_H_
