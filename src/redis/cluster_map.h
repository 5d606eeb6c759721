// File: src/redis/cluster_map.h
// -----------------------------------------------------------------------------
// Redis Cluster, as the tier sees it: which master serves each of the 16384
// hash slots (`ClusterMap`, from CLUSTER SLOTS and MOVED replies), the slot
// of a key, and the redirections a node answers with. A record and its
// lease share a hash tag (protocol.h), so every script call has one slot and
// goes to one node.

#ifndef PADDOCK_SRC_REDIS_CLUSTER_MAP_H_
#define PADDOCK_SRC_REDIS_CLUSTER_MAP_H_

#include <hiredis/hiredis.h>

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "redis/address.h"
#include "redis/endpoint.h"

namespace paddock::internal {

inline constexpr int kClusterSlots = 16384;

// The hash slot of `key`: CRC16 (XMODEM) of its hash tag, the bytes between
// the first '{' and the next '}' when there are any, else of the whole key;
// modulo 16384. As `CLUSTER KEYSLOT`.
int KeySlot(std::string_view key);

// A node's answer that `slot` is served elsewhere: MOVED (for good: the map
// is out of date) or ASK (during a migration: this one call, after ASKING).
struct Redirect {
  enum class Kind { kNone, kMoved, kAsk };
  Kind kind = Kind::kNone;
  int slot = -1;
  RedisAddress to;
};

// The redirect an error reply carries ("MOVED <slot> <host>:<port>", "ASK
// ..."); nullopt for any other reply. A node that does not know its own
// address names it ":<port>": the host is then `asked_host`.
std::optional<Redirect> ParseRedirect(const redisReply& reply,
                                      std::string_view asked_host);

// One entry of CLUSTER SLOTS.
struct SlotRange {
  int first = 0;
  int last = 0;
  RedisAddress master;
  std::vector<RedisAddress> replicas;
};

// CLUSTER SLOTS's reply, parsed; `absl::DataLossError` for one of another
// shape. A node listed with an empty host is on `asked_host`.
absl::StatusOr<std::vector<SlotRange>> ParseClusterSlots(
    const redisReply& reply, std::string_view asked_host);

// Where each slot is served, shared by the tier's calls (MasterOf), the
// refresh that reads CLUSTER SLOTS (Update), and the change subscription,
// which may listen on any node (AddressSource: PUBLISH reaches every node
// of a cluster). Thread-safe.
class ClusterMap final : public AddressSource {
 public:
  // `seeds`: the nodes named in `RedisOptions::cluster_nodes`, asked for
  // the map when no node it knows answers.
  explicit ClusterMap(std::vector<RedisAddress> seeds);
  ClusterMap(const ClusterMap&) = delete;
  ClusterMap& operator=(const ClusterMap&) = delete;

  // ClusterMap::MasterOf()
  //
  // The master serving `slot` as far as known, or nullopt when none is (no
  // map yet, or the slot is unassigned). Never blocks on I/O.
  std::optional<RedisAddress> MasterOf(int slot) const ABSL_LOCKS_EXCLUDED(mu_);

  // ClusterMap::Update()
  //
  // Replaces the map with what CLUSTER SLOTS said. Never blocks on I/O.
  void Update(const std::vector<SlotRange>& ranges) ABSL_LOCKS_EXCLUDED(mu_);

  // ClusterMap::Moved()
  //
  // `slot` is served by `to` now (a MOVED reply): calls go there before the
  // next Update. Never blocks on I/O.
  void Moved(int slot, const RedisAddress& to) ABSL_LOCKS_EXCLUDED(mu_);

  // ClusterMap::Candidates()
  //
  // Whom to ask for the map, in order: the known masters, their replicas,
  // then the seeds; each once.
  std::vector<RedisAddress> Candidates() const ABSL_LOCKS_EXCLUDED(mu_);

  // AddressSource: a node for the change subscription, starting with the
  // first candidate; each Forget of the node named last moves on to the
  // next candidate. Never blocks.
  absl::StatusOr<RedisAddress> Locate(absl::Time deadline) override
      ABSL_LOCKS_EXCLUDED(mu_);
  void Forget(std::string_view address_text) override ABSL_LOCKS_EXCLUDED(mu_);
  bool requires_master() const override { return false; }

  // The masters known now, in slot order.
  std::vector<RedisAddress> masters() const ABSL_LOCKS_EXCLUDED(mu_);
  const std::vector<RedisAddress>& seeds() const { return seeds_; }

 private:
  // The index of `address` in nodes_, added if new.
  int16_t NodeIndex(const RedisAddress& address)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::vector<RedisAddress> CandidatesLocked() const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);

  const std::vector<RedisAddress> seeds_;

  mutable absl::Mutex mu_;
  // Every master named so far; slots_ holds indices into it.
  std::vector<RedisAddress> nodes_ ABSL_GUARDED_BY(mu_);
  std::array<int16_t, kClusterSlots> slots_ ABSL_GUARDED_BY(mu_);
  // The replicas of the last Update.
  std::vector<RedisAddress> replicas_ ABSL_GUARDED_BY(mu_);
  // The change subscription's place in Candidates().
  size_t next_ ABSL_GUARDED_BY(mu_) = 0;
  std::string located_ ABSL_GUARDED_BY(mu_);
};

}  // namespace paddock::internal

#endif  // PADDOCK_SRC_REDIS_CLUSTER_MAP_H_
