// RedisServer: a redis-server child process for tests.

#include "redis_server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <hiredis/hiredis.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "child_process.h"

namespace paddock::testing {
namespace {

// A unix socket path must fit in sockaddr_un (108 bytes): prefer TMPDIR,
// fall back to /tmp when TMPDIR is deep.
std::string MakeTempDir() {
  std::string base = "/tmp";
  if (const char* tmpdir = std::getenv("TMPDIR");
      tmpdir != nullptr && *tmpdir != '\0' && std::strlen(tmpdir) < 60) {
    base = tmpdir;
  }
  std::string templ = base + "/paddock-redis-XXXXXX";
  if (mkdtemp(templ.data()) == nullptr) return "";
  return templ;
}

absl::StatusOr<std::string> ReplyText(const redisReply& reply) {
  switch (reply.type) {
    case REDIS_REPLY_STRING:
    case REDIS_REPLY_STATUS:
      return std::string(reply.str, reply.len);
    case REDIS_REPLY_INTEGER:
      return absl::StrCat(reply.integer);
    case REDIS_REPLY_NIL:
      return std::string("(nil)");
    case REDIS_REPLY_ERROR:
      return absl::UnknownError(std::string(reply.str, reply.len));
    case REDIS_REPLY_ARRAY: {
      std::vector<std::string> parts;
      for (size_t i = 0; i < reply.elements; ++i) {
        absl::StatusOr<std::string> part = ReplyText(*reply.element[i]);
        if (!part.ok()) return part.status();
        parts.push_back(*std::move(part));
      }
      return absl::StrJoin(parts, "\n");
    }
    default:
      return absl::UnknownError("unknown reply type");
  }
}

// Whether the peer of the idle socket `fd` closed its end (an end of file is
// waiting to be read). Never blocks.
bool PeerClosed(int fd) {
  pollfd p{.fd = fd, .events = POLLIN | POLLRDHUP, .revents = 0};
  if (poll(&p, 1, 0) != 1) return false;
  if ((p.revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0) return true;
  char byte;
  return recv(fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT) == 0;
}

}  // namespace

int FreeLoopbackPort() {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return 0;
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof(address);
  int port = 0;
  if (bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) == 0) {
    port = ntohs(address.sin_port);
  }
  close(fd);
  return port;
}

absl::StatusOr<std::unique_ptr<RedisServer>> RedisServer::Start(
    Options options) {
  if (const char* binary = std::getenv("PADDOCK_REDIS_SERVER");
      binary != nullptr && *binary != '\0') {
    options.binary = binary;
  }
  std::string dir = MakeTempDir();
  if (dir.empty()) {
    return absl::InternalError(
        absl::StrCat("RedisServer: mkdtemp: ", std::strerror(errno)));
  }
  std::unique_ptr<RedisServer> server(
      new RedisServer(std::move(options), std::move(dir)));
  if (!server->options_.config.empty()) {
    std::ofstream(server->config_path_) << server->options_.config << "\n";
  }
  if (absl::Status s = server->Launch(); !s.ok()) return s;
  return server;
}

RedisServer::RedisServer(Options options, std::string dir)
    : options_(std::move(options)),
      dir_(std::move(dir)),
      socket_path_(dir_ + "/redis.sock"),
      config_path_(dir_ + "/redis.conf"),
      log_path_(dir_ + "/redis.log") {}

RedisServer::~RedisServer() {
  (void)Stop();
  std::error_code ignored;
  std::filesystem::remove_all(dir_, ignored);
}

absl::Status RedisServer::Launch() {
  const int log_fd =
      open(log_path_.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (log_fd < 0) {
    return absl::InternalError(absl::StrCat("RedisServer: open ", log_path_,
                                            ": ", std::strerror(errno)));
  }
  std::vector<std::string> argv = {options_.binary};
  if (!options_.config.empty()) argv.push_back(config_path_);
  if (options_.sentinel) argv.emplace_back("--sentinel");
  const std::vector<std::string> defaults = {
      "--port",           "0",   "--unixsocket", socket_path_,
      "--unixsocketperm", "700", "--save",       "",
      "--appendonly",     "no",  "--dir",        dir_,
      "--daemonize",      "no",  "--logfile",    ""};
  argv.insert(argv.end(), defaults.begin(), defaults.end());
  argv.insert(argv.end(), options_.extra_args.begin(),
              options_.extra_args.end());
  absl::StatusOr<pid_t> pid = SpawnProcess(argv, log_fd);
  close(log_fd);
  if (!pid.ok()) return pid.status();
  pid_ = *pid;
  paused_ = false;
  return WaitForPong();
}

absl::Status RedisServer::WaitForPong() {
  const absl::Time deadline = absl::Now() + options_.start_timeout;
  while (absl::Now() < deadline) {
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = 0;
      return absl::InternalError(absl::StrCat("RedisServer: ", options_.binary,
                                              " exited at start (status ",
                                              status, "); log:\n", LogTail()));
    }
    timeval tv = {0, 200'000};
    redisContext* c = redisConnectUnixWithTimeout(socket_path_.c_str(), tv);
    if (c != nullptr && c->err == 0) {
      redisSetTimeout(c, tv);
      auto* reply = static_cast<redisReply*>(redisCommand(c, "PING"));
      const bool pong = reply != nullptr && reply->type == REDIS_REPLY_STATUS &&
                        std::string(reply->str, reply->len) == "PONG";
      if (reply != nullptr) freeReplyObject(reply);
      redisFree(c);
      if (pong) return absl::OkStatus();
    } else if (c != nullptr) {
      redisFree(c);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return absl::DeadlineExceededError(absl::StrCat(
      "RedisServer: no PONG on ", socket_path_, " within ",
      absl::FormatDuration(options_.start_timeout), "; log:\n", LogTail()));
}

std::string RedisServer::LogTail() const {
  std::ifstream log(log_path_);
  std::stringstream text;
  text << log.rdbuf();
  std::string all = text.str();
  return all.size() > 4000 ? all.substr(all.size() - 4000) : all;
}

absl::Status RedisServer::Pause() {
  if (pid_ == 0) return absl::FailedPreconditionError("not running");
  if (paused_) return absl::OkStatus();
  if (kill(pid_, SIGSTOP) != 0) {
    return absl::InternalError(absl::StrCat("SIGSTOP: ", std::strerror(errno)));
  }
  int status = 0;
  while (waitpid(pid_, &status, WUNTRACED) < 0 && errno == EINTR) {
  }
  if (!WIFSTOPPED(status)) {
    return absl::InternalError("RedisServer: not stopped after SIGSTOP");
  }
  paused_ = true;
  return absl::OkStatus();
}

absl::Status RedisServer::Resume() {
  if (pid_ == 0) return absl::FailedPreconditionError("not running");
  if (!paused_) return absl::OkStatus();
  if (kill(pid_, SIGCONT) != 0) {
    return absl::InternalError(absl::StrCat("SIGCONT: ", std::strerror(errno)));
  }
  int status = 0;
  while (waitpid(pid_, &status, WCONTINUED) < 0 && errno == EINTR) {
  }
  paused_ = false;
  return absl::OkStatus();
}

void RedisServer::CloseAdmin() {
  if (admin_ != nullptr) redisFree(admin_);
  admin_ = nullptr;
}

absl::Status RedisServer::Kill() {
  CloseAdmin();
  if (pid_ == 0) return absl::OkStatus();
  absl::StatusOr<int> status = KillAndReap(pid_, SIGKILL);
  pid_ = 0;
  paused_ = false;
  return status.status();
}

absl::Status RedisServer::Stop() {
  CloseAdmin();
  if (pid_ == 0) return absl::OkStatus();
  if (paused_) (void)Resume();
  absl::StatusOr<int> status = KillAndReap(pid_, SIGTERM, absl::Seconds(5));
  pid_ = 0;
  paused_ = false;
  return status.status();
}

absl::Status RedisServer::Restart() {
  if (absl::Status s = Kill(); !s.ok()) return s;
  return Launch();
}

absl::StatusOr<std::string> RedisServer::Command(
    const std::vector<std::string>& args) {
  // The server closed it (CLIENT KILL, as Sentinel sends to the instances
  // of a failover): writing would raise SIGPIPE; connect anew instead.
  if (admin_ != nullptr && PeerClosed(admin_->fd)) CloseAdmin();
  if (admin_ == nullptr || admin_->err != 0) {
    CloseAdmin();
    const timeval tv = {2, 0};
    admin_ = redisConnectUnixWithTimeout(socket_path_.c_str(), tv);
    if (admin_ == nullptr || admin_->err != 0) {
      const std::string error =
          admin_ != nullptr ? admin_->errstr : "out of memory";
      CloseAdmin();
      return absl::UnavailableError(
          absl::StrCat("RedisServer: connect ", socket_path_, ": ", error));
    }
    redisSetTimeout(admin_, tv);
  }
  std::vector<const char*> argv;
  std::vector<size_t> lengths;
  for (const std::string& arg : args) {
    argv.push_back(arg.data());
    lengths.push_back(arg.size());
  }
  auto* reply = static_cast<redisReply*>(redisCommandArgv(
      admin_, static_cast<int>(argv.size()), argv.data(), lengths.data()));
  if (reply == nullptr) {
    const std::string error = admin_->errstr;
    CloseAdmin();
    return absl::UnavailableError(
        absl::StrCat("RedisServer: command failed: ", error));
  }
  absl::StatusOr<std::string> text = ReplyText(*reply);
  freeReplyObject(reply);
  return text;
}

absl::StatusOr<uint64_t> RedisServer::NetOutputBytes() {
  absl::StatusOr<std::string> info = Command({"INFO", "stats"});
  if (!info.ok()) return info.status();
  constexpr absl::string_view kField = "total_net_output_bytes:";
  for (absl::string_view line :
       absl::StrSplit(*info, absl::ByAnyChar("\r\n"))) {
    uint64_t bytes = 0;
    if (absl::ConsumePrefix(&line, kField) && absl::SimpleAtoi(line, &bytes)) {
      return bytes;
    }
  }
  return absl::NotFoundError("RedisServer: no total_net_output_bytes in INFO");
}

}  // namespace paddock::testing
