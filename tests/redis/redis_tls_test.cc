// RedisTier over TLS against a real `redis-server --tls-port` on 127.0.0.1,
// with a throwaway CA the test makes (the `openssl` program): every
// connection (the pool's, the change subscription's, reconnects) speaks
// TLS, the server's certificate is always verified (a wrong CA or name fails
// Connect with UnavailableError naming why), mutual TLS works with a client
// certificate and fails without one, and a hung, killed or non-TLS server
// fails calls within their deadlines as over plain TCP.

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "child_process.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "paddock/paddock.h"
#include "paddock/redis.h"
#include "paddock/shared_tier.h"
#include "redis_fixture.h"
#include "redis_server.h"

namespace paddock {
namespace {

using ::paddock::testing::Eventually;
using ::paddock::testing::ExpectEveryOperationWorks;
using ::paddock::testing::ExpectGarbageIsNoRecordAndAFillReplacesIt;
using ::paddock::testing::FleetLoadsOfAColdKey;
using ::paddock::testing::FreeLoopbackPort;
using ::paddock::testing::RecoversWithin;
using ::paddock::testing::RedisServer;
using ::paddock::testing::ValueFill;
using ::testing::AnyOf;
using ::testing::HasSubstr;
using ::testing::Not;
using Lease = SharedLookup::Lease;

constexpr char kPassword[] = "s3cret-Pa55";

// A listener on a free loopback port that accepts one connection and
// answers `reply` (or nothing, when empty) to whatever comes, holding the
// connection until destroyed: a server that speaks no TLS, or hangs in the
// handshake.
class RawListener {
 public:
  explicit RawListener(std::string reply) : reply_(std::move(reply)) {
    fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t length = sizeof(address);
    if (bind(fd_, reinterpret_cast<sockaddr*>(&address), sizeof(address)) ==
            0 &&
        listen(fd_, 4) == 0 &&
        getsockname(fd_, reinterpret_cast<sockaddr*>(&address), &length) == 0) {
      port_ = ntohs(address.sin_port);
    }
    thread_ = std::thread([this] { Serve(); });
  }
  ~RawListener() {
    shutdown(fd_, SHUT_RDWR);  // Ends accept().
    thread_.join();
    close(fd_);
  }
  RawListener(const RawListener&) = delete;
  RawListener& operator=(const RawListener&) = delete;

  std::string address() const { return absl::StrCat("127.0.0.1:", port_); }

 private:
  void Serve() {
    std::vector<int> accepted;
    for (;;) {
      const int client = accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (client < 0) break;
      accepted.push_back(client);
      char buffer[512];
      if (!reply_.empty() && read(client, buffer, sizeof(buffer)) > 0) {
        (void)!write(client, reply_.data(), reply_.size());
      }
    }
    for (const int client : accepted) close(client);
  }

  const std::string reply_;
  int fd_ = -1;
  int port_ = 0;
  std::thread thread_;
};

// Runs `argv` (the openssl program), its output to `log`; whether it
// exited 0.
bool Run(const std::vector<std::string>& argv, const std::string& log) {
  std::FILE* out = std::fopen(log.c_str(), "a");
  if (out == nullptr) return false;
  absl::StatusOr<pid_t> pid = testing::SpawnProcess(argv, fileno(out));
  std::fclose(out);
  if (!pid.ok()) return false;
  int status = 0;
  while (waitpid(*pid, &status, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

// The certificates of the tests, made once in a temporary directory: a CA,
// the server's certificate from it (names 127.0.0.1 and redis.test), a
// client certificate from it, and a second CA that signed none of them.
class Certificates {
 public:
  Certificates() {
    std::string templ = "/tmp/paddock-tls-XXXXXX";
    if (mkdtemp(templ.data()) == nullptr) return;
    dir_ = templ;
    ok_ = MakeCa("ca") && MakeCa("other-ca") &&
          MakeLeaf("server", "subjectAltName=IP:127.0.0.1,DNS:redis.test") &&
          MakeLeaf("client", "extendedKeyUsage=clientAuth");
  }
  ~Certificates() {
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }
  Certificates(const Certificates&) = delete;
  Certificates& operator=(const Certificates&) = delete;

  bool ok() const { return ok_; }
  std::string File(const std::string& name) const { return dir_ + "/" + name; }
  std::string log() const { return File("openssl.log"); }

 private:
  bool MakeCa(const std::string& name) {
    return Run({"openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                "ec_paramgen_curve:prime256v1", "-nodes", "-days", "2", "-subj",
                "/CN=paddock test " + name, "-keyout", File(name + ".key"),
                "-out", File(name + ".crt")},
               log());
  }
  bool MakeLeaf(const std::string& name, const std::string& extension) {
    std::ofstream(File(name + ".ext")) << extension << "\n";
    return Run({"openssl", "req", "-newkey", "ec", "-pkeyopt",
                "ec_paramgen_curve:prime256v1", "-nodes", "-subj",
                "/CN=paddock test " + name, "-keyout", File(name + ".key"),
                "-out", File(name + ".csr")},
               log()) &&
           Run({"openssl", "x509", "-req", "-in", File(name + ".csr"), "-CA",
                File("ca.crt"), "-CAkey", File("ca.key"), "-set_serial",
                name == "server" ? "2" : "3", "-days", "2", "-extfile",
                File(name + ".ext"), "-out", File(name + ".crt")},
               log());
  }

  std::string dir_;
  bool ok_ = false;
};

class RedisTlsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { certificates_ = new Certificates(); }
  static void TearDownTestSuite() {
    delete certificates_;
    certificates_ = nullptr;
  }

  void SetUp() override {
    ASSERT_TRUE(certificates_->ok())
        << "openssl failed; see " << certificates_->log();
  }

  static std::string File(const std::string& name) {
    return certificates_->File(name);
  }

  // Starts the test's server with TLS on a free loopback port (and its
  // control connection on its unix socket); `mutual`: it wants a client
  // certificate from the CA. `tls`: false serves plain TCP on that port.
  void StartServer(bool mutual = false, bool tls = true) {
    port_ = FreeLoopbackPort();
    ASSERT_NE(port_, 0);
    RedisServer::Options options;
    if (tls) {
      options.extra_args = {"--tls-port",
                            absl::StrCat(port_),
                            "--tls-cert-file",
                            File("server.crt"),
                            "--tls-key-file",
                            File("server.key"),
                            "--tls-ca-cert-file",
                            File("ca.crt"),
                            "--tls-auth-clients",
                            mutual ? "yes" : "no",
                            "--bind",
                            "127.0.0.1"};
    } else {
      options.extra_args = {"--port", absl::StrCat(port_), "--bind",
                            "127.0.0.1"};
    }
    absl::StatusOr<std::unique_ptr<RedisServer>> server =
        RedisServer::Start(std::move(options));
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
  }

  // Options of a TLS tier of the test's server that trusts the test's CA:
  // io_timeout 2 s, connect_timeout 1 s, lease_for 10 s.
  RedisOptions TierOptions() const {
    RedisOptions options;
    options.address = absl::StrCat("127.0.0.1:", port_);
    options.key_prefix = "tls:v1:";
    options.io_timeout = absl::Seconds(2);
    options.connect_timeout = absl::Seconds(1);
    options.lease_for = absl::Seconds(10);
    options.tls.enabled = true;
    options.tls.ca_file = File("ca.crt");
    return options;
  }

  // TierOptions() with the client certificate, for mutual TLS.
  RedisOptions WithClientCertificate() const {
    RedisOptions options = TierOptions();
    options.tls.cert_file = File("client.crt");
    options.tls.key_file = File("client.key");
    return options;
  }

  static std::shared_ptr<RedisTier> Connect(const RedisOptions& options) {
    return testing::ConnectTier(options);
  }

  // Connect's status for `options` and how long it took.
  static absl::Status TimedConnect(const RedisOptions& options,
                                   absl::Duration* took) {
    const absl::Time start = absl::Now();
    absl::Status status = RedisTier::Connect(options).status();
    *took = absl::Now() - start;
    return status;
  }

  static Certificates* certificates_;
  int port_ = 0;
  std::unique_ptr<RedisServer> server_;
};

Certificates* RedisTlsTest::certificates_ = nullptr;

// Generous: a sanitizer build on a busy 2-core machine.
constexpr absl::Duration kSlack = absl::Seconds(2);

TEST_F(RedisTlsTest, EveryOperationAndTheChangeFeedWorkOverTls) {
  StartServer();
  RedisOptions options = TierOptions();
  options.lease_for = absl::Seconds(1);  // Extended every 500 ms.
  std::shared_ptr<RedisTier> a = Connect(options);
  std::shared_ptr<RedisTier> b = Connect(options);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  // A value larger than a TLS record (16 KiB) and than a socket buffer.
  ExpectEveryOperationWorks(*a, *b, std::string(700 << 10, 'x'));
  // Every connection the server has, the subscriptions' too, came to the
  // TLS port.
  absl::StatusOr<std::string> clients = server_->Command({"CLIENT", "LIST"});
  ASSERT_TRUE(clients.ok()) << clients.status();
  for (absl::string_view client : absl::StrSplit(*clients, '\n')) {
    // The test's own, on the unix socket.
    if (client.empty() || absl::StrContains(client, "laddr=/")) continue;
    EXPECT_THAT(client, HasSubstr(absl::StrCat("laddr=127.0.0.1:", port_)));
  }
}

TEST_F(RedisTlsTest, ACacheOverTlsLoadsAColdKeyOnceAcrossPods) {
  StartServer();
  EXPECT_EQ(FleetLoadsOfAColdKey([&] { return Connect(TierOptions()); }), 1);
}

// Garbage at a record, read over TLS: no record, and a fill replaces it.
TEST_F(RedisTlsTest, GarbageAtARecordIsNoRecordAndAFillReplacesIt) {
  StartServer();
  std::shared_ptr<RedisTier> tier = Connect(TierOptions());
  ASSERT_NE(tier, nullptr);
  ExpectGarbageIsNoRecordAndAFillReplacesIt(*tier, "g", [&] {
    return server_->Command({"SET", "tls:v1:{g}:v", "garbage"}).status();
  });
}

TEST_F(RedisTlsTest, TheServerNameMayDifferFromTheAddress) {
  StartServer();
  RedisOptions options = TierOptions();
  options.tls.server_name = "redis.test";  // The certificate's DNS name.
  std::shared_ptr<RedisTier> tier = Connect(options);
  ASSERT_NE(tier, nullptr);
  EXPECT_TRUE(tier->Put("k", ValueFill("v"), 0).ok());
}

TEST_F(RedisTlsTest, AnUntrustedCertificateIsUnavailableNamingTheFailure) {
  StartServer();
  RedisOptions options = TierOptions();
  options.tls.ca_file = File("other-ca.crt");
  const absl::Status status = RedisTier::Connect(options).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable) << status;
  EXPECT_THAT(status.message(), HasSubstr("failed verification"));
  // Which depends on whether the server sends its CA along (Redis builds
  // the chain from its tls-ca-cert-file).
  EXPECT_THAT(status.message(),
              AnyOf(HasSubstr("self-signed certificate in certificate chain"),
                    HasSubstr("unable to get local issuer certificate")))
      << status;
  EXPECT_THAT(status.message(), HasSubstr(options.address));

  // The system's store does not know the test's CA either.
  options.tls.ca_file.clear();
  const absl::Status system = RedisTier::Connect(options).status();
  EXPECT_EQ(system.code(), absl::StatusCode::kUnavailable) << system;
  EXPECT_THAT(system.message(), HasSubstr("failed verification"));
}

TEST_F(RedisTlsTest, ACertificateForAnotherNameIsUnavailableNamingTheFailure) {
  StartServer();
  RedisOptions options = TierOptions();
  options.tls.server_name = "other.test";
  const absl::Status status = RedisTier::Connect(options).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable) << status;
  EXPECT_THAT(status.message(), HasSubstr("hostname mismatch"));
  EXPECT_THAT(status.message(), HasSubstr("other.test"));

  options.tls.server_name = "127.0.0.2";
  const absl::Status ip = RedisTier::Connect(options).status();
  EXPECT_EQ(ip.code(), absl::StatusCode::kUnavailable) << ip;
  EXPECT_THAT(ip.message(), HasSubstr("IP address mismatch"));
}

TEST_F(RedisTlsTest, MutualTlsWorksWithTheClientCertificateAndFailsWithout) {
  StartServer(/*mutual=*/true);
  std::shared_ptr<RedisTier> tier = Connect(WithClientCertificate());
  ASSERT_NE(tier, nullptr);
  ASSERT_TRUE(Eventually([&] { return tier->subscribed(); }));
  EXPECT_TRUE(tier->Put("k", ValueFill("v"), 0).ok());

  absl::Duration took;
  const absl::Status without = TimedConnect(TierOptions(), &took);
  EXPECT_EQ(without.code(), absl::StatusCode::kUnavailable) << without;
  EXPECT_LT(took, TierOptions().io_timeout + kSlack);

  // A certificate of another CA is refused too.
  RedisOptions foreign = WithClientCertificate();
  foreign.tls.cert_file = File("other-ca.crt");
  foreign.tls.key_file = File("other-ca.key");
  const absl::Status refused = TimedConnect(foreign, &took);
  EXPECT_EQ(refused.code(), absl::StatusCode::kUnavailable) << refused;
}

TEST_F(RedisTlsTest, APasswordTravelsInsideTls) {
  StartServer();
  ASSERT_TRUE(
      server_->Command({"CONFIG", "SET", "requirepass", std::string(kPassword)})
          .ok());
  RedisOptions options = TierOptions();
  options.password = std::string(kPassword);
  std::shared_ptr<RedisTier> tier = Connect(options);
  ASSERT_NE(tier, nullptr);
  EXPECT_TRUE(tier->Put("k", ValueFill("v"), 0).ok());

  options.password = "wrong-Pa55word";
  const absl::Status wrong = RedisTier::Connect(options).status();
  EXPECT_EQ(wrong.code(), absl::StatusCode::kUnauthenticated) << wrong;
  EXPECT_THAT(wrong.ToString(), Not(HasSubstr("Pa55")));
}

TEST_F(RedisTlsTest, AFileThatCannotBeLoadedIsInvalidArgument) {
  StartServer();
  RedisOptions options = TierOptions();
  options.tls.ca_file = File("missing.crt");
  const absl::Status ca = RedisTier::Connect(options).status();
  EXPECT_EQ(ca.code(), absl::StatusCode::kInvalidArgument) << ca;
  EXPECT_THAT(ca.message(), HasSubstr("tls.ca_file"));
  EXPECT_THAT(ca.message(), HasSubstr("missing.crt"));

  options = WithClientCertificate();
  options.tls.key_file = File("server.key");  // Not the certificate's key.
  const absl::Status key = RedisTier::Connect(options).status();
  EXPECT_EQ(key.code(), absl::StatusCode::kInvalidArgument) << key;
  EXPECT_THAT(key.message(), HasSubstr("tls.key_file"));
}

TEST(RedisTlsOptionsTest, ValidateChecksTheTlsFields) {
  RedisOptions options;
  options.address = "127.0.0.1:6380";
  options.tls.ca_file = "/etc/ssl/certs/ca-certificates.crt";
  EXPECT_EQ(options.Validate().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(options.Validate().message(), HasSubstr("tls.ca_file"));

  options.tls.enabled = true;
  EXPECT_TRUE(options.Validate().ok()) << options.Validate();

  options.tls.cert_file = "client.crt";  // Without its key.
  EXPECT_EQ(options.Validate().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(options.Validate().message(), HasSubstr("tls.key_file"));
  options.tls.key_file = "client.key";
  EXPECT_TRUE(options.Validate().ok()) << options.Validate();

  options.address = "unix:/run/redis.sock";
  EXPECT_EQ(options.Validate().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(options.Validate().message(), HasSubstr("address"));
}

// A TLS client of a server that speaks plain RESP on the port (it reads the
// ClientHello as the start of a command line and waits for the rest), or
// something else entirely (the handshake fails at once): Connect fails
// within connect_timeout, saying why.
TEST_F(RedisTlsTest, AServerThatSpeaksNoTlsFailsConnectInTime) {
  StartServer(/*mutual=*/false, /*tls=*/false);
  absl::Duration took;
  const absl::Status plain = TimedConnect(TierOptions(), &took);
  EXPECT_EQ(plain.code(), absl::StatusCode::kDeadlineExceeded) << plain;
  EXPECT_THAT(plain.message(), HasSubstr("TLS handshake"));
  EXPECT_LT(took, TierOptions().connect_timeout + kSlack);

  RawListener garbage("HTTP/1.1 400 Bad Request\r\n\r\n");
  RedisOptions options = TierOptions();
  options.address = garbage.address();
  const absl::Status http = TimedConnect(options, &took);
  EXPECT_EQ(http.code(), absl::StatusCode::kUnavailable) << http;
  EXPECT_LT(took, options.connect_timeout + kSlack);
}

// A plain client of the TLS port gets no answer it can read; it fails, and
// never hangs.
TEST_F(RedisTlsTest, APlainClientOfTheTlsPortFails) {
  StartServer();
  RedisOptions options = TierOptions();
  options.tls = RedisTlsOptions();
  absl::Duration took;
  const absl::Status status = TimedConnect(options, &took);
  EXPECT_FALSE(status.ok());
  EXPECT_LT(took, options.io_timeout + kSlack);
}

// A server that accepts and then says nothing: the handshake is bounded by
// connect_timeout.
TEST_F(RedisTlsTest, AHandshakeThatHangsIsBoundedByConnectTimeout) {
  RawListener silent("");
  RedisOptions options;
  options.address = silent.address();
  options.connect_timeout = absl::Milliseconds(300);
  options.io_timeout = absl::Seconds(1);
  options.tls.enabled = true;
  options.tls.ca_file = File("ca.crt");
  absl::Duration took;
  const absl::Status status = TimedConnect(options, &took);
  EXPECT_THAT(status.code(), AnyOf(absl::StatusCode::kDeadlineExceeded,
                                   absl::StatusCode::kUnavailable))
      << status;
  EXPECT_LT(took, options.io_timeout + kSlack);
}

TEST_F(RedisTlsTest, AHungServerFailsCallsInTimeAndIsUsedAgainAfter) {
  StartServer();
  RedisOptions options = TierOptions();
  options.io_timeout = absl::Milliseconds(500);
  options.breaker_failures = 100;  // The breaker stays out of it.
  std::shared_ptr<RedisTier> tier = Connect(options);
  ASSERT_NE(tier, nullptr);
  ASSERT_TRUE(server_->Pause().ok());
  for (int i = 0; i < 3; ++i) {
    const absl::Time start = absl::Now();
    const absl::Status lookup =
        tier->Lookup(absl::StrCat("k", i), "", absl::ZeroDuration()).status();
    EXPECT_EQ(lookup.code(), absl::StatusCode::kDeadlineExceeded) << lookup;
    EXPECT_LT(absl::Now() - start, options.io_timeout + kSlack);
  }
  // A large write, in many TLS records, is bounded the same way.
  const absl::Time start = absl::Now();
  const absl::Status put =
      tier->Put("big", ValueFill(std::string(900 << 10, 'x')), 0);
  EXPECT_EQ(put.code(), absl::StatusCode::kDeadlineExceeded) << put;
  EXPECT_LT(absl::Now() - start, options.io_timeout + kSlack);
  ASSERT_TRUE(server_->Resume().ok());
  EXPECT_TRUE(RecoversWithin(*tier, absl::Seconds(10)));
  EXPECT_TRUE(tier->Put("k", ValueFill("v"), 0).ok());
}

TEST_F(RedisTlsTest, AKilledServerFailsCallsAndARestartedOneIsUsedAgain) {
  StartServer();
  std::shared_ptr<RedisTier> tier = Connect(TierOptions());
  ASSERT_NE(tier, nullptr);
  ASSERT_TRUE(Eventually([&] { return tier->subscribed(); }));
  ASSERT_TRUE(server_->Kill().ok());
  const absl::Status down =
      tier->Lookup("k", "", absl::ZeroDuration()).status();
  EXPECT_EQ(down.code(), absl::StatusCode::kUnavailable) << down;

  ASSERT_TRUE(server_->Restart().ok());  // Same arguments, same TLS port.
  EXPECT_TRUE(RecoversWithin(*tier, absl::Seconds(10)));
  // New connections, the subscription's included, handshake again.
  ASSERT_TRUE(Eventually([&] {
    return tier->stats().subscription_losses >= 1 && tier->subscribed();
  }));
  EXPECT_TRUE(tier->Put("k", ValueFill("v"), 0).ok());
}

}  // namespace
}  // namespace paddock
