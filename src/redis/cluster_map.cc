// ClusterMap, key slots, and the parsing of CLUSTER SLOTS and redirects.

#include "redis/cluster_map.h"

#include <hiredis/hiredis.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"

namespace paddock::internal {
namespace {

// CRC16-CCITT as XMODEM computes it (polynomial 0x1021, initial value 0, no
// reflection), a byte at a time from a table made at compile time.
constexpr std::array<uint16_t, 256> MakeCrc16Table() {
  std::array<uint16_t, 256> table{};
  for (int byte = 0; byte < 256; ++byte) {
    uint16_t crc = static_cast<uint16_t>(byte << 8);
    for (int bit = 0; bit < 8; ++bit) {
      crc = static_cast<uint16_t>((crc & 0x8000) != 0 ? (crc << 1) ^ 0x1021
                                                      : crc << 1);
    }
    table[byte] = crc;
  }
  return table;
}
constexpr std::array<uint16_t, 256> kCrc16Table = MakeCrc16Table();

uint16_t Crc16(std::string_view bytes) {
  uint16_t crc = 0;
  for (const char c : bytes) {
    const auto byte = static_cast<uint8_t>(c);
    crc = static_cast<uint16_t>((crc << 8) ^
                                kCrc16Table[((crc >> 8) ^ byte) & 0xff]);
  }
  return crc;
}

// A node of a CLUSTER SLOTS entry: {host, port, id, ...}; nullopt for one
// whose address is unknown ("?") or malformed.
std::optional<RedisAddress> NodeAddress(const redisReply& node,
                                        std::string_view asked_host) {
  if (node.type != REDIS_REPLY_ARRAY || node.elements < 2) return std::nullopt;
  const redisReply& host = *node.element[0];
  const redisReply& port = *node.element[1];
  if (host.type != REDIS_REPLY_STRING || port.type != REDIS_REPLY_INTEGER) {
    return std::nullopt;
  }
  absl::string_view name(host.str, host.len);
  if (name == "?") return std::nullopt;
  if (name.empty())
    name = absl::string_view(asked_host.data(), asked_host.size());
  absl::StatusOr<RedisAddress> address =
      TcpAddress(name, static_cast<int>(port.integer));
  if (!address.ok()) return std::nullopt;
  return *std::move(address);
}

}  // namespace

int KeySlot(std::string_view key) {
  const size_t open = key.find('{');
  if (open != std::string_view::npos) {
    const size_t close = key.find('}', open + 1);
    if (close != std::string_view::npos && close > open + 1) {
      key = key.substr(open + 1, close - open - 1);
    }
  }
  return Crc16(key) % kClusterSlots;
}

std::optional<Redirect> ParseRedirect(const redisReply& reply,
                                      std::string_view asked_host) {
  if (reply.type != REDIS_REPLY_ERROR || reply.str == nullptr) {
    return std::nullopt;
  }
  const std::vector<absl::string_view> parts =
      absl::StrSplit(absl::string_view(reply.str, reply.len), ' ');
  if (parts.size() != 3 || (parts[0] != "MOVED" && parts[0] != "ASK")) {
    return std::nullopt;
  }
  Redirect redirect;
  redirect.kind =
      parts[0] == "MOVED" ? Redirect::Kind::kMoved : Redirect::Kind::kAsk;
  const size_t colon = parts[2].rfind(':');
  int port = 0;
  if (!absl::SimpleAtoi(parts[1], &redirect.slot) || redirect.slot < 0 ||
      redirect.slot >= kClusterSlots || colon == absl::string_view::npos ||
      !absl::SimpleAtoi(parts[2].substr(colon + 1), &port)) {
    return std::nullopt;
  }
  absl::string_view host(parts[2].data(), colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  absl::StatusOr<RedisAddress> to = TcpAddress(
      host.empty() ? absl::string_view(asked_host.data(), asked_host.size())
                   : host,
      port);
  if (!to.ok()) return std::nullopt;
  redirect.to = *std::move(to);
  return redirect;
}

absl::StatusOr<std::vector<SlotRange>> ParseClusterSlots(
    const redisReply& reply, std::string_view asked_host) {
  const auto malformed = [] {
    return absl::DataLossError("CLUSTER SLOTS returned a malformed reply");
  };
  if (reply.type != REDIS_REPLY_ARRAY) return malformed();
  std::vector<SlotRange> ranges;
  for (size_t i = 0; i < reply.elements; ++i) {
    const redisReply& entry = *reply.element[i];
    if (entry.type != REDIS_REPLY_ARRAY || entry.elements < 3 ||
        entry.element[0]->type != REDIS_REPLY_INTEGER ||
        entry.element[1]->type != REDIS_REPLY_INTEGER) {
      return malformed();
    }
    SlotRange range;
    range.first = static_cast<int>(entry.element[0]->integer);
    range.last = static_cast<int>(entry.element[1]->integer);
    if (range.first < 0 || range.last < range.first ||
        range.last >= kClusterSlots) {
      return malformed();
    }
    std::optional<RedisAddress> master =
        NodeAddress(*entry.element[2], asked_host);
    if (!master.has_value()) continue;  // Served by a node of no address.
    range.master = *std::move(master);
    for (size_t r = 3; r < entry.elements; ++r) {
      std::optional<RedisAddress> replica =
          NodeAddress(*entry.element[r], asked_host);
      if (replica.has_value()) range.replicas.push_back(*std::move(replica));
    }
    ranges.push_back(std::move(range));
  }
  return ranges;
}

ClusterMap::ClusterMap(std::vector<RedisAddress> seeds)
    : seeds_(std::move(seeds)) {
  slots_.fill(-1);
}

std::optional<RedisAddress> ClusterMap::MasterOf(int slot) const {
  absl::ReaderMutexLock lock(&mu_);
  const int16_t node = slots_[slot];
  if (node < 0) return std::nullopt;
  return nodes_[node];
}

int16_t ClusterMap::NodeIndex(const RedisAddress& address) {
  for (size_t i = 0; i < nodes_.size(); ++i) {
    if (nodes_[i].text == address.text) return static_cast<int16_t>(i);
  }
  nodes_.push_back(address);
  return static_cast<int16_t>(nodes_.size() - 1);
}

void ClusterMap::Update(const std::vector<SlotRange>& ranges) {
  absl::MutexLock lock(&mu_);
  slots_.fill(-1);
  replicas_.clear();
  for (const SlotRange& range : ranges) {
    const int16_t node = NodeIndex(range.master);
    std::fill(slots_.begin() + range.first, slots_.begin() + range.last + 1,
              node);
    for (const RedisAddress& replica : range.replicas) {
      replicas_.push_back(replica);
    }
  }
}

void ClusterMap::Moved(int slot, const RedisAddress& to) {
  absl::MutexLock lock(&mu_);
  slots_[slot] = NodeIndex(to);
}

std::vector<RedisAddress> ClusterMap::CandidatesLocked() const {
  std::vector<RedisAddress> candidates;
  const auto add = [&](const RedisAddress& address) {
    for (const RedisAddress& known : candidates) {
      if (known.text == address.text) return;
    }
    candidates.push_back(address);
  };
  std::vector<bool> serving(nodes_.size(), false);
  for (const int16_t node : slots_) {
    if (node >= 0) serving[node] = true;
  }
  for (size_t i = 0; i < nodes_.size(); ++i) {
    if (serving[i]) add(nodes_[i]);
  }
  for (const RedisAddress& replica : replicas_) add(replica);
  for (const RedisAddress& seed : seeds_) add(seed);
  return candidates;
}

std::vector<RedisAddress> ClusterMap::Candidates() const {
  absl::ReaderMutexLock lock(&mu_);
  return CandidatesLocked();
}

std::vector<RedisAddress> ClusterMap::masters() const {
  absl::ReaderMutexLock lock(&mu_);
  std::vector<RedisAddress> masters;
  int16_t last = -1;
  std::vector<bool> seen(nodes_.size(), false);
  for (const int16_t node : slots_) {
    if (node < 0 || node == last || seen[node]) continue;
    seen[node] = true;
    last = node;
    masters.push_back(nodes_[node]);
  }
  return masters;
}

absl::StatusOr<RedisAddress> ClusterMap::Locate(absl::Time /*deadline*/) {
  absl::MutexLock lock(&mu_);
  const std::vector<RedisAddress> candidates = CandidatesLocked();
  // Never empty: there is at least one seed (RedisOptions::Validate).
  const RedisAddress& node = candidates[next_ % candidates.size()];
  located_ = node.text;
  return node;
}

void ClusterMap::Forget(std::string_view address_text) {
  absl::MutexLock lock(&mu_);
  if (address_text == located_) ++next_;
}

}  // namespace paddock::internal
