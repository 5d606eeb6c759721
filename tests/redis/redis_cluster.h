// File: tests/redis/redis_cluster.h
// -----------------------------------------------------------------------------
// `paddock::testing::RedisCluster`: a real Redis Cluster for one test, of
// redis-servers (redis_server.h) on loopback ports the test picks, joined
// with `redis-cli --cluster create ... --cluster-replicas 1`. Start() returns
// once every node says `cluster_state:ok` and every replica has synced. The
// test can kill or pause a node, wait for a replica's promotion, and move
// slots between masters (`redis-cli --cluster reshard`). Destroying it stops
// every node. Drive it from the test's main thread.

#ifndef PADDOCK_TESTS_REDIS_REDIS_CLUSTER_H_
#define PADDOCK_TESTS_REDIS_REDIS_CLUSTER_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "redis_server.h"

namespace paddock::testing {

class RedisCluster {
 public:
  struct Options {
    int masters = 3;
    int replicas_per_master = 1;
    // cluster-node-timeout: how long a node may be silent before its
    // replica takes over.
    absl::Duration node_timeout = absl::Milliseconds(1000);
    // More arguments for every node (e.g. TLS).
    std::vector<std::string> extra_args;
  };

  // RedisCluster::Start()
  //
  // Starts the nodes, creates the cluster and waits until it serves every
  // slot. Returns an error with redis-cli's output if it does not.
  static absl::StatusOr<std::unique_ptr<RedisCluster>> Start(Options options);
  static absl::StatusOr<std::unique_ptr<RedisCluster>> Start() {
    return Start(Options());
  }

  RedisCluster(const RedisCluster&) = delete;
  RedisCluster& operator=(const RedisCluster&) = delete;
  ~RedisCluster() = default;

  // "127.0.0.1:<port>" of every node: `RedisOptions::cluster_nodes`.
  std::vector<std::string> addresses() const;
  // "127.0.0.1:<port>" of node `i`.
  std::string address(int i) const;
  int size() const { return static_cast<int>(nodes_.size()); }
  RedisServer& node(int i) { return *nodes_[i]; }

  // RedisCluster::MasterOf()
  //
  // The index of the node serving `slot` as master according to a living
  // node's CLUSTER SLOTS, or -1.
  int MasterOf(int slot);
  // The slot of `key` (CLUSTER KEYSLOT, asked of a living node), or -1.
  int SlotOf(const std::string& key);
  // Node `i`'s id (CLUSTER MYID).
  std::string IdOf(int i);

  // RedisCluster::WaitForMaster()
  //
  // Waits until every living node names a master other than `dead` for
  // `slot` and says cluster_state:ok; returns that master's index, or -1
  // after `timeout`.
  int WaitForMasterOtherThan(int dead, int slot, absl::Duration timeout);

  // RedisCluster::Reshard()
  //
  // Moves `slots` slots from master `from` to master `to` with redis-cli
  // (key by key, MIGRATE: calls meanwhile get ASK and MOVED). Blocks until
  // done.
  absl::Status Reshard(int from, int to, int slots);

 private:
  explicit RedisCluster(Options options) : options_(std::move(options)) {}

  // `redis-cli` with `args`; its output, or an error holding it.
  absl::StatusOr<std::string> RedisCli(const std::vector<std::string>& args,
                                       absl::Duration timeout);
  // Whether every living node says cluster_state:ok and knows `nodes_`.
  bool Ready();
  // A node that runs, for questions about the cluster.
  RedisServer* Living();

  const Options options_;
  std::vector<int> ports_;
  std::vector<std::unique_ptr<RedisServer>> nodes_;
};

}  // namespace paddock::testing

#endif  // PADDOCK_TESTS_REDIS_REDIS_CLUSTER_H_
