// The backend choice and the cost-model backend.

#include "backend.h"

#include <atomic>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "cost_model.h"

namespace paddock::replay {
namespace {

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(const StepCost& cost) : cost_(cost) {}

  absl::Status Rebuild(const std::atomic<bool>& abort) override {
    if (!Perform(cost_, abort)) {
      return absl::CancelledError("paddock_replay: run over");
    }
    return absl::OkStatus();
  }

 private:
  const StepCost cost_;
};

}  // namespace

std::string BackendName(BackendKind kind) {
  return kind == BackendKind::kPostgres ? "postgres" : "cpu";
}

absl::StatusOr<BackendKind> ParseBackend(const std::string& name) {
  if (name == "cpu") return BackendKind::kCpu;
  if (name == "postgres") return BackendKind::kPostgres;
  return absl::InvalidArgumentError(
      absl::StrCat("paddock_replay: unknown --backend '", name,
                   "'; expected cpu or postgres"));
}

std::unique_ptr<Backend> NewCpuBackend(const StepCost& cost) {
  return std::make_unique<CpuBackend>(cost);
}

}  // namespace paddock::replay
