#pragma once

// Framed links between procs over unix-domain sockets (with shared memory) or TCP (Asio
// underneath, kept out of this header so only src/net compiles it).
//
// A link carries Envelopes as frames (see wire/envelope.hpp): the header is read first and
// checked against the limits before any part is allocated, and parts are read straight into
// buffers of their own and written with scatter-gather, never concatenated. Each direction
// numbers its frames; a duplicate is dropped, a gap or malformed bytes close the link with a
// reason, and the process and its other links carry on.
//
// A link outlives its connection. The dialling side opens each connection with a hello naming
// the link's session; the receiver acknowledges frames (every LinkOptions::ack_every frames and
// with every heartbeat), and the sender keeps each frame until it is acknowledged. When a
// connection breaks (a reset, a failed write, or no frame for LinkOptions::dead_after), the
// dialler reconnects with backoff and both sides resend what was not acknowledged; the
// receiver drops the duplicates, so every frame arrives once and in order. A peer that closes
// its end (or whose process dies) closes the link at once; one that stays away longer than
// LinkOptions::reconnect_for closes it with the reason.
//
// With LinkOptions::secret set, each connection first proves that both ends hold the job's
// secret (see LinkOptions::secret); nothing is read as a frame before that.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>

#include "baton/wire/address.hpp"
#include "baton/wire/envelope.hpp"

namespace baton::net {

class IoThread;
class Link;

/// How a link ended, as its on_closed hears it.
enum class LinkEnd {
  closed,       ///< this side closed it (Link::close, or a connection handed to its session)
  peer_closed,  ///< the peer closed it on purpose: its goodbye came
  lost,         ///< any other end: the peer's process went or fell silent, a frame broke the
                ///< protocol, or a broken connection was not restored in time
};

/// What a link reports to its owner; both are called on the I/O thread.
struct LinkHandler {
  /// Each envelope received, in order; the handler moves from it what it keeps (passed by
  /// reference, not by value, so that none of the calls it goes through moves it again), and
  /// what it leaves is released when it returns.
  std::function<void(Envelope&&)> on_envelope;
  /// Called once, with how it ended and why, when the link closes for any cause.
  std::function<void(LinkEnd end, const std::string& reason)> on_closed;
  /// Called once, just before on_closed, with the envelopes sent on the link that were not
  /// yet written, and on TCP those written but not acknowledged, when the link closes for good.
  /// A written one may or may not have reached the peer's process before it went away.
  std::function<void(std::vector<Envelope> unsent)> on_unsent;
};

/// TLS for links over TCP (unix links never leave the host and never use it): mutual, with
/// certificates checked against a CA. PEM files.
struct TlsOptions {
  std::string cert_file;  // this end's certificate (its chain, leaf first)
  std::string key_file;   // its private key
  std::string ca_file;    // the CA a peer's certificate must chain to
  bool enabled() const { return !cert_file.empty(); }
};

/// Writes a fresh certificate authority for one job and a certificate it signed (EC P-256,
/// valid for `days`) into `dir` as ca.pem, cert.pem and key.pem (the key readable by its
/// owner only), and returns TlsOptions naming them.
TlsOptions make_job_certificates(const std::string& dir, int days = 30);

/// False when the environment says BATON_SHM=0 (see LinkOptions::shared_memory).
bool shared_memory_by_default();

/// How a link watches and repairs its connection; every field has a working default.
struct LinkOptions {
  DecodeLimits limits;
  /// How often each side sends a heartbeat (which also acknowledges what arrived).
  std::chrono::milliseconds heartbeat{1000};
  /// Nothing heard for this long (no frame, and no bytes of a large one): the connection is
  /// taken as broken and repaired.
  std::chrono::milliseconds dead_after{5000};
  /// How long a broken link tries to reconnect (dialler) or waits for the peer to come back
  /// (listener) before it closes for good. A peer that went silent is lost within
  /// dead_after + reconnect_for: 10 s by default.
  std::chrono::milliseconds reconnect_for{5000};
  /// Frames received between two acknowledgements, at most.
  std::size_t ack_every = 64;
  /// Bytes a link may hold for sending (not yet written, or on TCP not yet acknowledged)
  /// before send() makes its caller wait (see Link::send).
  std::size_t max_queued_bytes = std::size_t{64} << 20;
  /// How long send() waits for room before it gives up with LinkFullError.
  std::chrono::milliseconds send_timeout{30000};
  /// The job's secret. When set, every connection (the first and every repair) starts with a
  /// mutual challenge-response (HMAC-SHA256) that proves both ends hold it without sending it;
  /// a peer that fails it, skips it or replays an old answer is refused, with a logged reason,
  /// before any frame is read. Empty: connections are not authenticated.
  std::string secret;
  /// Links between procs of one host (unix addresses) carry their frames through shared memory:
  /// the dialler maps two rings in a memfd and hands it over the authenticated socket, which
  /// then only wakes a side that sleeps and tells when the peer's process ends. Off: frames go
  /// through the socket. The default is on unless the environment says BATON_SHM=0.
  bool shared_memory = shared_memory_by_default();
  /// TLS on TCP connections (after the secret's handshake, before any frame); off when empty.
  /// A peer whose certificate does not chain to ca_file is refused.
  TlsOptions tls;
  /// Where the lines that links and listeners log go (one line a call, no newline), those at or
  /// above BATON_LOG's level (refused connections: warn; repairs and closes: debug); empty:
  /// baton's log on stderr.
  std::function<void(const std::string& line)> log;
  /// A listener logs at most this many refused connections per refusal_log_window; the others
  /// are counted, and one line at the window's end says how many there were and the last
  /// reason. Only the lines are limited: every such connection is refused all the same.
  std::size_t refusal_log_lines = 10;
  std::chrono::milliseconds refusal_log_window{10000};
};

/// A fresh random secret for a job (64 hex digits, from OpenSSL's generator).
std::string new_job_secret();

/// An event loop on a thread of its own; links and listeners run on it.
///
/// Work that a handler wakes (an actor a message arrived for, when that actor was idle) runs on
/// this thread right after the handler, sparing a hand-off to another thread. If such work
/// runs long (or blocks), a watchdog thread takes over the event loop meanwhile, so links keep
/// reading and beating; an idle IoThread has no thread awake.
class IoThread {
 public:
  IoThread();
  ~IoThread();
  IoThread(const IoThread&) = delete;
  IoThread& operator=(const IoThread&) = delete;

  struct Impl;
  Impl& impl() { return *impl_; }

 private:
  std::shared_ptr<Impl> impl_;  // shared with the thread, which may outlive this on its own
};

/// Link::send found the link full for longer than LinkOptions::send_timeout: the receiver is
/// not keeping up (or not reading at all).
class LinkFullError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class Link : public std::enable_shared_from_this<Link> {
 public:
  /// Connects to a unix or tcp address; throws std::runtime_error naming the address and why.
  /// On an I/O thread (in a link's handler) it never waits: the link connects on its own, what
  /// is sent meanwhile waits for it, and a failure closes the link (on_unsent, then on_closed
  /// with "cannot connect to ..."), bounded by LinkOptions::dead_after.
  static std::shared_ptr<Link> connect(IoThread& io, const Address& to, LinkHandler handler,
                                       const LinkOptions& options = {});
  virtual ~Link() = default;

  /// Queues an envelope (its seq is assigned here); thread-safe. Throws std::length_error if
  /// it exceeds the frame limits; after the link closed, the envelope is dropped and false
  /// returned. Backpressure: while the link holds more than LinkOptions::max_queued_bytes, a
  /// caller waits for room, and after LinkOptions::send_timeout throws LinkFullError with the
  /// envelope not sent. The I/O thread never waits (what it forwards goes over the bound).
  virtual bool send(Envelope env) = 0;
  /// Stops reading from the peer after the envelope being delivered (the receiver is full);
  /// the peer's sends then wait in turn. Callable from the link's own handler.
  virtual void pause_reading() = 0;
  /// Reads again after pause_reading(); thread-safe.
  virtual void resume_reading() = 0;
  /// Bytes held for sending now.
  virtual std::size_t queued_bytes() const = 0;
  /// True while the link holds more than LinkOptions::max_queued_bytes (a send would wait).
  virtual bool full() const = 0;
  /// For senders that must not wait (the I/O thread): if the link holds more than
  /// LinkOptions::max_queued_bytes, keeps `f` to run (on the I/O thread) once it is down to half,
  /// or closed, and returns true; otherwise returns false and drops `f`.
  virtual bool when_room(std::function<void()> f) = 0;
  /// Closes the link; the handler's on_closed runs with LinkEnd::closed and `reason`, and the
  /// peer's with LinkEnd::peer_closed.
  virtual void close(const std::string& reason) = 0;
  /// Like close(), and returns once the link is closed; never call it on the I/O thread.
  virtual void close_and_wait(const std::string& reason) = 0;
  virtual bool closed() const = 0;
  /// "unix:///path <- peer" or "tcp://1.2.3.4:5 -> 6.7.8.9:10", for logs.
  virtual std::string describe() const = 0;
  /// What carries the frames: "shm" (shared memory, once both ends switched to it), "unix",
  /// "tcp" or "tls".
  virtual std::string transport() const = 0;
  /// Connections this link has had (1 until a broken one was repaired).
  virtual std::uint64_t connections() const = 0;
};

/// Accepts links on an address; tcp port 0 picks a free port (see address()).
class Listener {
 public:
  static std::unique_ptr<Listener> listen(
      IoThread& io, const Address& at,
      std::function<LinkHandler(const std::shared_ptr<Link>&)> on_accept,
      const LinkOptions& options = {});
  virtual ~Listener() = default;
  /// The bound address (with the real port for tcp://host:0).
  virtual Address address() const = 0;
};

}  // namespace baton::net
