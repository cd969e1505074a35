#pragma once

// Internal: mutual authentication of a new connection against the job's secret, before the
// first frame. The accepting side sends a challenge (a magic string and a random nonce); the
// dialling side answers with a nonce of its own and HMAC-SHA256(secret, "dial", both nonces);
// the acceptor checks it and proves itself with HMAC-SHA256(secret, "accept", both nonces).
// The secret never crosses the wire; a recorded answer is useless against a fresh challenge.

#include <chrono>
#include <functional>
#include <string>

#include "net/asio.hpp"

namespace baton::net::auth {

using Protocol = asio::generic::stream_protocol;

/// Runs the handshake on `socket` as the dialling or the accepting side. `done` runs once, on
/// `ex`, with an empty string on success or the reason it failed; the caller keeps `socket`
/// alive until then. Gives up after `timeout`.
void authenticate(Protocol::socket& socket, const asio::any_io_executor& ex,
                  const std::string& secret, bool dialler, std::chrono::milliseconds timeout,
                  std::function<void(const std::string& error)> done);

}  // namespace baton::net::auth
