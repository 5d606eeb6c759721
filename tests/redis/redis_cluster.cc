// RedisCluster: nodes on loopback ports, joined and resharded by redis-cli.

#include "redis_cluster.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "child_process.h"

namespace paddock::testing {
namespace {

// A node's cluster bus listens on its port + 10000.
constexpr int kBusOffset = 10000;

bool PortFree(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = htons(static_cast<uint16_t>(port));
  const bool free =
      bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0;
  close(fd);
  return free;
}

// A port whose bus port is free too; 0 if none was found.
int FreeClusterPort() {
  for (int attempt = 0; attempt < 100; ++attempt) {
    const int port = FreeLoopbackPort();
    if (port > 0 && port + kBusOffset <= 65535 && PortFree(port + kBusOffset)) {
      return port;
    }
  }
  return 0;
}

bool Eventually(const std::function<bool()>& done, absl::Duration timeout) {
  const absl::Time give_up = absl::Now() + timeout;
  while (!done()) {
    if (absl::Now() >= give_up) return false;
    absl::SleepFor(absl::Milliseconds(20));
  }
  return true;
}

// One line of CLUSTER NODES: "<id> <ip>:<port>@<bus> <flags> <master> <ping>
// <pong> <epoch> <link> <slot>...".
struct NodeLine {
  std::string id;
  int port = 0;
  bool master = false;
  bool failed = false;
  std::vector<std::pair<int, int>> slots;
};

std::vector<NodeLine> ParseNodes(absl::string_view text) {
  std::vector<NodeLine> nodes;
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    const std::vector<absl::string_view> f =
        absl::StrSplit(line, ' ', absl::SkipEmpty());
    if (f.size() < 8) continue;
    NodeLine node;
    node.id = std::string(f[0]);
    const absl::string_view address = f[1].substr(0, f[1].find('@'));
    (void)absl::SimpleAtoi(address.substr(address.rfind(':') + 1), &node.port);
    node.master = absl::StrContains(f[2], "master");
    node.failed = absl::StrContains(f[2], "fail");
    for (size_t i = 8; i < f.size(); ++i) {
      if (f[i].front() == '[') continue;  // A slot being migrated.
      const std::vector<absl::string_view> range = absl::StrSplit(f[i], '-');
      int first = 0;
      int last = 0;
      if (!absl::SimpleAtoi(range[0], &first)) continue;
      last = first;
      if (range.size() == 2 && !absl::SimpleAtoi(range[1], &last)) continue;
      node.slots.emplace_back(first, last);
    }
    nodes.push_back(std::move(node));
  }
  return nodes;
}

}  // namespace

absl::StatusOr<std::unique_ptr<RedisCluster>> RedisCluster::Start(
    Options options) {
  std::unique_ptr<RedisCluster> cluster(new RedisCluster(std::move(options)));
  const Options& o = cluster->options_;
  const int count = o.masters * (1 + o.replicas_per_master);
  for (int i = 0; i < count; ++i) {
    const int port = FreeClusterPort();
    if (port == 0) return absl::UnavailableError("no free cluster port");
    cluster->ports_.push_back(port);
  }
  for (const int port : cluster->ports_) {
    RedisServer::Options server;
    server.extra_args = {
        "--port", absl::StrCat(port), "--bind", "127.0.0.1",
        "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
        "--cluster-node-timeout",
        absl::StrCat(absl::ToInt64Milliseconds(o.node_timeout)),
        // The other masters' slots are served while one has no master.
        "--cluster-require-full-coverage", "no",
        // Redis 7 waits 5 s for more replicas before a full sync.
        "--repl-diskless-sync-delay", "0"};
    server.extra_args.insert(server.extra_args.end(), o.extra_args.begin(),
                             o.extra_args.end());
    absl::StatusOr<std::unique_ptr<RedisServer>> node =
        RedisServer::Start(std::move(server));
    if (!node.ok()) return node.status();
    cluster->nodes_.push_back(*std::move(node));
  }
  std::vector<std::string> create = {"--cluster", "create"};
  for (int i = 0; i < count; ++i) create.push_back(cluster->address(i));
  create.insert(create.end(),
                {"--cluster-replicas", absl::StrCat(o.replicas_per_master),
                 "--cluster-yes"});
  absl::StatusOr<std::string> created =
      cluster->RedisCli(create, absl::Seconds(60));
  if (!created.ok()) return created.status();
  if (!Eventually([&] { return cluster->Ready(); }, absl::Seconds(30))) {
    return absl::DeadlineExceededError(
        absl::StrCat("RedisCluster: not ready; redis-cli said:\n", *created));
  }
  return cluster;
}

std::string RedisCluster::address(int i) const {
  return absl::StrCat("127.0.0.1:", ports_[i]);
}

std::vector<std::string> RedisCluster::addresses() const {
  std::vector<std::string> all;
  for (int i = 0; i < size(); ++i) all.push_back(address(i));
  return all;
}

RedisServer* RedisCluster::Living() {
  for (const std::unique_ptr<RedisServer>& node : nodes_) {
    if (node->pid() != 0 && !node->paused()) return node.get();
  }
  return nullptr;
}

bool RedisCluster::Ready() {
  for (const std::unique_ptr<RedisServer>& node : nodes_) {
    if (node->pid() == 0 || node->paused()) continue;
    if (!absl::StrContains(node->Command({"CLUSTER", "INFO"}).value_or(""),
                           "cluster_state:ok")) {
      return false;
    }
    const std::string nodes = node->Command({"CLUSTER", "NODES"}).value_or("");
    if (absl::StrContains(nodes, "handshake") ||
        ParseNodes(nodes).size() != nodes_.size()) {
      return false;
    }
    const std::string replication =
        node->Command({"INFO", "replication"}).value_or("");
    if (absl::StrContains(replication, "role:slave") &&
        !absl::StrContains(replication, "master_link_status:up")) {
      return false;
    }
  }
  return true;
}

int RedisCluster::MasterOf(int slot) {
  RedisServer* living = Living();
  if (living == nullptr) return -1;
  for (const NodeLine& line :
       ParseNodes(living->Command({"CLUSTER", "NODES"}).value_or(""))) {
    if (!line.master || line.failed) continue;
    for (const auto& [first, last] : line.slots) {
      if (slot < first || slot > last) continue;
      for (int i = 0; i < size(); ++i) {
        if (ports_[i] == line.port) return i;
      }
    }
  }
  return -1;
}

int RedisCluster::SlotOf(const std::string& key) {
  RedisServer* living = Living();
  int slot = -1;
  if (living == nullptr ||
      !absl::SimpleAtoi(
          living->Command({"CLUSTER", "KEYSLOT", key}).value_or(""), &slot)) {
    return -1;
  }
  return slot;
}

std::string RedisCluster::IdOf(int i) {
  return nodes_[i]->Command({"CLUSTER", "MYID"}).value_or("");
}

int RedisCluster::WaitForMasterOtherThan(int dead, int slot,
                                         absl::Duration timeout) {
  int master = -1;
  const bool moved = Eventually(
      [&] {
        master = MasterOf(slot);
        return master >= 0 && master != dead && Ready();
      },
      timeout);
  return moved ? master : -1;
}

absl::Status RedisCluster::Reshard(int from, int to, int slots) {
  absl::StatusOr<std::string> done =
      RedisCli({"--cluster", "reshard", address(to), "--cluster-from",
                IdOf(from), "--cluster-to", IdOf(to), "--cluster-slots",
                absl::StrCat(slots), "--cluster-yes"},
               absl::Seconds(120));
  if (!done.ok()) return done.status();
  if (!Eventually([&] { return Ready(); }, absl::Seconds(30))) {
    return absl::DeadlineExceededError("RedisCluster: not ready after reshard");
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> RedisCluster::RedisCli(
    const std::vector<std::string>& args, absl::Duration timeout) {
  std::vector<std::string> argv = {"redis-cli"};
  argv.insert(argv.end(), args.begin(), args.end());
  absl::StatusOr<std::unique_ptr<ChildProcess>> cli = ChildProcess::Start(argv);
  if (!cli.ok()) return cli.status();
  const absl::Time give_up = absl::Now() + timeout;
  std::string output;
  while (true) {
    absl::StatusOr<std::string> line = (*cli)->ReadLine(give_up - absl::Now());
    if (absl::IsOutOfRange(line.status())) break;  // It exited.
    if (!line.ok()) {
      return absl::DeadlineExceededError(
          absl::StrCat("redis-cli ", absl::StrJoin(args, " "),
                       " did not finish; it said:\n", output));
    }
    absl::StrAppend(&output, *line, "\n");
  }
  if (absl::StrContains(output, "[ERR]")) {
    return absl::UnknownError(absl::StrCat(
        "redis-cli ", absl::StrJoin(args, " "), " failed:\n", output));
  }
  return output;
}

}  // namespace paddock::testing
