#pragma once

// Framed links between procs over unix-domain sockets or TCP (Asio underneath, kept out of
// this header so only src/net compiles it).
//
// A link carries Envelopes as frames (see wire/envelope.hpp): the header is read first and
// checked against the limits before any part is allocated, and parts are read straight into
// buffers of their own and written with scatter-gather, never concatenated. Each direction
// numbers its frames; a duplicate is dropped, a gap or malformed bytes close the link with a
// reason, and the process and its other links carry on.
//
// Not yet here (see the open issue): reconnect with resend of unacknowledged frames, and
// heartbeats.

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "baton/wire/address.hpp"
#include "baton/wire/envelope.hpp"

namespace baton::net {

class IoThread;
class Link;

/// What a link reports to its owner; both are called on the I/O thread.
struct LinkHandler {
  std::function<void(Envelope)> on_envelope;
  /// Called once, with the reason, when the link closes for any cause.
  std::function<void(const std::string& reason)> on_closed;
};

/// An event loop on a thread of its own; links and listeners run on it.
class IoThread {
 public:
  IoThread();
  ~IoThread();
  IoThread(const IoThread&) = delete;
  IoThread& operator=(const IoThread&) = delete;

  struct Impl;
  Impl& impl() { return *impl_; }

 private:
  std::unique_ptr<Impl> impl_;
};

class Link : public std::enable_shared_from_this<Link> {
 public:
  /// Connects to a unix or tcp address; throws std::runtime_error naming the address and why.
  static std::shared_ptr<Link> connect(IoThread& io, const Address& to, LinkHandler handler,
                                       const DecodeLimits& limits = {});
  virtual ~Link() = default;

  /// Queues an envelope (its seq is assigned here); thread-safe. Throws std::length_error if
  /// it exceeds the frame limits; after the link closed, the envelope is dropped and false
  /// returned.
  virtual bool send(Envelope env) = 0;
  /// Closes the link; the handler's on_closed runs with `reason`.
  virtual void close(const std::string& reason) = 0;
  /// Like close(), and returns once the link is closed; never call it on the I/O thread.
  virtual void close_and_wait(const std::string& reason) = 0;
  virtual bool closed() const = 0;
  /// "unix:///path <- peer" or "tcp://1.2.3.4:5 -> 6.7.8.9:10", for logs.
  virtual std::string describe() const = 0;
};

/// Accepts links on an address; tcp port 0 picks a free port (see address()).
class Listener {
 public:
  static std::unique_ptr<Listener> listen(
      IoThread& io, const Address& at,
      std::function<LinkHandler(const std::shared_ptr<Link>&)> on_accept,
      const DecodeLimits& limits = {});
  virtual ~Listener() = default;
  /// The bound address (with the real port for tcp://host:0).
  virtual Address address() const = 0;
};

}  // namespace baton::net
