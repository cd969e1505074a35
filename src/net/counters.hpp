#pragma once

// Internal: what a link has carried, for the metrics of the proc that owns it.

#include <cstdint>

#include "baton/net/link.hpp"

namespace baton::net {

struct LinkCounters {
  std::uint64_t sent_messages = 0;  // envelopes queued to send (control frames not counted)
  std::uint64_t sent_bytes = 0;     // their frames' bytes
  std::uint64_t received_messages = 0;
  std::uint64_t received_bytes = 0;
};

/// What `link` carried so far (zeros for a link of another kind than the runtime's own).
LinkCounters counters_of(const Link& link);

}  // namespace baton::net
