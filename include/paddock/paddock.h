// File: paddock/paddock.h
// -----------------------------------------------------------------------------
// Umbrella header: everything a user of paddock needs.

#ifndef PADDOCK_PADDOCK_H_
#define PADDOCK_PADDOCK_H_

#include "paddock/cache.h"       // IWYU pragma: export
#include "paddock/clock.h"       // IWYU pragma: export
#include "paddock/executor.h"    // IWYU pragma: export
#include "paddock/key_hash.h"    // IWYU pragma: export
#include "paddock/listener.h"    // IWYU pragma: export
#include "paddock/options.h"     // IWYU pragma: export
#include "paddock/policy.h"      // IWYU pragma: export
#include "paddock/prometheus.h"  // IWYU pragma: export
#include "paddock/stats.h"       // IWYU pragma: export
#include "paddock/version.h"     // IWYU pragma: export

#endif  // PADDOCK_PADDOCK_H_
