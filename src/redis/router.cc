// RedisRouter: one server, or the nodes of a Redis Cluster by slot.

#include "redis/router.h"

#include <hiredis/hiredis.h>

#include <algorithm>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "paddock/clock.h"

namespace paddock::internal {
namespace {

// Redirects one call follows: a slot moves once in a migration (MOVED, or
// ASK then MOVED once it is done), and a stale map may be wrong once more.
constexpr int kMaxRedirects = 4;
// The first pause before a call that got TRYAGAIN is sent again.
constexpr absl::Duration kTryAgainAfter = absl::Milliseconds(5);
// Refreshes of the map at most this often, however many calls ask.
constexpr absl::Duration kRefreshEvery = absl::Milliseconds(100);

}  // namespace

RedisRouter::RedisRouter(RedisRouterConfig config)
    : config_(std::move(config)) {}

RedisRouter::~RedisRouter() {
  {
    absl::MutexLock lock(&refresh_mu_);
    stopping_ = true;
    refresh_cv_.Signal();
  }
  if (refresher_.joinable()) refresher_.join();
}

absl::StatusOr<std::unique_ptr<RedisRouter>> RedisRouter::Connect(
    RedisRouterConfig config) {
  std::unique_ptr<RedisRouter> router(new RedisRouter(std::move(config)));
  if (router->config_.cluster_seeds.empty()) {
    absl::StatusOr<std::unique_ptr<RedisClient>> client =
        RedisClient::Connect(router->config_.client);
    if (!client.ok()) return client.status();
    router->single_ = *std::move(client);
    return router;
  }
  router->map_ = std::make_shared<ClusterMap>(router->config_.cluster_seeds);
  const RedisClientConfig& c = router->config_.client;
  if (absl::Status read =
          router->Refresh(MonotonicNow() + c.connect_timeout + c.io_timeout);
      !read.ok()) {
    return read;
  }
  if (absl::Status connected = router->ConnectFirstMaster(); !connected.ok()) {
    return connected;
  }
  RedisRouter* r = router.get();
  router->refresher_ = std::thread([r] { r->RefreshLoop(); });
  return router;
}

RedisClientConfig RedisRouter::ConfigOf(const RedisAddress& node) const {
  RedisClientConfig config = config_.client;
  config.endpoint.address = node;
  config.endpoint.source = nullptr;
  return config;
}

absl::Status RedisRouter::ConnectFirstMaster() {
  const std::vector<RedisAddress> masters = map_->masters();
  if (masters.empty()) {
    return absl::UnavailableError(absl::StrCat(
        "paddock::RedisTier: ", config_.client.endpoint.address.text,
        ": CLUSTER SLOTS names no master serving any slot"));
  }
  absl::Status first_error;
  for (const RedisAddress& master : masters) {
    absl::StatusOr<std::unique_ptr<RedisClient>> client =
        RedisClient::Connect(ConfigOf(master));
    if (client.ok()) {
      absl::MutexLock lock(&mu_);
      first_ = client->get();
      nodes_[master.text] = *std::move(client);
      return absl::OkStatus();
    }
    // A wrong password or ACL is wrong on every node.
    if (absl::IsUnauthenticated(client.status()) ||
        absl::IsPermissionDenied(client.status())) {
      return client.status();
    }
    if (first_error.ok()) first_error = client.status();
  }
  return first_error;
}

RedisClient& RedisRouter::ClientOf(const RedisAddress& node) {
  absl::MutexLock lock(&mu_);
  std::unique_ptr<RedisClient>& client = nodes_[node.text];
  if (client == nullptr) {
    client = RedisClient::Unconnected(ConfigOf(node), *first_);
  }
  return *client;
}

template <typename Run>
absl::StatusOr<RedisReplyPtr> RedisRouter::Route(std::string_view key,
                                                 const Run& run,
                                                 absl::Time deadline,
                                                 bool* maybe_ran) {
  CallReport report;
  if (single_ != nullptr) {
    absl::StatusOr<RedisReplyPtr> reply =
        run(*single_, CallSpec{.deadline = deadline}, report);
    if (maybe_ran != nullptr) *maybe_ran = report.maybe_ran;
    return reply;
  }
  // The deadline of the call, all its hops together.
  deadline = std::min(deadline, MonotonicNow() + config_.client.io_timeout);
  const int slot = KeySlot(key);
  std::optional<RedisAddress> node = map_->MasterOf(slot);
  bool asking = false;
  for (int hop = 0;; ++hop) {
    if (!node.has_value()) {
      RequestRefresh();
      return absl::UnavailableError(absl::StrCat(
          "paddock::RedisTier: ", config_.client.endpoint.address.text,
          ": no node is known to serve slot ", slot,
          " (the cluster map is being read again)"));
    }
    absl::StatusOr<RedisReplyPtr> reply =
        run(ClientOf(*node), CallSpec{.deadline = deadline, .asking = asking},
            report);
    if (maybe_ran != nullptr) *maybe_ran = report.maybe_ran;
    if (report.server_failed) RequestRefresh();
    if (hop == kMaxRedirects) return reply;
    if (report.try_again) {
      // A migration moves a slot's keys in milliseconds: ask again soon,
      // if that fits before the deadline.
      const absl::Duration pause = kTryAgainAfter * (hop + 1);
      if (MonotonicNow() + pause >= deadline) return reply;
      absl::SleepFor(pause);
      continue;
    }
    const Redirect& redirect = report.redirect;
    if (redirect.kind == Redirect::Kind::kNone) return reply;
    redirects_.fetch_add(1, std::memory_order_relaxed);
    asking = redirect.kind == Redirect::Kind::kAsk;
    if (!asking) {
      map_->Moved(redirect.slot, redirect.to);
      RequestRefresh();  // A slot moved: others may have too.
    }
    node = redirect.to;
  }
}

absl::StatusOr<RedisReplyPtr> RedisRouter::Eval(
    Script script, absl::Span<const std::string_view> keys,
    absl::Span<const std::string_view> args, bool* maybe_ran) {
  return Route(
      keys.empty() ? std::string_view() : keys[0],
      [&](RedisClient& client, const CallSpec& spec, CallReport& report) {
        return client.Eval(script, keys, args, spec, &report);
      },
      absl::InfiniteFuture(), maybe_ran);
}

absl::StatusOr<RedisReplyPtr> RedisRouter::Command(
    std::string_view key, absl::Span<const std::string_view> args,
    absl::Time deadline) {
  return Route(
      key,
      [&](RedisClient& client, const CallSpec& spec, CallReport& report) {
        return client.Command(args, spec, &report);
      },
      deadline, nullptr);
}

absl::Status RedisRouter::Refresh(absl::Time deadline) {
  std::vector<std::string> errors;
  absl::StatusCode code = absl::StatusCode::kUnavailable;
  for (const RedisAddress& node : map_->Candidates()) {
    const absl::Duration left = deadline - MonotonicNow();
    if (left <= absl::ZeroDuration()) break;
    RedisEndpoint endpoint = config_.client.endpoint;
    endpoint.address = node;
    endpoint.source = nullptr;
    absl::StatusOr<std::unique_ptr<RedisConnection>> connection =
        RedisConnection::Open(endpoint,
                              std::min(left, config_.client.connect_timeout));
    absl::StatusOr<std::vector<SlotRange>> ranges =
        absl::UnknownError("not asked");
    if (!connection.ok()) {
      ranges = connection.status();
    } else {
      const std::string_view args[] = {"CLUSTER", "SLOTS"};
      absl::StatusOr<RedisReplyPtr> reply =
          (*connection)->Command(args, deadline);
      if (!reply.ok()) {
        ranges = reply.status();
      } else if ((*reply)->type == REDIS_REPLY_ERROR) {
        ranges = RedisErrorReply(node, **reply);
      } else {
        ranges = ParseClusterSlots(**reply, node.host);
      }
    }
    if (ranges.ok()) {
      map_->Update(*ranges);
      refreshes_.fetch_add(1, std::memory_order_relaxed);
      return absl::OkStatus();
    }
    // A refused user is refused by every node: say so rather than
    // "unavailable".
    if (absl::IsUnauthenticated(ranges.status()) ||
        absl::IsPermissionDenied(ranges.status())) {
      code = ranges.status().code();
    }
    errors.push_back(std::string(ranges.status().message()));
  }
  return absl::Status(
      code, absl::StrCat("paddock::RedisTier: no cluster node gave its slot "
                         "map (CLUSTER SLOTS): ",
                         errors.empty() ? std::string("no time left")
                                        : absl::StrJoin(errors, "; ")));
}

void RedisRouter::RequestRefresh() {
  absl::MutexLock lock(&refresh_mu_);
  refresh_wanted_ = true;
  refresh_cv_.Signal();
}

void RedisRouter::RefreshLoop() {
  const RedisClientConfig& c = config_.client;
  while (true) {
    {
      absl::MutexLock lock(&refresh_mu_);
      while (!refresh_wanted_ && !stopping_) refresh_cv_.Wait(&refresh_mu_);
      if (stopping_) return;
      refresh_wanted_ = false;
    }
    (void)Refresh(MonotonicNow() + c.connect_timeout + c.io_timeout);
    absl::MutexLock lock(&refresh_mu_);
    const absl::Time until = absl::Now() + kRefreshEvery;
    while (!stopping_ && !refresh_cv_.WaitWithDeadline(&refresh_mu_, until)) {
    }
    if (stopping_) return;
  }
}

void RedisRouter::Reconnect() {
  if (single_ != nullptr) {
    single_->Reconnect();
    return;
  }
  absl::MutexLock lock(&mu_);
  for (auto& [address, client] : nodes_) client->Reconnect();
}

void RedisRouter::AddStats(RedisTierStats& stats) const {
  const auto add = [&stats](const RedisClient& client) {
    const RedisClientCounters& c = client.counters();
    stats.calls += c.calls.load(std::memory_order_relaxed);
    stats.failures += c.failures.load(std::memory_order_relaxed);
    stats.timeouts += c.timeouts.load(std::memory_order_relaxed);
    stats.script_loads += c.script_loads.load(std::memory_order_relaxed);
    stats.bad_replies += c.bad_replies.load(std::memory_order_relaxed);
    stats.breaker_rejections += client.breaker().rejections();
    stats.breaker_opens += client.breaker().opens();
  };
  if (single_ != nullptr) {
    add(*single_);
  } else {
    absl::MutexLock lock(&mu_);
    for (const auto& [address, client] : nodes_) add(*client);
  }
  stats.bad_replies += bad_replies_.load(std::memory_order_relaxed);
  stats.redirects += redirects_.load(std::memory_order_relaxed);
  stats.slot_map_refreshes += refreshes_.load(std::memory_order_relaxed);
}

}  // namespace paddock::internal
