// An asio coroutine TCP server that serves a hot key through
// paddock::AsyncGet, and an in-process client that opens many connections at
// once, each time the key expires.
//
// The protocol is one line each way: a key in, its value out (or
// "ERROR <status>"). The server listens on 127.0.0.1 on a port the kernel
// picks. The server and the client share one io_context thread; the
// page's rebuild (a blocking loader) runs on the cache's own threads, so
// that thread never blocks on it, and the connections that arrive while it
// runs wait as coroutines, not as threads.
//
// Prints, for the cold start and each expiry, the connections, the loads and
// what was served. Exits 1 if an expiry caused more than one load, or if any
// connection failed or got anything but the value of its round.

#include <algorithm>
#include <asio/buffer.hpp>
#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/io_context.hpp>
#include <asio/ip/address.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/read_until.hpp>
#include <asio/redirect_error.hpp>
#include <asio/steady_timer.hpp>
#include <asio/this_coro.hpp>
#include <asio/use_awaitable.hpp>
#include <asio/write.hpp>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <exception>
#include <map>
#include <string>
#include <system_error>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "fmt/format.h"
#include "paddock/asio.h"
#include "paddock/cache.h"
#include "paddock/options.h"
#include "paddock/policy.h"

namespace {

using asio::ip::tcp;
using Clock = std::chrono::steady_clock;
using PageCache =
    paddock::Cache<std::string, std::string, paddock::SingleFlight>;

constexpr char kHotKey[] = "exhibition:launch-day";
constexpr int kConnections = 200;  // Opened at once, per round.
constexpr int kExpiries = 3;       // Rounds after the cold start.
constexpr absl::Duration kTtl = absl::Milliseconds(500);
constexpr absl::Duration kRebuild = absl::Milliseconds(50);
// How long after the expiry the connections are opened: the cache counts the
// ttl from when it stored the value, a moment after the rebuild returned.
constexpr auto kAfterExpiry = std::chrono::milliseconds(20);

// The page's backend: slow, and counts its rebuilds.
class Backend {
 public:
  absl::StatusOr<std::string> Rebuild(const std::string& key) {
    const int n = rebuilds_.fetch_add(1) + 1;
    absl::SleepFor(kRebuild);  // The expensive aggregation.
    finished_at_.store(Clock::now().time_since_epoch().count());
    return absl::StrCat(key, " v", n);
  }

  int rebuilds() const { return rebuilds_.load(); }
  Clock::time_point finished_at() const {
    return Clock::time_point(Clock::duration(finished_at_.load()));
  }

 private:
  std::atomic<int> rebuilds_{0};
  std::atomic<Clock::rep> finished_at_{0};
};

// ---------------------------------------------------------------------------
// The server.

asio::awaitable<void> Session(tcp::socket socket, PageCache& cache) {
  std::string buffer;
  std::error_code error;
  for (;;) {
    const size_t n = co_await asio::async_read_until(
        socket, asio::dynamic_buffer(buffer), '\n',
        asio::redirect_error(asio::use_awaitable, error));
    if (error) co_return;  // The client is done (EOF) or gone.
    const std::string key = buffer.substr(0, n - 1);
    buffer.erase(0, n);
    // Never blocks this thread: a hit is posted back at once; a miss waits
    // here, as a suspended coroutine, for the one load of the key.
    const absl::StatusOr<std::string> value =
        co_await paddock::AsyncGet(cache, key, asio::use_awaitable);
    std::string reply = value.ok()
                            ? *value + "\n"
                            : "ERROR " + value.status().ToString() + "\n";
    co_await asio::async_write(
        socket, asio::buffer(reply),
        asio::redirect_error(asio::use_awaitable, error));
    if (error) co_return;
  }
}

asio::awaitable<void> Listen(tcp::acceptor& acceptor, PageCache& cache) {
  for (;;) {
    std::error_code error;
    tcp::socket socket = co_await acceptor.async_accept(
        asio::redirect_error(asio::use_awaitable, error));
    if (error) co_return;  // Closed: the client is done.
    asio::co_spawn(acceptor.get_executor(), Session(std::move(socket), cache),
                   asio::detached);
  }
}

// ---------------------------------------------------------------------------
// The client.

// What one round of connections got.
struct Round {
  std::map<std::string, int> answers;  // Reply (or error) -> connections.
  int loads = 0;
  std::chrono::microseconds slowest{0};
};

// One connection: asks for the hot key, returns the reply line.
asio::awaitable<std::string> Ask(tcp::endpoint server) {
  tcp::socket socket(co_await asio::this_coro::executor);
  std::error_code error;
  co_await socket.async_connect(
      server, asio::redirect_error(asio::use_awaitable, error));
  if (error) co_return "connect failed: " + error.message();
  const std::string request = std::string(kHotKey) + "\n";
  co_await asio::async_write(socket, asio::buffer(request),
                             asio::redirect_error(asio::use_awaitable, error));
  if (error) co_return "write failed: " + error.message();
  std::string line;
  const size_t n = co_await asio::async_read_until(
      socket, asio::dynamic_buffer(line), '\n',
      asio::redirect_error(asio::use_awaitable, error));
  if (error) co_return "read failed: " + error.message();
  line.resize(n - 1);
  co_return line;
}

// Opens kConnections connections at once; returns when all have answered.
asio::awaitable<Round> OpenAtOnce(tcp::endpoint server,
                                  const Backend& backend) {
  const auto executor = co_await asio::this_coro::executor;
  Round round;
  const int loads_before = backend.rebuilds();
  const Clock::time_point start = Clock::now();
  int outstanding = kConnections;
  asio::steady_timer all_answered(executor, Clock::time_point::max());
  for (int i = 0; i < kConnections; ++i) {
    asio::co_spawn(executor, Ask(server),
                   [&](std::exception_ptr failure, std::string reply) {
                     if (failure != nullptr) reply = "exception";
                     ++round.answers[reply];
                     round.slowest = std::max(
                         round.slowest,
                         std::chrono::duration_cast<std::chrono::microseconds>(
                             Clock::now() - start));
                     if (--outstanding == 0) all_answered.cancel();
                   });
  }
  std::error_code cancelled;
  co_await all_answered.async_wait(
      asio::redirect_error(asio::use_awaitable, cancelled));
  round.loads = backend.rebuilds() - loads_before;
  co_return round;
}

// Prints a round; returns whether it shows one load serving every
// connection the value of that load.
bool Report(const std::string& name, const Round& round, int round_number) {
  const std::string expected = absl::StrCat(kHotKey, " v", round_number + 1);
  fmt::print(
      "{:<12} {} connections, {} load{}, all answered within {:.1f} ms\n", name,
      kConnections, round.loads, round.loads == 1 ? "" : "s",
      static_cast<double>(round.slowest.count()) / 1000);
  bool ok = round.loads <= 1;
  for (const auto& [reply, count] : round.answers) {
    fmt::print("             {:>4} x \"{}\"\n", count, reply);
    if (reply != expected) ok = false;
  }
  if (!ok) {
    fmt::print(
        "FAIL: expected at most 1 load and \"{}\" for every "
        "connection\n",
        expected);
  }
  return ok;
}

asio::awaitable<bool> Client(tcp::endpoint server, const Backend& backend) {
  bool ok = Report("cold start", co_await OpenAtOnce(server, backend), 0);
  asio::steady_timer timer(co_await asio::this_coro::executor);
  for (int expiry = 1; expiry <= kExpiries; ++expiry) {
    timer.expires_at(backend.finished_at() + absl::ToChronoMilliseconds(kTtl) +
                     kAfterExpiry);
    co_await timer.async_wait(asio::use_awaitable);
    ok &= Report(fmt::format("expiry {}", expiry),
                 co_await OpenAtOnce(server, backend), expiry);
  }
  co_return ok;
}

}  // namespace

int main() {
  asio::io_context io(1);
  Backend backend;
  PageCache cache(
      [&backend](const std::string& key) { return backend.Rebuild(key); },
      paddock::Options{.ttl = kTtl, .wait_timeout = absl::Seconds(30)});

  tcp::acceptor acceptor(io, tcp::endpoint(asio::ip::make_address("127.0.0.1"),
                                           /*port=*/0));
  const tcp::endpoint server = acceptor.local_endpoint();
  fmt::print("serving {} on {}:{} (rebuild {}, ttl {})\n\n", kHotKey,
             server.address().to_string(), server.port(),
             absl::FormatDuration(kRebuild), absl::FormatDuration(kTtl));

  asio::co_spawn(io, Listen(acceptor, cache), asio::detached);
  bool ok = false;
  asio::co_spawn(io, Client(server, backend),
                 [&](std::exception_ptr failure, bool client_ok) {
                   ok = failure == nullptr && client_ok;
                   acceptor.close();  // Stops Listen; sessions end on EOF.
                 });
  io.run();

  const paddock::Stats stats = cache.stats();
  fmt::print("\n{} connections over {} rounds, {} loads\nstats: {}\n",
             kConnections * (kExpiries + 1), kExpiries + 1, backend.rebuilds(),
             stats);
  if (ok) {
    fmt::print("OK: one load per expiry, however many connections arrived\n");
  }
  return ok ? 0 : 1;
}
