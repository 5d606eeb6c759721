// The Redis tier's protocol without a server: key names, change messages,
// record arguments, and the parsing of replies, well formed or not. Replies
// are built from raw RESP text by hiredis's own reader.

#include "redis/protocol.h"

#include <hiredis/hiredis.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "redis/address.h"
#include "redis/cluster_map.h"
#include "redis/connection.h"

namespace paddock::internal {
namespace {

using ::testing::ElementsAre;
using Lease = SharedLookup::Lease;

// Parses RESP text into a reply; null if the text is not one whole reply.
RedisReplyPtr Reply(std::string_view resp) {
  redisReader* reader = redisReaderCreate();
  void* reply = nullptr;
  if (redisReaderFeed(reader, resp.data(), resp.size()) != REDIS_OK ||
      redisReaderGetReply(reader, &reply) != REDIS_OK) {
    reply = nullptr;
  }
  redisReaderFree(reader);
  return RedisReplyPtr(static_cast<redisReply*>(reply));
}

std::string Bulk(std::string_view s) {
  return absl::StrCat("$", s.size(), "\r\n", std::string(s), "\r\n");
}
constexpr std::string_view kNil = "$-1\r\n";
std::string Int(int64_t i) { return absl::StrCat(":", i, "\r\n"); }
std::string Array(const std::vector<std::string>& elements) {
  std::string out = absl::StrCat("*", elements.size(), "\r\n");
  for (const std::string& e : elements) out += e;
  return out;
}

// The hash tag Redis Cluster hashes: between the first '{' and the next
// '}', if not empty; else the whole key.
std::string HashTag(std::string_view key) {
  const size_t open = key.find('{');
  if (open == std::string_view::npos) return std::string(key);
  const size_t close = key.find('}', open + 1);
  if (close == std::string_view::npos || close == open + 1) {
    return std::string(key);
  }
  return std::string(key.substr(open + 1, close - open - 1));
}

// ---- Keys -------------------------------------------------------------------

TEST(KeysTest, RecordAndLeaseShareANonEmptyHashTag) {
  for (std::string_view key : std::vector<std::string_view>{
           "user:42", "", "{", "}", "{}", "a}b{c", "%", "%7B", "with space",
           std::string_view("nul\0byte", 8)}) {
    const std::string record = RecordKey("svc:v1:", key);
    const std::string lease = LeaseKey("svc:v1:", key);
    EXPECT_EQ(HashTag(record), HashTag(lease)) << key;
    EXPECT_NE(HashTag(record), record) << "no tag for " << key;
    EXPECT_EQ(record.substr(record.size() - 2), ":v");
    EXPECT_EQ(lease.substr(lease.size() - 2), ":l");
  }
  EXPECT_EQ(RecordKey("svc:v1:", "user:42"), "svc:v1:{user:42}:v");
  EXPECT_EQ(KeySlot(RecordKey("svc:v1:", "")),
            KeySlot(LeaseKey("svc:v1:", "")));
  EXPECT_EQ(LeaseKey("svc:v1:", "user:42"), "svc:v1:{user:42}:l");
  EXPECT_EQ(ChangeChannel("svc:v1:"), "svc:v1:changes");
}

TEST(KeysTest, EscapingIsInjective) {
  const std::vector<std::string> keys = {"",  "%",   "%25", "{",  "%7B",
                                         "}", "%7D", "a",   "a%", "%a"};
  for (size_t i = 0; i < keys.size(); ++i) {
    for (size_t j = i + 1; j < keys.size(); ++j) {
      EXPECT_NE(EscapeKey(keys[i]), EscapeKey(keys[j]))
          << keys[i] << " and " << keys[j];
    }
  }
  EXPECT_EQ(EscapeKey(""), "%");
  EXPECT_EQ(EscapeKey("a{b}%c"), "a%7Bb%7D%25c");
  EXPECT_EQ(EscapeKey("plain:key"), "plain:key");
}

// ---- Change messages --------------------------------------------------------

TEST(ChangeMessageTest, RoundTrips) {
  for (ChangeKind kind : {ChangeKind::kFill, ChangeKind::kPut,
                          ChangeKind::kInvalidate, ChangeKind::kRelease}) {
    for (uint64_t origin : {uint64_t{0}, uint64_t{42}, ~uint64_t{0}}) {
      for (std::string_view key : {"", "k", "a key with spaces", "x y z "}) {
        std::optional<ChangeMessage> message =
            ParseChangeMessage(EncodeChangeMessage(kind, origin, key));
        ASSERT_TRUE(message.has_value());
        EXPECT_EQ(message->kind, kind);
        EXPECT_EQ(message->origin, origin);
        EXPECT_EQ(message->key, key);
      }
    }
  }
  EXPECT_EQ(EncodeChangeMessage(ChangeKind::kPut, 7, "user:1"), "put 7 user:1");
}

TEST(ChangeMessageTest, RejectsAnythingElse) {
  for (std::string_view payload :
       {"", "put", "put 7", "put  k", "put x k", "put -1 k", "drop 7 k",
        "put 18446744073709551616 k", "PUT 7 k"}) {
    EXPECT_FALSE(ParseChangeMessage(payload).has_value()) << payload;
  }
}

// ---- Durations and records --------------------------------------------------

TEST(DurationsTest, TravelAsMicroseconds) {
  EXPECT_EQ(DurationToMicros(absl::Milliseconds(1500)), "1500000");
  EXPECT_EQ(DurationToMicros(-absl::Seconds(1)), "0");
  EXPECT_EQ(DurationToMicros(absl::InfiniteDuration()), "1000000000000000");
  EXPECT_EQ(MicrosToDuration(1500000), absl::Milliseconds(1500));
  EXPECT_EQ(MicrosToDuration(kForeverMicros), absl::InfiniteDuration());
  EXPECT_EQ(MicrosToDuration(-3), absl::ZeroDuration());
  EXPECT_EQ(DurationToMillis(absl::Microseconds(1)), "1");
  EXPECT_EQ(DurationToMillis(absl::Microseconds(1001)), "2");
  EXPECT_EQ(DurationToMillis(absl::Seconds(10)), "10000");
}

TEST(RecordArgsTest, DescribeAValue) {
  SharedFill fill;
  fill.value = std::string("v");
  fill.fresh_for = absl::Seconds(1);
  fill.keep_for = absl::Milliseconds(2500);
  fill.serve_on_error_for = absl::Seconds(3);
  fill.load_duration = absl::Microseconds(7);
  EXPECT_THAT(RecordArgs(fill, "ver"),
              ElementsAre("ver", "1000000", "2500000", "3000000", "7", "2500",
                          "value", "v", ""));
  EXPECT_EQ(RecordArgs(fill, "ver").size(), size_t{kRecordArgCount});
  EXPECT_EQ(PayloadBytes(fill), 1u);
}

TEST(RecordArgsTest, DescribeAnErrorAndTheExpiryCases) {
  SharedFill fill;
  fill.value = absl::NotFoundError("gone");
  fill.keep_for = absl::InfiniteDuration();
  EXPECT_THAT(RecordArgs(fill, "ver"),
              ElementsAre("ver", "0", "1000000000000000", "0", "0", "", "error",
                          "gone", "5"));
  EXPECT_EQ(PayloadBytes(fill), 4u);
  fill.keep_for = absl::ZeroDuration();
  EXPECT_EQ(RecordArgs(fill, "ver")[5], "0");  // Store nothing.
}

// ---- Lookup replies ---------------------------------------------------------

std::string RecordTail(const std::vector<std::string>& fields) {
  std::string out;
  for (const std::string& f : fields) out += f;
  return out;
}

TEST(LookupReplyTest, GrantedWithoutRecord) {
  RedisReplyPtr reply = Reply(Array({Int(1), Int(0), Bulk(""), Int(0)}));
  ASSERT_NE(reply, nullptr);
  absl::StatusOr<ParsedLookup> parsed = ParseLookupReply(*reply);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->lookup.lease, Lease::kGranted);
  EXPECT_FALSE(parsed->lookup.record.has_value());
  EXPECT_FALSE(parsed->bad_record);
}

TEST(LookupReplyTest, HeldElsewhereWithAValue) {
  RedisReplyPtr reply = Reply(Array(
      {Int(2), Int(1234), Bulk("holder-token"), Int(1), Bulk("ver"), Int(1500),
       Bulk("1000000"), Bulk("2000000"), Bulk("3000000"), Bulk("4"),
       Bulk("value bytes"), std::string(kNil), std::string(kNil)}));
  ASSERT_NE(reply, nullptr);
  absl::StatusOr<ParsedLookup> parsed = ParseLookupReply(*reply);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->lookup.lease, Lease::kHeldElsewhere);
  EXPECT_EQ(parsed->lookup.lease_remaining, absl::Milliseconds(1234));
  EXPECT_EQ(parsed->holder, "holder-token");
  EXPECT_TRUE(parsed->bad_record);
  ASSERT_TRUE(parsed->lookup.record.has_value());
  const SharedRecord& r = *parsed->lookup.record;
  EXPECT_EQ(r.value.value_or(""), "value bytes");
  EXPECT_EQ(r.version, "ver");
  EXPECT_EQ(r.age, absl::Microseconds(1500));
  EXPECT_EQ(r.fresh_for, absl::Seconds(1));
  EXPECT_EQ(r.keep_for, absl::Seconds(2));
  EXPECT_EQ(r.serve_on_error_for, absl::Seconds(3));
  EXPECT_EQ(r.load_duration, absl::Microseconds(4));
}

TEST(LookupReplyTest, NotNeededWithAnError) {
  RedisReplyPtr reply =
      Reply(Array({Int(0), Int(0), Bulk(""), Int(0), Bulk("ver"), Int(0),
                   Bulk("0"), Bulk("1000000000000000"), Bulk("0"), Bulk("0"),
                   std::string(kNil), Bulk("14"), Bulk("backend down")}));
  ASSERT_NE(reply, nullptr);
  absl::StatusOr<ParsedLookup> parsed = ParseLookupReply(*reply);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->lookup.lease, Lease::kNotNeeded);
  ASSERT_TRUE(parsed->lookup.record.has_value());
  EXPECT_EQ(parsed->lookup.record->value.status(),
            absl::UnavailableError("backend down"));
  EXPECT_EQ(parsed->lookup.record->keep_for, absl::InfiniteDuration());
}

TEST(LookupReplyTest, AValueOverMaxValueBytesComesAsItsSizeOnly) {
  RedisReplyPtr reply =
      Reply(Array({Int(0), Int(0), Bulk(""), Int(2), Int(2097152)}));
  ASSERT_NE(reply, nullptr);
  absl::StatusOr<ParsedLookup> parsed = ParseLookupReply(*reply);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->oversized_bytes, std::optional<uint64_t>(2097152));
  EXPECT_FALSE(parsed->lookup.record.has_value());
  EXPECT_FALSE(parsed->bad_record);

  // The other shapes carry no size.
  reply = Reply(Array({Int(1), Int(0), Bulk(""), Int(0)}));
  ASSERT_NE(reply, nullptr);
  parsed = ParseLookupReply(*reply);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_FALSE(parsed->oversized_bytes.has_value());
}

TEST(LookupReplyTest, MalformedRepliesAreDataLoss) {
  const std::string good_head = RecordTail({Int(0), Int(0), Bulk(""), Int(0)});
  const std::vector<std::string> bad = {
      Int(1),
      Bulk("OK"),
      "+OK\r\n",
      std::string(kNil),
      Array({}),
      Array({Int(1), Int(0), Bulk("")}),
      // Not needed, but no record.
      Array({Int(0), Int(0), Bulk(""), Int(0)}),
      // Unknown lease code; wrong types in the head.
      Array({Int(3), Int(0), Bulk(""), Int(0)}),
      Array({Int(-1), Int(0), Bulk(""), Int(0)}),
      Array({Bulk("x"), Int(0), Bulk(""), Int(0)}),
      Array({Int(1), Bulk("x"), Bulk(""), Int(0)}),
      Array({Int(1), Int(0), Int(0), Int(0)}),
      Array({Int(1), Int(0), Bulk(""), std::string(kNil)}),
      // A record of the wrong length; an oversized value's size without
      // its marker, with a lease, or not a size.
      Array({Int(0), Int(0), Bulk(""), Int(0), Bulk("ver")}),
      Array({Int(0), Int(0), Bulk(""), Int(1), Int(5)}),
      Array({Int(1), Int(0), Bulk(""), Int(2), Int(5)}),
      Array({Int(0), Int(0), Bulk(""), Int(2), Int(-5)}),
      Array({Int(0), Int(0), Bulk(""), Int(2), std::string(kNil)}),
      // A record with bad fields.
      Array({Int(0), Int(0), Bulk(""), Int(0), std::string(kNil), Int(0),
             Bulk("0"), Bulk("0"), Bulk("0"), Bulk("0"), Bulk("v"),
             std::string(kNil), std::string(kNil)}),
      Array({Int(0), Int(0), Bulk(""), Int(0), Bulk("ver"), Int(-1), Bulk("0"),
             Bulk("0"), Bulk("0"), Bulk("0"), Bulk("v"), std::string(kNil),
             std::string(kNil)}),
      Array({Int(0), Int(0), Bulk(""), Int(0), Bulk("ver"), Int(0), Bulk("1e3"),
             Bulk("0"), Bulk("0"), Bulk("0"), Bulk("v"), std::string(kNil),
             std::string(kNil)}),
      Array({Int(0), Int(0), Bulk(""), Int(0), Bulk("ver"), Int(0), Bulk("0"),
             Bulk("0"), Bulk("0"), Bulk("0"), std::string(kNil),
             std::string(kNil), std::string(kNil)}),
      Array({Int(0), Int(0), Bulk(""), Int(0), Bulk("ver"), Int(0), Bulk("0"),
             Bulk("0"), Bulk("0"), Bulk("0"), Bulk("v"), Bulk("5"), Bulk("m")}),
      Array({Int(0), Int(0), Bulk(""), Int(0), Bulk("ver"), Int(0), Bulk("0"),
             Bulk("0"), Bulk("0"), Bulk("0"), std::string(kNil), Bulk("0"),
             Bulk("m")}),
      Array({Int(0), Int(0), Bulk(""), Int(0), Bulk("ver"), Int(0), Bulk("0"),
             Bulk("0"), Bulk("0"), Bulk("0"), std::string(kNil), Bulk("17"),
             Bulk("m")}),
      Array({Int(0), Int(0), Bulk(""), Int(0), Bulk("ver"), Int(0), Bulk("0"),
             Bulk("0"), Bulk("0"), Bulk("0"), std::string(kNil), Bulk("x"),
             Bulk("m")}),
      Array({Int(0), Int(0), Bulk(""), Int(0), Bulk("ver"), Int(0), Bulk("0"),
             Bulk("0"), Bulk("0"), Bulk("0"), Array({Bulk("v")}),
             std::string(kNil), std::string(kNil)}),
  };
  for (size_t i = 0; i < bad.size(); ++i) {
    RedisReplyPtr reply = Reply(bad[i]);
    ASSERT_NE(reply, nullptr) << i;
    EXPECT_EQ(ParseLookupReply(*reply).status().code(),
              absl::StatusCode::kDataLoss)
        << "case " << i;
  }
}

TEST(LookupReplyTest, RandomRepliesNeverCrash) {
  // Random shapes made of the pieces a reply has: the parser must accept or
  // refuse each, never crash or read out of bounds (ASan checks).
  std::mt19937_64 rng(20240601);
  const std::vector<std::string> atoms = {
      Int(0),    Int(1),        Int(2),     Int(-5),        Int(1LL << 62),
      Bulk(""),  Bulk("0"),     Bulk("17"), Bulk("x"),      std::string(kNil),
      "+OK\r\n", "-ERR no\r\n", Array({}),  Array({Int(1)})};
  for (int round = 0; round < 20000; ++round) {
    const size_t n =
        rng() % 2 == 0 ? std::vector<size_t>{4, 5, 13}[rng() % 3] : rng() % 16;
    std::vector<std::string> elements;
    for (size_t i = 0; i < n; ++i)
      elements.push_back(atoms[rng() % atoms.size()]);
    RedisReplyPtr reply = Reply(Array(elements));
    ASSERT_NE(reply, nullptr);
    absl::StatusOr<ParsedLookup> parsed = ParseLookupReply(*reply);
    if (!parsed.ok()) {
      EXPECT_EQ(parsed.status().code(), absl::StatusCode::kDataLoss);
    }
  }
}

TEST(OtherRepliesTest, IntegersAndLeases) {
  EXPECT_EQ(ParseIntegerReply(*Reply(Int(1))).value_or(-1), 1);
  EXPECT_EQ(ParseIntegerReply(*Reply(Bulk("1"))).status().code(),
            absl::StatusCode::kDataLoss);
  EXPECT_EQ(ParseIntegerReply(*Reply(std::string(kNil))).status().code(),
            absl::StatusCode::kDataLoss);
  absl::StatusOr<std::optional<std::string>> lease =
      ParseLeaseReply(*Reply(std::string(kNil)));
  ASSERT_TRUE(lease.ok());
  EXPECT_FALSE(lease->has_value());
  lease = ParseLeaseReply(*Reply(Bulk("token")));
  ASSERT_TRUE(lease.ok());
  EXPECT_EQ(lease->value_or(""), "token");
  EXPECT_EQ(ParseLeaseReply(*Reply(Int(3))).status().code(),
            absl::StatusCode::kDataLoss);
}

TEST(ServerErrorTest, BusyAndLoadingCountAsUnhealthy) {
  EXPECT_TRUE(IsServerUnhealthyReply(
      *Reply("-BUSY Redis is busy running a script.\r\n")));
  EXPECT_TRUE(IsServerUnhealthyReply(
      *Reply("-LOADING Redis is loading the dataset in memory\r\n")));
  EXPECT_FALSE(IsServerUnhealthyReply(*Reply("-ERR wrong number\r\n")));
  EXPECT_FALSE(IsServerUnhealthyReply(*Reply("-NOSCRIPT No script\r\n")));
  EXPECT_FALSE(IsServerUnhealthyReply(*Reply(Bulk("BUSY"))));
}

// ---- Addresses --------------------------------------------------------------

TEST(AddressTest, ParsesUnixTcpAndIpv6) {
  absl::StatusOr<RedisAddress> a = ParseRedisAddress("unix:/run/redis.sock");
  ASSERT_TRUE(a.ok());
  EXPECT_TRUE(a->is_unix());
  EXPECT_EQ(a->unix_path, "/run/redis.sock");
  a = ParseRedisAddress("cache.internal:6380");
  ASSERT_TRUE(a.ok());
  EXPECT_FALSE(a->is_unix());
  EXPECT_EQ(a->host, "cache.internal");
  EXPECT_EQ(a->port, 6380);
  a = ParseRedisAddress("[::1]:7000");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->host, "::1");
  EXPECT_EQ(a->port, 7000);
  EXPECT_EQ(a->text, "[::1]:7000");
}

TEST(AddressTest, RefusesMalformedOnes) {
  for (std::string_view text : std::vector<std::string_view>{
           "", "host", "host:", ":1", "host:0", "host:65536", "host:-1",
           "host:1x", "unix:", "[::1", "[::1]", "[::1]:", "[]:1", "::1:6379",
           std::string_view("unix:/a\0b", 9)}) {
    EXPECT_EQ(ParseRedisAddress(text).status().code(),
              absl::StatusCode::kInvalidArgument)
        << text;
  }
  EXPECT_EQ(ParseRedisAddress("unix:/" + std::string(200, 'x')).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// ---- Redis Cluster ----------------------------------------------------------

TEST(ClusterTest, KeySlotIsCrc16OfTheHashTagAsRedisComputesIt) {
  // Values from CLUSTER KEYSLOT on Redis 7.0.
  EXPECT_EQ(KeySlot("foo"), 12182);
  EXPECT_EQ(KeySlot("123456789"), 0x31C3 % kClusterSlots);
  EXPECT_EQ(KeySlot("{user1000}.following"), KeySlot("user1000"));
  EXPECT_NE(KeySlot("foo{}{bar}"), KeySlot("bar"));  // Empty tag: whole key.
  EXPECT_EQ(KeySlot("foo{{bar}}zap"), KeySlot("{bar"));
  EXPECT_EQ(KeySlot(""), 0);
  for (int i = 0; i < 1000; ++i) {
    const int slot = KeySlot(absl::StrCat("key", i));
    EXPECT_GE(slot, 0);
    EXPECT_LT(slot, kClusterSlots);
  }
}

TEST(ClusterTest, ParsesMovedAndAskOnly) {
  RedisReplyPtr moved = Reply("-MOVED 3999 127.0.0.1:6381\r\n");
  std::optional<Redirect> m = ParseRedirect(*moved, "10.0.0.1");
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->kind, Redirect::Kind::kMoved);
  EXPECT_EQ(m->slot, 3999);
  EXPECT_EQ(m->to.text, "127.0.0.1:6381");
  EXPECT_EQ(m->to.port, 6381);

  RedisReplyPtr ask = Reply("-ASK 1 :7000\r\n");  // A node without its IP.
  std::optional<Redirect> a = ParseRedirect(*ask, "10.0.0.1");
  ASSERT_TRUE(a.has_value());
  EXPECT_EQ(a->kind, Redirect::Kind::kAsk);
  EXPECT_EQ(a->to.text, "10.0.0.1:7000");

  RedisReplyPtr v6 = Reply("-MOVED 2 [::1]:7001\r\n");
  std::optional<Redirect> six = ParseRedirect(*v6, "");
  ASSERT_TRUE(six.has_value());
  EXPECT_EQ(six->to.host, "::1");

  for (const char* other :
       {"-ERR unknown\r\n", "-MOVED x 1.2.3.4:5\r\n",
        "-MOVED 16384 1.2.3.4:5\r\n", "-MOVED 1 nowhere\r\n",
        "+MOVED 1 1.2.3.4:5\r\n", ":1\r\n"}) {
    RedisReplyPtr reply = Reply(other);
    ASSERT_NE(reply, nullptr) << other;
    EXPECT_FALSE(ParseRedirect(*reply, "h").has_value()) << other;
  }
}

// A CLUSTER SLOTS entry: {first, last, master, replicas...}, a node being
// {host, port, id}.
std::string SlotEntry(int first, int last,
                      const std::vector<std::pair<std::string, int>>& nodes) {
  std::vector<std::string> entry = {Int(first), Int(last)};
  for (const auto& [host, port] : nodes) {
    entry.push_back(Array({Bulk(host), Int(port), Bulk("id")}));
  }
  return Array(entry);
}

TEST(ClusterTest, ParsesClusterSlotsAndRefusesOtherShapes) {
  RedisReplyPtr reply = Reply(
      Array({SlotEntry(0, 5460, {{"127.0.0.1", 7000}, {"127.0.0.1", 7003}}),
             SlotEntry(5461, 10922, {{"", 7001}}),       // On the node asked.
             SlotEntry(10923, 16383, {{"?", 7002}})}));  // An unknown address.
  absl::StatusOr<std::vector<SlotRange>> ranges =
      ParseClusterSlots(*reply, "10.1.1.1");
  ASSERT_TRUE(ranges.ok()) << ranges.status();
  ASSERT_EQ(ranges->size(), 2u);
  EXPECT_EQ((*ranges)[0].master.text, "127.0.0.1:7000");
  ASSERT_EQ((*ranges)[0].replicas.size(), 1u);
  EXPECT_EQ((*ranges)[0].replicas[0].text, "127.0.0.1:7003");
  EXPECT_EQ((*ranges)[1].first, 5461);
  EXPECT_EQ((*ranges)[1].master.text, "10.1.1.1:7001");

  for (const std::string& bad :
       {Int(1), Array({Int(1)}), Array({Array({Int(5), Int(1), Int(0)})}),
        Array({SlotEntry(0, 16384, {{"h", 1}})}),
        Array({Array({Bulk("0"), Int(1), Array({Bulk("h"), Int(1)})})})}) {
    RedisReplyPtr r = Reply(bad);
    ASSERT_NE(r, nullptr);
    EXPECT_EQ(ParseClusterSlots(*r, "h").status().code(),
              absl::StatusCode::kDataLoss);
  }
}

TEST(ClusterTest, TheMapFollowsUpdatesAndMovesAndRotatesItsNodes) {
  absl::StatusOr<RedisAddress> seed = ParseRedisAddress("127.0.0.1:7000");
  ASSERT_TRUE(seed.ok());
  ClusterMap map({*seed});
  EXPECT_FALSE(map.MasterOf(0).has_value());
  ASSERT_TRUE(map.Locate(absl::InfiniteFuture()).ok());
  EXPECT_EQ(map.Locate(absl::InfiniteFuture())->text, "127.0.0.1:7000");

  RedisReplyPtr reply =
      Reply(Array({SlotEntry(0, 99, {{"127.0.0.1", 7001}, {"127.0.0.1", 7011}}),
                   SlotEntry(100, 16383, {{"127.0.0.1", 7002}})}));
  absl::StatusOr<std::vector<SlotRange>> ranges = ParseClusterSlots(*reply, "");
  ASSERT_TRUE(ranges.ok());
  map.Update(*ranges);
  EXPECT_EQ(map.MasterOf(99)->text, "127.0.0.1:7001");
  EXPECT_EQ(map.MasterOf(100)->text, "127.0.0.1:7002");
  std::vector<std::string> masters;
  for (const RedisAddress& m : map.masters()) masters.push_back(m.text);
  EXPECT_THAT(masters, ElementsAre("127.0.0.1:7001", "127.0.0.1:7002"));

  absl::StatusOr<RedisAddress> to = ParseRedisAddress("127.0.0.1:7002");
  map.Moved(5, *to);
  EXPECT_EQ(map.MasterOf(5)->text, "127.0.0.1:7002");
  EXPECT_EQ(map.MasterOf(6)->text, "127.0.0.1:7001");

  // Masters, then replicas, then seeds; a Forget moves on from the node
  // named last only.
  std::vector<std::string> candidates;
  for (const RedisAddress& c : map.Candidates()) candidates.push_back(c.text);
  EXPECT_THAT(candidates, ElementsAre("127.0.0.1:7001", "127.0.0.1:7002",
                                      "127.0.0.1:7011", "127.0.0.1:7000"));
  const std::string first = map.Locate(absl::InfiniteFuture())->text;
  map.Forget("127.0.0.1:9999");
  EXPECT_EQ(map.Locate(absl::InfiniteFuture())->text, first);
  map.Forget(first);
  EXPECT_NE(map.Locate(absl::InfiniteFuture())->text, first);
}

}  // namespace
}  // namespace paddock::internal
