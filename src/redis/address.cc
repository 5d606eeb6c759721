// ParseRedisAddress.

#include "redis/address.h"

#include <sys/un.h>

#include <charconv>
#include <string>
#include <string_view>
#include <system_error>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace paddock::internal {
namespace {

absl::Status Malformed(std::string_view text, std::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat(
      "paddock::RedisOptions: address \"", std::string(text), "\" ",
      std::string(why),
      " (expected \"unix:<path>\", \"<host>:<port>\" or \"[<ipv6>]:<port>\")"));
}

}  // namespace

absl::StatusOr<RedisAddress> ParseRedisAddress(std::string_view text) {
  RedisAddress address;
  address.text = std::string(text);
  if (text.empty()) return Malformed(text, "is empty");
  if (text.find('\0') != std::string_view::npos) {
    return Malformed(text, "contains a NUL byte");
  }
  if (text.substr(0, 5) == "unix:") {
    address.unix_path = std::string(text.substr(5));
    if (address.unix_path.empty()) return Malformed(text, "has no path");
    if (address.unix_path.size() >= sizeof(sockaddr_un{}.sun_path)) {
      return Malformed(text, "has a socket path longer than the system allows");
    }
    return address;
  }

  std::string_view host;
  std::string_view port;
  if (text.front() == '[') {
    const size_t close = text.find(']');
    if (close == std::string_view::npos) {
      return Malformed(text, "has no ']'");
    }
    host = text.substr(1, close - 1);
    if (close + 1 >= text.size() || text[close + 1] != ':') {
      return Malformed(text, "has no ':<port>' after ']'");
    }
    port = text.substr(close + 2);
  } else {
    const size_t colon = text.rfind(':');
    if (colon == std::string_view::npos) {
      return Malformed(text, "has no ':<port>'");
    }
    host = text.substr(0, colon);
    port = text.substr(colon + 1);
    if (host.find(':') != std::string_view::npos) {
      return Malformed(text, "has an IPv6 host without brackets");
    }
  }
  if (host.empty()) return Malformed(text, "has no host");
  int number = 0;
  const auto [end, ec] =
      std::from_chars(port.data(), port.data() + port.size(), number);
  if (port.empty() || ec != std::errc() || end != port.data() + port.size() ||
      number < 1 || number > 65535) {
    return Malformed(text, "has no port in [1, 65535]");
  }
  address.host = std::string(host);
  address.port = number;
  return address;
}

absl::StatusOr<RedisAddress> TcpAddress(absl::string_view host, int port) {
  const bool v6 = host.find(':') != absl::string_view::npos;
  return ParseRedisAddress(
      absl::StrCat(v6 ? "[" : "", host, v6 ? "]" : "", ":", port));
}

}  // namespace paddock::internal
