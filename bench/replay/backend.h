// File: bench/replay/backend.h
// -----------------------------------------------------------------------------
// What the hot key's rebuild runs against (`--backend`):
//   cpu       the cost model: CPU burnt and waits slept on the server
//             (cost_model.h), as every run before a real database was added;
//   postgres  SQL on a real PostgreSQL through a connection pool per pod
//             (pg_backend.h).
// Uncached requests (the other operations) cost the cost model's
// `other_cost` with either backend.

#ifndef PADDOCK_BENCH_REPLAY_BACKEND_H_
#define PADDOCK_BENCH_REPLAY_BACKEND_H_

#include <atomic>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "cost_model.h"

namespace paddock::replay {

enum class BackendKind { kCpu, kPostgres };

// "cpu" or "postgres".
std::string BackendName(BackendKind kind);

// Parses `--backend`; InvalidArgumentError naming the choices.
absl::StatusOr<BackendKind> ParseBackend(const std::string& name);

// Backend
//
// One pod's backend, created in the pod. Thread-safe: the pod's workers and
// its cache's refresh threads rebuild concurrently.
class Backend {
 public:
  virtual ~Backend() = default;

  // Rebuilds the hot key's value once. Returns OK, CancelledError once
  // `abort` is set (the run is over), or the backend's error.
  virtual absl::Status Rebuild(const std::atomic<bool>& abort) = 0;
};

// The cost model: `cost` performed on the calling thread.
std::unique_ptr<Backend> NewCpuBackend(const StepCost& cost);

}  // namespace paddock::replay

#endif  // PADDOCK_BENCH_REPLAY_BACKEND_H_
