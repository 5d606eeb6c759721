// A tiny consumer of paddock::asio (tests/package/run.sh): one lookup with
// asio::use_future and, where asio offers coroutines, one with
// asio::use_awaitable.

#include <paddock/asio.h>
#include <paddock/paddock.h>

#include <asio/io_context.hpp>
#include <asio/use_future.hpp>
#include <cstdio>
#include <future>
#include <string>

#if defined(ASIO_HAS_CO_AWAIT)
#include <asio/co_spawn.hpp>
#include <asio/detached.hpp>
#include <asio/use_awaitable.hpp>
#endif

using PageCache =
    paddock::Cache<std::string, std::string, paddock::SingleFlight>;

int main() {
  asio::io_context io;
  PageCache cache(
      [](const std::string& key) -> absl::StatusOr<std::string> {
        return "value of " + key;
      },
      paddock::Options{.ttl = absl::Seconds(10)});

  std::future<absl::StatusOr<std::string>> future =
      paddock::AsyncGet(cache, "k", asio::use_future);
  absl::StatusOr<std::string> v = future.get();
  if (!v.ok() || *v != "value of k") return 1;

#if defined(ASIO_HAS_CO_AWAIT)
  bool resumed = false;
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        absl::StatusOr<std::string> w =
            co_await paddock::AsyncGet(cache, "k", asio::use_awaitable);
        resumed = w.ok() && *w == "value of k";
      },
      asio::detached);
  io.run();
  if (!resumed) return 1;
  std::printf("paddock::asio: %s (use_future, use_awaitable)\n", v->c_str());
#else
  std::printf("paddock::asio: %s (use_future; no coroutines in asio here)\n",
              v->c_str());
#endif
  return 0;
}
