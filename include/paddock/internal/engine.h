// File: paddock/internal/engine.h
// -----------------------------------------------------------------------------
// The map of a cache's load engine: its rooms, one per stage, in the order a
// key passes them, and the names they share. Each room is a member class of
// `Engine<Core>`, defined in its own header, so it sees the core's types
// (K, V, Entry, Shard, ...) and the other rooms by their plain names; from
// outside, a room is `Engine<Core>::Lookup`.
//
// Every room is made on the spot over a cache's internal::CacheCore and holds
// only a reference to it; each is thread-safe as the core is.

#ifndef PADDOCK_INTERNAL_ENGINE_H_
#define PADDOCK_INTERNAL_ENGINE_H_

#include "paddock/internal/load_state.h"

namespace paddock::internal {

template <typename Core>
struct Engine {
  using K = typename Core::Key;
  using V = typename Core::Value;
  using Entry = typename Core::Entry;
  using Shard = typename Core::Shard;
  using Writer = typename Core::Writer;
  using Flight = typename Core::Flight;
  using Outcome = typename Core::Outcome;
  using Callback = typename Core::Callback;
  using LoadStart = typename Core::LoadStart;
  using Load = internal::Load<Core>;

  class Lookup;        // lookup.h: what a shard holds for a key, served.
  class Writes;        // writes.h: new entries, Put, local invalidation.
  class LoaderCall;    // loader_call.h: the user's loader, exceptions caught.
  class Waiting;       // waiting.h: blocking and asynchronous waiters.
  class FleetPath;     // fleet_path.h: the shared tier's ask, wait and fill.
  class OutcomeStore;  // outcome_store.h: how every load ends.
  class LoadPipeline;  // load_pipeline.h: one load, from leader to outcome.
  class Refresh;       // refresh.h: background refreshes and parked loads.
  class Leading;       // leading.h: Get's register-or-join, and its lead.
  class Front;         // front.h: admission, serving, GetAsync's miss.
};

}  // namespace paddock::internal

#endif  // PADDOCK_INTERNAL_ENGINE_H_
