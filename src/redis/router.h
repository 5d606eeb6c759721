// File: src/redis/router.h
// -----------------------------------------------------------------------------
// `RedisRouter`: sends each of the tier's calls to the node that serves its
// key. On one server (or the master Sentinel names) that is the one client;
// in Cluster mode it is the master of the key's slot, with a client (a pool
// and a circuit breaker) per node, so that a failing node opens the breaker
// for its own slots only. A MOVED reply updates the slot and retries on the
// node it names, an ASK reply retries once with ASKING, both within the
// call's I/O timeout; a MOVED or a failing node also asks a background
// thread to read the whole map again (CLUSTER SLOTS), at most every 100 ms.

#ifndef PADDOCK_SRC_REDIS_ROUTER_H_
#define PADDOCK_SRC_REDIS_ROUTER_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "paddock/redis.h"
#include "redis/address.h"
#include "redis/client.h"
#include "redis/cluster_map.h"
#include "redis/connection.h"
#include "redis/scripts.h"

namespace paddock::internal {

struct RedisRouterConfig {
  // The client of the one server; in Cluster mode the model of each node's
  // (its endpoint's address aside).
  RedisClientConfig client;
  // Set: Cluster mode, with these seeds.
  std::vector<RedisAddress> cluster_seeds;
};

class RedisRouter {
 public:
  // RedisRouter::Connect()
  //
  // One server: connects its client (RedisClient::Connect). Cluster mode:
  // reads the slot map from the first seed (or known node) that answers
  // CLUSTER SLOTS, connects the first master that answers, which loads the
  // scripts, and starts the refresh thread; other nodes connect at their
  // first call. Returns the connect's error; in Cluster mode
  // `absl::UnavailableError` naming each seed's answer when none gives a
  // map (or Unauthenticated / PermissionDenied when one refuses the user).
  // Throws std::system_error if the thread cannot start.
  static absl::StatusOr<std::unique_ptr<RedisRouter>> Connect(
      RedisRouterConfig config);

  // Stops the refresh thread.
  ~RedisRouter();
  RedisRouter(const RedisRouter&) = delete;
  RedisRouter& operator=(const RedisRouter&) = delete;

  // RedisRouter::Eval()
  //
  // RedisClient::Eval on the node serving `keys[0]` (all `keys` must share
  // its slot), following redirects; `maybe_ran` as CallReport's. Blocks for
  // at most the I/O timeout. Thread-safe.
  absl::StatusOr<RedisReplyPtr> Eval(Script script,
                                     absl::Span<const std::string_view> keys,
                                     absl::Span<const std::string_view> args,
                                     bool* maybe_ran = nullptr);

  // RedisRouter::Command()
  //
  // One plain command about `key`, like Eval, giving up at `deadline` if
  // that comes before the I/O timeout.
  absl::StatusOr<RedisReplyPtr> Command(std::string_view key,
                                        absl::Span<const std::string_view> args,
                                        absl::Time deadline);

  // RedisRouter::Reconnect()
  //
  // Closes every pooled connection (RedisClient::Reconnect). Never blocks on
  // I/O.
  void Reconnect() ABSL_LOCKS_EXCLUDED(mu_);

  // Counts a reply that the caller could not parse.
  void CountBadReply() { bad_replies_.fetch_add(1, std::memory_order_relaxed); }

  // Adds the counters of every node's client and the router's own (calls,
  // failures, timeouts, breaker, script loads, bad replies, redirects, slot
  // map reads) to `stats`; leaves the tier's own fields alone.
  void AddStats(RedisTierStats& stats) const ABSL_LOCKS_EXCLUDED(mu_);

  // Cluster mode: the slot map, also the change subscription's source of
  // nodes. nullptr on one server.
  const std::shared_ptr<ClusterMap>& cluster_map() const { return map_; }

 private:
  explicit RedisRouter(RedisRouterConfig config);

  // `run(client, spec, report)` on the node of `key`'s slot, again on the
  // node a redirect names, a few times at most.
  template <typename Run>
  absl::StatusOr<RedisReplyPtr> Route(std::string_view key, const Run& run,
                                      absl::Time deadline, bool* maybe_ran);
  // The client of `node`, made at the first call there.
  RedisClient& ClientOf(const RedisAddress& node) ABSL_LOCKS_EXCLUDED(mu_);
  RedisClientConfig ConfigOf(const RedisAddress& node) const;
  // Connect's first client: of the first master that connects.
  absl::Status ConnectFirstMaster() ABSL_LOCKS_EXCLUDED(mu_);

  // Reads CLUSTER SLOTS from the first node that answers before `deadline`
  // into the map.
  absl::Status Refresh(absl::Time deadline);
  void RequestRefresh() ABSL_LOCKS_EXCLUDED(refresh_mu_);
  void RefreshLoop() ABSL_LOCKS_EXCLUDED(refresh_mu_);

  const RedisRouterConfig config_;
  // One server.
  std::unique_ptr<RedisClient> single_;
  // Cluster mode.
  std::shared_ptr<ClusterMap> map_;
  mutable absl::Mutex mu_;
  // By address text; never removed (a cluster has few nodes).
  absl::flat_hash_map<std::string, std::unique_ptr<RedisClient>> nodes_
      ABSL_GUARDED_BY(mu_);
  // The client whose Connect loaded the scripts: others copy their SHA1s.
  const RedisClient* first_ ABSL_GUARDED_BY(mu_) = nullptr;

  std::atomic<uint64_t> bad_replies_{0};
  std::atomic<uint64_t> redirects_{0};
  std::atomic<uint64_t> refreshes_{0};

  absl::Mutex refresh_mu_;
  absl::CondVar refresh_cv_;
  bool refresh_wanted_ ABSL_GUARDED_BY(refresh_mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(refresh_mu_) = false;
  std::thread refresher_;
};

}  // namespace paddock::internal

#endif  // PADDOCK_SRC_REDIS_ROUTER_H_
