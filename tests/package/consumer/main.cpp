// A tiny consumer of an installed or vendored paddock (tests/package/run.sh).

#include <paddock/paddock.h>

#include <cstdio>
#include <string>

int main() {
  paddock::Cache<std::string, std::string, paddock::SingleFlight> cache(
      [](const std::string& key) -> absl::StatusOr<std::string> {
        return "value of " + key;
      },
      paddock::Options{.ttl = absl::Seconds(10)});
  absl::StatusOr<std::string> v = cache.Get("member:page:0:size:10");
  if (!v.ok() || *v != "value of member:page:0:size:10") return 1;
  std::printf("%s (paddock %s)\n", v->c_str(),
              std::string(paddock::kVersion).c_str());
  return 0;
}
