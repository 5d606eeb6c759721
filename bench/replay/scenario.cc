// The built-in scenarios: seed 000's 00:00 launch and seed 004's member page.

#include "scenario.h"

#include <cmath>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"

namespace paddock::replay {
namespace {

// Seed 000, sections 0, 5 and 7: a freshly started 1-core pod, 0 -> 200 req/s
// in 10 s then 3 minutes, one hot exhibition key rebuilt from 8 sequential
// product-group aggregations, a 10 s TTL.
Scenario HotKey200() {
  Scenario s;
  s.name = "hotkey-200rps";
  s.description =
      "seed 000: 1-core pod, 0->200 req/s in 10 s then 180 s, 19% on one "
      "hot key rebuilt in 8 x (5 ms CPU + 5 ms wait)";
  return s;  // The defaults of Scenario are this scenario.
}

// Seed 004: a member-list page in a 1-minute cache, 90 req/s of the cached
// API plus 10 req/s of an uncached one, 80 fixed workers.
Scenario MemberPage90() {
  Scenario s;
  s.name = "member-page-90rps";
  s.description =
      "seed 004: 80 workers, 0->90+10 req/s in 60 s then 240 s, 90% on one "
      "cached page loaded in 20 ms CPU + 80 ms wait, ttl 60 s";
  s.rate = 100;  // 90 req/s cached API + 10 req/s uncached API.
  s.ramp = absl::Seconds(60);
  s.hold = absl::Seconds(240);
  s.hot_share = 0.9;
  s.other_cost = {1, {absl::Milliseconds(3), absl::Milliseconds(5)}};
  s.load_cost = {1, {absl::Milliseconds(20), absl::Milliseconds(80)}};
  s.workers = 80;
  s.ttl = absl::Seconds(60);
  s.soft_ttl = absl::Seconds(50);
  s.stale_for = absl::Seconds(10);
  s.jitter = 0;  // The post's cache-aside had a plain 1-minute TTL.
  s.beta = 10;   // The post's PER used beta 10.
  s.db.workload = DbData::Workload::kMemberPage;
  return s;
}

}  // namespace

long Scenario::ExpectedRequests() const {
  return std::lround(
      rate * (absl::ToDoubleSeconds(ramp) / 2 + absl::ToDoubleSeconds(hold)));
}

std::vector<std::string> ScenarioNames() {
  return {"hotkey-200rps", "member-page-90rps"};
}

absl::StatusOr<Scenario> NamedScenario(const std::string& name) {
  if (name == "hotkey-200rps") return HotKey200();
  if (name == "member-page-90rps") return MemberPage90();
  return absl::InvalidArgumentError(absl::StrCat(
      "paddock_replay: unknown --scenario '", name,
      "'; expected one of: ", absl::StrJoin(ScenarioNames(), ", ")));
}

Scenario Scaled(const Scenario& s, double scale) {
  Scenario out = s;
  for (absl::Duration* d : {&out.ramp, &out.hold, &out.client_timeout, &out.ttl,
                            &out.soft_ttl, &out.stale_for, &out.wait_timeout}) {
    *d = *d * scale;
  }
  return out;
}

}  // namespace paddock::replay
