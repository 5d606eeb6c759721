// RedisTier: the SharedTier operations on top of the client, the change feed
// and the lease keeper; and RedisOptions::Validate.

#include <hiredis/hiredis.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <new>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include "absl/random/random.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "paddock/redis.h"
#include "paddock/shared_tier.h"
#include "redis/address.h"
#include "redis/change_feed.h"
#include "redis/change_log.h"
#include "redis/client.h"
#include "redis/cluster_map.h"
#include "redis/connection.h"
#include "redis/endpoint.h"
#include "redis/lease_keeper.h"
#include "redis/protocol.h"
#include "redis/router.h"
#include "redis/scripts.h"
#include "redis/sentinel.h"
#include "redis/subscriber_hub.h"
#include "redis/tls.h"

namespace paddock {
namespace internal {

// Everything a RedisTier owns. Members are destroyed in reverse order: the
// threads (keeper, feed) stop before the client they call goes away. The
// feed's thread co-owns `log` and `hub`: a subscriber's callback may drop
// the last reference to the tier, destroying this on that thread, which
// carries on with them until the callback returns.
class RedisTierState {
 public:
  RedisTierState(const RedisOptions& options, std::unique_ptr<RedisRouter> c)
      : options(options),
        channel(ChangeChannel(options.key_prefix)),
        client(std::move(c)),
        log(std::make_shared<ChangeLog>()),
        hub(std::make_shared<SubscriberHub>()) {}

  const RedisOptions options;
  const std::string channel;
  std::atomic<uint64_t> bad_records{0};
  std::atomic<uint64_t> oversized_records{0};
  const std::unique_ptr<RedisRouter> client;
  const std::shared_ptr<ChangeLog> log;
  const std::shared_ptr<SubscriberHub> hub;
  std::unique_ptr<ChangeFeed> feed;
  std::unique_ptr<LeaseKeeper> keeper;
  // Sentinel mode; stopped first, since it uses `client` and `feed`.
  std::unique_ptr<SentinelWatch> watch;
};

}  // namespace internal

namespace {

using internal::ChangeKind;
using internal::ChangeLog;
using internal::RedisReplyPtr;
using internal::Script;

absl::Status Invalid(const char* field, const char* rule,
                     const std::string& got) {
  return absl::InvalidArgumentError(absl::StrCat(
      "paddock::RedisOptions: ", field, " must be ", rule, ", got ", got));
}

constexpr absl::Duration kMaxLeaseFor = absl::Hours(24);

absl::Status CheckDuration(const char* field, absl::Duration d) {
  if (d <= absl::ZeroDuration() || d == absl::InfiniteDuration()) {
    return Invalid(field, "> 0 and finite", absl::FormatDuration(d));
  }
  return absl::OkStatus();
}

// A lease token or a record version: the process id and 128 random bits, so
// that a forked child (which inherits this thread's generator) never repeats
// its parent's.
std::string NewUniqueId() {
  thread_local absl::BitGen bits;
  return absl::StrCat(
      absl::Hex(getpid()), ".",
      absl::Hex(absl::Uniform<uint64_t>(bits), absl::kZeroPad16),
      absl::Hex(absl::Uniform<uint64_t>(bits), absl::kZeroPad16));
}

// What this thread's last Lookup saw, for AwaitChange: the change-log
// sequence before it was sent, and the lease holder's token if another held
// it.
struct LastLookup {
  const void* tier = nullptr;
  size_t key_hash = 0;
  uint64_t since = 0;
  std::optional<std::string> holder;
};
thread_local LastLookup last_lookup;

size_t KeyHash(std::string_view key) {
  return std::hash<std::string_view>{}(key);
}

absl::StatusOr<int64_t> IntegerResult(internal::RedisRouter& client,
                                      absl::StatusOr<RedisReplyPtr> reply) {
  if (!reply.ok()) return reply.status();
  absl::StatusOr<int64_t> value = internal::ParseIntegerReply(**reply);
  if (!value.ok()) client.CountBadReply();
  return value;
}

// The lease keeper's extension of `key`'s lease held with `token` by
// `period`: whether it is still held.
absl::StatusOr<bool> ExtendLease(internal::RedisTierState& s,
                                 const std::string& key,
                                 const std::string& token,
                                 absl::Duration period) {
  const std::string lease_key = internal::LeaseKey(s.options.key_prefix, key);
  const std::string millis = internal::DurationToMillis(period);
  const std::string_view keys[] = {lease_key};
  const std::string_view args[] = {token, millis};
  absl::StatusOr<int64_t> held =
      IntegerResult(*s.client, s.client->Eval(Script::kExtend, keys, args));
  if (!held.ok()) return held.status();
  return *held == 1;
}

// Deletes the lease `token` holds on `key`, telling the fleet; returns
// whether `token` held it. `maybe_ran` as RedisClient::Eval's.
absl::StatusOr<bool> ReleaseLease(internal::RedisTierState& s,
                                  std::string_view key, std::string_view token,
                                  bool* maybe_ran = nullptr) {
  const std::string lease_key = internal::LeaseKey(s.options.key_prefix, key);
  const std::string message =
      internal::EncodeChangeMessage(ChangeKind::kRelease, 0, key);
  const std::string_view keys[] = {lease_key};
  const std::string_view args[] = {token, s.channel, message};
  absl::StatusOr<int64_t> released = IntegerResult(
      *s.client, s.client->Eval(Script::kRelease, keys, args, maybe_ran));
  if (!released.ok()) return released.status();
  if (*released == 1) s.log->Record(key);
  return *released == 1;
}

// RedisTier's methods never throw (SharedTier): an exception from a
// library under them (std::bad_alloc, out of memory) becomes a status,
// which callers take as a tier error. Call only inside a catch block. A
// status with a message allocates; the code alone does not.
absl::Status StatusOfCurrentException(const char* method) noexcept {
  absl::StatusCode code = absl::StatusCode::kInternal;
  const char* what = "an unexpected exception";
  try {
    throw;
  } catch (const std::bad_alloc&) {
    code = absl::StatusCode::kResourceExhausted;
    what = "out of memory";
  } catch (...) {
  }
  try {
    return absl::Status(
        code, absl::StrCat("paddock::RedisTier::", method, ": ", what));
  } catch (...) {
    return absl::Status(code, "");
  }
}

// Gives a lease back in the background, if memory allows; otherwise it
// lapses after lease_for, as a crashed holder's does.
void ReleaseSoonIfPossible(internal::RedisTierState& s, std::string_view key,
                           std::string_view token) noexcept {
  try {
    s.keeper->ReleaseSoon(std::string(key), std::string(token));
  } catch (...) {
  }
}

// RedisTier::Lookup's answer from the lookup script's `reply`: counts what
// the script found wrong and keeps a granted lease alive. Apart from Lookup
// so that each reads alone; what it throws, Lookup catches.
absl::StatusOr<SharedLookup> FinishLookup(internal::RedisTierState& s,
                                          std::string_view key,
                                          const std::string& token,
                                          absl::Duration hold_for,
                                          const redisReply& reply) {
  absl::StatusOr<internal::ParsedLookup> parsed =
      internal::ParseLookupReply(reply);
  if (!parsed.ok()) {
    s.client->CountBadReply();
    return parsed.status();
  }
  if (parsed->oversized_bytes.has_value()) {
    // Neither read nor leased over: an error, which a cache takes as a
    // miss to load here, as it would take a value it cannot decode.
    s.oversized_records.fetch_add(1, std::memory_order_relaxed);
    return absl::DataLossError(
        absl::StrCat("paddock::RedisTier: the record holds a value of ",
                     *parsed->oversized_bytes, " bytes, over max_value_bytes (",
                     s.options.max_value_bytes, "); not read"));
  }
  if (parsed->bad_record) s.bad_records.fetch_add(1, std::memory_order_relaxed);

  SharedLookup& lookup = parsed->lookup;
  switch (lookup.lease) {
    case SharedLookup::Lease::kGranted:
      lookup.lease_token = token;
      s.keeper->Hold(std::string(key), token, hold_for);
      break;
    case SharedLookup::Lease::kHeldElsewhere:
      last_lookup.holder = std::move(parsed->holder);
      break;
    case SharedLookup::Lease::kNotNeeded:
      break;
  }
  return std::move(lookup);
}

// Connect's check that the user's ACL lets the tier work: the ACL probe
// script (scripts.h) asks Redis whether each command the tier sends may run
// on its keys and channel. The scripts loaded already, so SCRIPT LOAD is
// allowed, and running the probe shows that EVALSHA and the keys are. A
// server before 7.0 cannot tell (no `redis.acl_check_cmd`): a refused
// command then shows up as the calls' PermissionDenied.
absl::Status CheckAcl(internal::RedisRouter& client,
                      const internal::RedisEndpoint& endpoint,
                      const RedisOptions& options) {
  constexpr std::string_view kProbeKey = "paddock:acl-probe";
  const std::string record_key =
      internal::RecordKey(options.key_prefix, kProbeKey);
  const std::string lease_key =
      internal::LeaseKey(options.key_prefix, kProbeKey);
  const std::string channel = internal::ChangeChannel(options.key_prefix);
  const std::string_view keys[] = {record_key, lease_key};
  const std::string_view args[] = {channel};
  absl::StatusOr<RedisReplyPtr> reply =
      client.Eval(Script::kAclProbe, keys, args);
  if (!reply.ok()) return reply.status();
  const redisReply& r = **reply;
  if (r.type == REDIS_REPLY_INTEGER) return absl::OkStatus();  // Before 7.0.
  if (r.type != REDIS_REPLY_ARRAY) {
    client.CountBadReply();
    return absl::DataLossError(
        absl::StrCat("paddock::RedisTier: ", endpoint.address.text,
                     ": the ACL probe returned no list"));
  }
  if (r.elements == 0) return absl::OkStatus();
  std::vector<std::string> refused;
  for (size_t i = 0; i < r.elements; ++i) {
    const redisReply* name = r.element[i];
    if (name->type != REDIS_REPLY_STRING) continue;
    std::string command(name->str, name->len);
    if (std::find(refused.begin(), refused.end(), command) == refused.end()) {
      refused.push_back(std::move(command));
    }
  }
  return absl::PermissionDeniedError(absl::StrCat(
      "paddock::RedisTier: ", endpoint.address.text, ": the ACL of ",
      endpoint.user_for_messages(), " refuses ", absl::StrJoin(refused, ", "),
      " on keys \"", options.key_prefix, "*\" and channel \"", channel,
      "\", which the tier needs (docs/fleet.md, \"Deploying\", lists the "
      "ACL)"));
}

// Validate's rules for `RedisOptions::tls`. Files named while TLS is off
// are refused rather than ignored: the tier would talk in the clear to a
// server its user meant to verify.
absl::Status CheckTls(const RedisTlsOptions& tls,
                      const internal::RedisAddress& address) {
  if (!tls.enabled) {
    for (const auto& [field, value] :
         {std::pair<const char*, const std::string&>{"tls.ca_file",
                                                     tls.ca_file},
          {"tls.cert_file", tls.cert_file},
          {"tls.key_file", tls.key_file},
          {"tls.server_name", tls.server_name}}) {
      if (!value.empty()) {
        return Invalid(field, "empty while tls.enabled is false",
                       absl::StrCat("\"", value, "\""));
      }
    }
    return absl::OkStatus();
  }
  if (address.is_unix()) {
    return Invalid("address", "a TCP address when tls.enabled is set",
                   absl::StrCat("\"", address.text, "\""));
  }
  if (tls.cert_file.empty() != tls.key_file.empty()) {
    return Invalid(tls.cert_file.empty() ? "tls.cert_file" : "tls.key_file",
                   "set with the other (a client certificate and its key)",
                   "an empty one");
  }
  return absl::OkStatus();
}

// Each of `addresses` (the field `field`) is "<host>:<port>".
absl::Status CheckTcpAddresses(const char* field,
                               const std::vector<std::string>& addresses) {
  for (const std::string& text : addresses) {
    absl::StatusOr<internal::RedisAddress> parsed =
        internal::ParseRedisAddress(text);
    if (!parsed.ok() || parsed->is_unix()) {
      return Invalid(field, "\"<host>:<port>\" each",
                     absl::StrCat("\"", text, "\""));
    }
  }
  return absl::OkStatus();
}

// Validate's rules for Sentinel mode: both fields or neither, and every
// sentinel a TCP address.
absl::Status CheckSentinels(const RedisOptions& options) {
  if (options.sentinels.empty() != options.master_name.empty()) {
    return options.sentinels.empty()
               ? Invalid("sentinels", "set when master_name is", "none")
               : Invalid("master_name", "set when sentinels are",
                         "an empty one");
  }
  return CheckTcpAddresses("sentinels", options.sentinels);
}

// Validate's rules for Cluster mode: TCP seeds, and not with Sentinel.
absl::Status CheckCluster(const RedisOptions& options) {
  if (!options.cluster_nodes.empty() && !options.sentinels.empty()) {
    return Invalid("cluster_nodes", "empty when sentinels are set",
                   absl::StrCat(options.cluster_nodes.size(), " nodes"));
  }
  return CheckTcpAddresses("cluster_nodes", options.cluster_nodes);
}

absl::StatusOr<std::vector<internal::RedisAddress>> ParseAddresses(
    const std::vector<std::string>& texts) {
  std::vector<internal::RedisAddress> addresses;
  for (const std::string& text : texts) {
    absl::StatusOr<internal::RedisAddress> parsed =
        internal::ParseRedisAddress(text);
    if (!parsed.ok()) return parsed.status();
    addresses.push_back(*std::move(parsed));
  }
  return addresses;
}

// Where the tier connects: `options.address`; in Sentinel mode the master
// that the sentinels name at each new connection; in Cluster mode the
// nodes of the slot map (the router's), the endpoint naming the cluster.
absl::StatusOr<internal::RedisEndpoint> MakeEndpoint(
    const RedisOptions& options) {
  if (!options.cluster_nodes.empty()) {
    internal::RedisEndpoint endpoint;
    endpoint.address.text = absl::StrCat(
        "cluster (", absl::StrJoin(options.cluster_nodes, ", "), ")");
    return endpoint;
  }
  if (options.sentinels.empty()) {
    absl::StatusOr<internal::RedisAddress> address =
        internal::ParseRedisAddress(options.address);
    if (!address.ok()) return address.status();
    return internal::RedisEndpoint{.address = *std::move(address)};
  }
  absl::StatusOr<std::vector<internal::RedisAddress>> sentinels =
      ParseAddresses(options.sentinels);
  if (!sentinels.ok()) return sentinels.status();
  auto locator = std::make_shared<internal::MasterLocator>(
      *std::move(sentinels), options.master_name);
  internal::RedisEndpoint endpoint;
  endpoint.address.text = locator->description();
  endpoint.source = std::move(locator);
  return endpoint;
}

// The endpoint `options` name (they passed Validate): who the tier is, and
// the TLS context loaded once for every connection of the tier.
absl::StatusOr<internal::RedisEndpoint> MakeAuthenticatedEndpoint(
    const RedisOptions& options) {
  absl::StatusOr<internal::RedisEndpoint> made = MakeEndpoint(options);
  if (!made.ok()) return made.status();
  internal::RedisEndpoint endpoint = *std::move(made);
  endpoint.username = options.username;
  endpoint.password = options.password;
  if (options.tls.enabled) {
    absl::StatusOr<std::shared_ptr<const internal::TlsContext>> tls =
        internal::TlsContext::Create(options.tls);
    if (!tls.ok()) return tls.status();
    endpoint.tls = *std::move(tls);
  }
  return endpoint;
}

// Subscribes `s` to its change channel, where `endpoint` says; in Cluster
// mode on any node, since PUBLISH reaches every node of a cluster.
absl::Status StartChangeFeed(internal::RedisTierState& s,
                             const internal::RedisEndpoint& endpoint,
                             const RedisOptions& options) {
  internal::RedisEndpoint feed_endpoint = endpoint;
  if (s.client->cluster_map() != nullptr) {
    feed_endpoint.source = s.client->cluster_map();
  }
  s.feed = std::make_unique<internal::ChangeFeed>(
      internal::ChangeFeedConfig{
          .endpoint = std::move(feed_endpoint),
          .channel = s.channel,
          .connect_timeout = options.connect_timeout,
          .io_timeout = options.io_timeout,
          .health_check_interval = options.health_check_interval,
      },
      s.log, s.hub);
  return s.feed->Start();
}

}  // namespace

absl::Status RedisOptions::Validate() const {
  // `address` is where the tier connects only outside Sentinel and Cluster
  // mode; there, it is not used, and what TLS is checked against is TCP.
  internal::RedisAddress connects_to;
  if (sentinels.empty() && cluster_nodes.empty()) {
    absl::StatusOr<internal::RedisAddress> parsed =
        internal::ParseRedisAddress(address);
    if (!parsed.ok()) return parsed.status();
    connects_to = *std::move(parsed);
  }
  if (absl::Status s = CheckTls(tls, connects_to); !s.ok()) return s;
  if (absl::Status s = CheckSentinels(*this); !s.ok()) return s;
  if (absl::Status s = CheckCluster(*this); !s.ok()) return s;
  if (!username.empty() && password.empty()) {
    return Invalid("password", "set when username is (a nopass user takes any)",
                   "an empty one");
  }
  if (key_prefix.find_first_of("{}") != std::string::npos) {
    return Invalid("key_prefix", "free of '{' and '}' (keys use hash tags)",
                   absl::StrCat("\"", key_prefix, "\""));
  }
  for (const auto& [field, d] :
       {std::pair<const char*, absl::Duration>{"io_timeout", io_timeout},
        {"connect_timeout", connect_timeout},
        {"lease_for", lease_for},
        {"breaker_cooldown", breaker_cooldown},
        {"poll_interval", poll_interval},
        {"health_check_interval", health_check_interval}}) {
    if (absl::Status s = CheckDuration(field, d); !s.ok()) return s;
  }
  // A lease is a PX in milliseconds: far below Redis's range, and a lease
  // longer than a day is a mistake (a dead holder would block its key).
  if (lease_for > kMaxLeaseFor) {
    return Invalid("lease_for", "at most 24h", absl::FormatDuration(lease_for));
  }
  if (max_value_bytes < 1) return Invalid("max_value_bytes", ">= 1", "0");
  if (pool_size < 1) {
    return Invalid("pool_size", ">= 1", absl::StrCat(pool_size));
  }
  if (breaker_failures < 1) {
    return Invalid("breaker_failures", ">= 1", absl::StrCat(breaker_failures));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<RedisTier>> RedisTier::Connect(
    const RedisOptions& options) {
  // The threads' creation is the one thing here that could throw.
  try {
    return ConnectOrThrow(options);
  } catch (const std::system_error& e) {
    return absl::ResourceExhaustedError(
        absl::StrCat("paddock::RedisTier: cannot start a thread: ", e.what()));
  }
}

absl::StatusOr<std::shared_ptr<RedisTier>> RedisTier::ConnectOrThrow(
    const RedisOptions& options) {
  if (absl::Status s = options.Validate(); !s.ok()) return s;
  absl::StatusOr<internal::RedisEndpoint> made =
      MakeAuthenticatedEndpoint(options);
  if (!made.ok()) return made.status();
  const internal::RedisEndpoint& endpoint = *made;

  absl::StatusOr<std::vector<internal::RedisAddress>> seeds =
      ParseAddresses(options.cluster_nodes);
  if (!seeds.ok()) return seeds.status();
  absl::StatusOr<std::unique_ptr<internal::RedisRouter>> client =
      internal::RedisRouter::Connect(internal::RedisRouterConfig{
          .client =
              internal::RedisClientConfig{
                  .endpoint = endpoint,
                  .io_timeout = options.io_timeout,
                  .connect_timeout = options.connect_timeout,
                  .pool_size = options.pool_size,
                  .breaker_failures = options.breaker_failures,
                  .breaker_cooldown = options.breaker_cooldown,
              },
          .cluster_seeds = *std::move(seeds),
      });
  if (!client.ok()) return client.status();
  if (absl::Status allowed = CheckAcl(**client, endpoint, options);
      !allowed.ok()) {
    return allowed;
  }

  auto state =
      std::make_unique<internal::RedisTierState>(options, *std::move(client));
  internal::RedisTierState* s = state.get();
  if (absl::Status started = StartChangeFeed(*s, endpoint, options);
      !started.ok()) {
    return started;
  }
  if (!options.sentinels.empty()) {
    // A failover the sentinels announce moves every connection at once.
    s->watch = std::make_unique<internal::SentinelWatch>(
        static_cast<internal::MasterLocator*>(endpoint.source.get()),
        options.connect_timeout, [s] {
          s->client->Reconnect();
          s->feed->Resubscribe();
        });
  }
  s->keeper = std::make_unique<internal::LeaseKeeper>(
      options.lease_for,
      [s](const std::string& key, const std::string& token,
          absl::Duration period) -> absl::StatusOr<bool> {
        return ExtendLease(*s, key, token, period);
      },
      [s](const std::string& key, const std::string& token)
          -> absl::StatusOr<bool> { return ReleaseLease(*s, key, token); });
  return std::shared_ptr<RedisTier>(new RedisTier(std::move(state)));
}

RedisTier::RedisTier(std::unique_ptr<internal::RedisTierState> state)
    : state_(std::move(state)) {}

RedisTier::~RedisTier() = default;

absl::StatusOr<SharedLookup> RedisTier::Lookup(std::string_view key,
                                               std::string_view have_version,
                                               absl::Duration hold_for) {
  internal::RedisTierState& s = *state_;
  std::string token;
  try {
    token = NewUniqueId();
    const std::string record_key =
        internal::RecordKey(s.options.key_prefix, key);
    const std::string lease_key = internal::LeaseKey(s.options.key_prefix, key);
    const std::string lease_ms =
        internal::DurationToMillis(s.options.lease_for);
    const std::string max_bytes = absl::StrCat(s.options.max_value_bytes);

    // Before sending: a change announced after this point wakes AwaitChange.
    last_lookup = LastLookup{.tier = this,
                             .key_hash = KeyHash(key),
                             .since = s.log->sequence(),
                             .holder = std::nullopt};

    const std::string_view keys[] = {record_key, lease_key};
    const std::string_view args[] = {have_version, token, lease_ms, max_bytes};
    bool maybe_ran = false;
    absl::StatusOr<RedisReplyPtr> reply =
        s.client->Eval(Script::kLookup, keys, args, &maybe_ran);
    if (!reply.ok()) {
      // Redis may have granted `token` the lease all the same: unless given
      // back, every process would wait lease_for for a load nobody runs.
      if (maybe_ran) s.keeper->ReleaseSoon(std::string(key), token);
      return reply.status();
    }
    return FinishLookup(s, key, token, hold_for, **reply);
  } catch (...) {
    // Redis may have granted `token` the lease before the exception (the
    // keeper took nothing: Hold is the last step that can throw).
    if (!token.empty()) ReleaseSoonIfPossible(s, key, token);
    return StatusOfCurrentException("Lookup");
  }
}

absl::StatusOr<bool> RedisTier::Fill(std::string_view key,
                                     std::string_view lease_token,
                                     const SharedFill& fill) {
  internal::RedisTierState& s = *state_;
  s.keeper->Forget(lease_token);
  try {
    const size_t bytes = internal::PayloadBytes(fill);
    if (bytes > s.options.max_value_bytes) {
      // Give the lease up, so that others need not wait for it to lapse.
      (void)Release(key, lease_token);
      return absl::InvalidArgumentError(absl::StrCat(
          "paddock::RedisTier: a fill of ", bytes,
          " bytes is over max_value_bytes (", s.options.max_value_bytes,
          "); stored nothing and released the lease"));
    }
    const std::string record_key =
        internal::RecordKey(s.options.key_prefix, key);
    const std::string lease_key = internal::LeaseKey(s.options.key_prefix, key);
    const std::string message =
        internal::EncodeChangeMessage(ChangeKind::kFill, 0, key);
    const std::vector<std::string> record = internal::RecordArgs(
        fill, fill.version.empty() ? NewUniqueId() : fill.version);

    const std::string_view keys[] = {record_key, lease_key};
    std::vector<std::string_view> args = {lease_token, s.channel, message};
    args.insert(args.end(), record.begin(), record.end());
    absl::StatusOr<int64_t> stored =
        IntegerResult(*s.client, s.client->Eval(Script::kFill, keys, args));
    if (!stored.ok()) {
      // The lease may still be held (the fill never ran, or failed in
      // Redis): give it back, so that others need not wait for it to lapse.
      s.keeper->ReleaseSoon(std::string(key), std::string(lease_token));
      return stored.status();
    }
    if (*stored == 1) s.log->Record(key);
    return *stored == 1;
  } catch (...) {
    ReleaseSoonIfPossible(s, key, lease_token);
    return StatusOfCurrentException("Fill");
  }
}

absl::Status RedisTier::Release(std::string_view key,
                                std::string_view lease_token) {
  internal::RedisTierState& s = *state_;
  s.keeper->Forget(lease_token);
  try {
    absl::StatusOr<bool> released = ReleaseLease(s, key, lease_token);
    if (!released.ok()) {
      s.keeper->ReleaseSoon(std::string(key), std::string(lease_token));
      return released.status();
    }
    return absl::OkStatus();
  } catch (...) {
    ReleaseSoonIfPossible(s, key, lease_token);
    return StatusOfCurrentException("Release");
  }
}

absl::Status RedisTier::Put(std::string_view key, const SharedFill& fill,
                            uint64_t origin) {
  internal::RedisTierState& s = *state_;
  try {
    const size_t bytes = internal::PayloadBytes(fill);
    if (bytes > s.options.max_value_bytes) {
      return absl::InvalidArgumentError(
          absl::StrCat("paddock::RedisTier: a put of ", bytes,
                       " bytes is over max_value_bytes (",
                       s.options.max_value_bytes, "); stored nothing"));
    }
    const std::string record_key =
        internal::RecordKey(s.options.key_prefix, key);
    const std::string lease_key = internal::LeaseKey(s.options.key_prefix, key);
    const std::string message =
        internal::EncodeChangeMessage(ChangeKind::kPut, origin, key);
    const std::vector<std::string> record = internal::RecordArgs(
        fill, fill.version.empty() ? NewUniqueId() : fill.version);

    const std::string_view keys[] = {record_key, lease_key};
    std::vector<std::string_view> args = {s.channel, message};
    args.insert(args.end(), record.begin(), record.end());
    // A Put that fails after it may have reached Redis may still land,
    // after writes sent later: its message must then reach `origin` too.
    const uint64_t since = s.feed->passed_over();
    bool maybe_ran = false;
    absl::StatusOr<int64_t> stored = IntegerResult(
        *s.client, s.client->Eval(Script::kPut, keys, args, &maybe_ran));
    if (!stored.ok()) {
      if (maybe_ran) s.feed->WriteMayLandLate(key, since);
      return stored.status();
    }
    s.log->Record(key);
    return absl::OkStatus();
  } catch (...) {
    return StatusOfCurrentException("Put");
  }
}

absl::Status RedisTier::Invalidate(std::string_view key, uint64_t origin) {
  internal::RedisTierState& s = *state_;
  try {
    const std::string record_key =
        internal::RecordKey(s.options.key_prefix, key);
    const std::string lease_key = internal::LeaseKey(s.options.key_prefix, key);
    const std::string message =
        internal::EncodeChangeMessage(ChangeKind::kInvalidate, origin, key);
    const std::string_view keys[] = {record_key, lease_key};
    const std::string_view args[] = {s.channel, message};
    const uint64_t since = s.feed->passed_over();  // As in Put.
    bool maybe_ran = false;
    absl::StatusOr<int64_t> deleted = IntegerResult(
        *s.client, s.client->Eval(Script::kInvalidate, keys, args, &maybe_ran));
    if (!deleted.ok()) {
      if (maybe_ran) s.feed->WriteMayLandLate(key, since);
      return deleted.status();
    }
    s.log->Record(key);
    return absl::OkStatus();
  } catch (...) {
    return StatusOfCurrentException("Invalidate");
  }
}

bool RedisTier::AwaitChange(std::string_view key, absl::Duration timeout) {
  try {
    return AwaitChangeOrThrow(key, timeout);
  } catch (...) {
    return false;  // As after a timeout: the caller asks again.
  }
}

bool RedisTier::AwaitChangeOrThrow(std::string_view key,
                                   absl::Duration timeout) {
  internal::RedisTierState& s = *state_;
  const absl::Time deadline =
      internal::MonotonicNow() + std::max(timeout, absl::ZeroDuration());
  const bool after_lookup =
      last_lookup.tier == this && last_lookup.key_hash == KeyHash(key);
  const uint64_t since = after_lookup ? last_lookup.since : s.log->sequence();
  // The lease holder we wait for, when known; polling compares with it.
  std::optional<std::string> holder =
      after_lookup ? last_lookup.holder : std::nullopt;
  const std::string lease_key = internal::LeaseKey(s.options.key_prefix, key);

  while (true) {
    switch (s.log->WaitForChange(key, since, deadline,
                                 /*return_if_disconnected=*/true)) {
      case ChangeLog::Wait::kChanged:
        return true;
      case ChangeLog::Wait::kTimedOut:
        return false;
      case ChangeLog::Wait::kDisconnected:
        break;
    }
    // No messages arrive: look at the lease itself, if a round trip fits
    // before the deadline (one cut short would count against the breaker).
    absl::StatusOr<RedisReplyPtr> reply =
        absl::DeadlineExceededError("no time left to poll");
    if (deadline - internal::MonotonicNow() >= s.options.io_timeout) {
      const std::string_view get[] = {"GET", lease_key};
      reply = s.client->Command(lease_key, get, deadline);
    }
    if (reply.ok()) {
      absl::StatusOr<std::optional<std::string>> lease =
          internal::ParseLeaseReply(**reply);
      if (lease.ok()) {
        if (!lease->has_value()) return true;  // Filled, released or lapsed.
        if (holder.has_value() && **lease != *holder) return true;
        holder = **lease;
      }
    }
    const absl::Time next_poll =
        std::min(deadline, internal::MonotonicNow() + s.options.poll_interval);
    if (s.log->WaitForChange(key, since, next_poll,
                             /*return_if_disconnected=*/false) ==
        ChangeLog::Wait::kChanged) {
      return true;
    }
    if (internal::MonotonicNow() >= deadline) return false;
  }
}

std::unique_ptr<SharedTier::Subscription> RedisTier::Subscribe(
    Subscriber* subscriber) {
  return state_->hub->Subscribe(subscriber);
}

size_t RedisTier::max_value_bytes() const {
  return state_->options.max_value_bytes;
}

bool RedisTier::subscribed() const { return state_->log->connected(); }

const RedisOptions& RedisTier::options() const { return state_->options; }

RedisTierStats RedisTier::stats() const {
  const internal::RedisTierState& s = *state_;
  RedisTierStats stats;
  s.client->AddStats(stats);
  stats.bad_records = s.bad_records.load(std::memory_order_relaxed);
  stats.oversized_records = s.oversized_records.load(std::memory_order_relaxed);
  stats.leases_extended = s.keeper->extensions();
  stats.leases_given_back = s.keeper->released();
  stats.subscription_losses = s.feed->losses();
  stats.notifications = s.feed->messages();
  return stats;
}

}  // namespace paddock
