// The frame reader of a link: prefix, header, then each part into its own buffer; link control
// frames (hello, ack, bye), and a hello that hands a connection to its session's link.

#include <algorithm>
#include <memory>
#include <tuple>
#include <vector>

#include "net/link_impl.hpp"
#include "wire/slab.hpp"

namespace baton::net::internal {

/// Reads exactly `buffer`, then runs `next` on the strand; a failed read breaks the
/// connection of epoch `epoch` (a handler of an older connection is ignored).
void StreamLink::read_then(asio::mutable_buffer buffer, std::uint64_t epoch,
                           void (StreamLink::*next)(std::uint64_t)) {
  // Bytes already in a shared-memory ring are taken now; nested as complete() nests handlers.
  if (read_depth_ < kReadDepth && shm_take(buffer)) {
    ++read_depth_;
    ((*this).*next)(epoch);
    --read_depth_;
    return;
  }
  async_read_all(buffer, asio::bind_executor(strand_, [self = shared(), next, epoch](
                                                          asio::error_code ec, std::size_t) {
                   if (epoch != self->epoch_) return;
                   if (ec) return self->broken(epoch, ec);
                   ((*self).*next)(epoch);
                 }));
}

void StreamLink::read_prefix(std::uint64_t epoch) {
  read_then(asio::buffer(prefix_), epoch, &StreamLink::on_prefix);
}

void StreamLink::on_prefix(std::uint64_t epoch) {
  std::size_t len = 0;
  try {
    len = decode_header_length(prefix_, options_.limits);
  } catch (const DecodeError& e) {
    return fail(e.what());
  }
  header_.resize(len);  // (kept from frame to frame: only bytes it grows by are zeroed)
  read_then(asio::buffer(header_), epoch, &StreamLink::on_header);
}

/// A header buffer this large or smaller is kept from frame to frame.
constexpr std::size_t kKeptHeaderBytes = std::size_t{16} << 10;

void StreamLink::on_header(std::uint64_t epoch) {
  incoming_ = Envelope{};
  const std::size_t len = header_.size();
  try {
    part_lengths_ = decode_header(header_, incoming_, options_.limits);
  } catch (const DecodeError& e) {
    return fail(e.what());
  }
  // The buffer is kept for the next header, unless a large one grew it.
  if (header_.capacity() > kKeptHeaderBytes) std::string().swap(header_);
  incoming_.body.parts.reserve(part_lengths_.size());
  incoming_bytes_ = sizeof prefix_ + len;
  for (const std::uint64_t n : part_lengths_) incoming_bytes_ += n;
  read_part(epoch, 0);
}

void StreamLink::read_part(std::uint64_t epoch, std::size_t i) {
  for (; i < part_lengths_.size(); ++i) {
    if (shm_ && shm_->reading && wire::travels_as_slab(part_lengths_[i])) {
      return read_slab(epoch, i);
    }
    std::vector<std::byte> part(static_cast<std::size_t>(part_lengths_[i]));
    if (!shm_take(asio::buffer(part))) {
      return read_chunk(epoch, i, std::make_shared<std::vector<std::byte>>(std::move(part)), 0);
    }
    incoming_.body.parts.push_back(Bytes::adopt(std::move(part)));
  }
  deliver(epoch);
}

void StreamLink::read_chunk(std::uint64_t epoch, std::size_t i,
                            std::shared_ptr<std::vector<std::byte>> buf, std::size_t done) {
  if (done == buf->size()) {
    incoming_.body.parts.push_back(Bytes::adopt(std::move(*buf)));
    return read_part(epoch, i + 1);
  }
  // A large part is read a chunk at a time, and each chunk counts as hearing from the peer: a
  // frame that takes longer than dead_after to arrive is not taken for silence.
  constexpr std::size_t kChunk = std::size_t{4} << 20;
  const std::size_t n = std::min(kChunk, buf->size() - done);
  auto* at = buf->data() + done;
  async_read_all(asio::buffer(at, n),
                 asio::bind_executor(strand_, [self = shared(), buf, i, epoch, done, n](
                                                  asio::error_code ec, std::size_t) mutable {
                   if (epoch != self->epoch_) return;
                   if (ec) return self->broken(epoch, ec);
                   self->last_recv_ = coarse_now();
                   self->read_chunk(epoch, i, std::move(buf), done + n);
                 }));
}

void StreamLink::deliver(std::uint64_t epoch) {
  last_recv_ = coarse_now();
  if (const std::string* kind = incoming_.header(kControl)) return on_control(epoch, *kind);
  ++frames_in_;
  const std::uint64_t seq = incoming_.seq;
  if (seq < next_recv_seq_) {
    read_prefix(epoch);  // a duplicate of a frame already delivered (resent after a repair)
    return;
  }
  if (seq > next_recv_seq_) {
    return fail("frame sequence gap: expected " + std::to_string(next_recv_seq_) + ", got " +
                std::to_string(seq));
  }
  ++next_recv_seq_;
  received_messages_.fetch_add(1, std::memory_order_relaxed);
  received_bytes_.fetch_add(incoming_bytes_, std::memory_order_relaxed);
  if (!unix_ && ++unacked_in_ >= options_.ack_every) send_ack();
  if (handler_.on_envelope) {
    // Out of incoming_, so that what the handler does not take (a reply's body it only reads,
    // an envelope it drops) goes when it returns, not when the link's next frame comes.
    Envelope env = std::move(incoming_);
    try {
      handler_.on_envelope(std::move(env));
    } catch (const std::exception& e) {
      log_line(options_, detail::LogLevel::error,
               "link " + description_ + ": envelope handler threw: " + e.what());
    }
  }
  if (epoch != epoch_) return;
  if (pause_requested_.load(std::memory_order_acquire)) {
    parked_ = epoch;  // resume_reading() picks up from here
    return;
  }
  read_prefix(epoch);
}

void StreamLink::resume_reading() {
  asio::post(strand_, [self = shared()] {
    self->pause_requested_.store(false, std::memory_order_release);
    if (!self->parked_) return;
    const std::uint64_t epoch = *self->parked_;
    self->parked_.reset();
    self->last_recv_ = coarse_now();  // the silence was ours, not the peer's
    if (epoch == self->epoch_ && !self->closed()) self->read_prefix(epoch);
  });
}

void StreamLink::on_control(std::uint64_t epoch, const std::string& kind) {
  std::uint64_t a = 0;
  std::uint64_t b = 0;
  try {
    std::tie(a, b) = decode<std::tuple<std::uint64_t, std::uint64_t>>(incoming_.body);
  } catch (const DecodeError& e) {
    return fail(std::string("malformed link control frame: ") + e.what());
  }
  if (kind == kAck) {
    trim(a);
  } else if (kind == kBye) {
    // Its reason, if it gave one, printable and cut short: a hostile peer writes what it likes.
    const std::string* why = incoming_.header(kReason);
    const std::string said = why == nullptr ? "" : detail::printable(*why);
    return shutdown(said.empty() ? "peer closed the link" : "peer closed the link: " + said,
                    LinkEnd::peer_closed);
  } else if (kind == kShmOffer) {
    return take_shm(epoch);
  } else if (kind == kShmTaken) {
    return shm_taken(epoch, a);
  } else if (kind == kHello) {
    if (a == 0) return fail("a hello with no session");
    if (redial_) {
      answered_ = true;
      trim(b);  // the listener's answer (on a repaired connection: what it has)
    } else if (!adopt_session(a, b)) {
      return;  // the connection went to the link it belongs to
    }
  } else {
    return fail("unknown link control frame '" + detail::printable(kind) + "'");
  }
  read_prefix(epoch);
}

/// On the accepting side: the first hello of a connection names its session. A new session
/// is this link's; a known one takes the connection over, and this link ends quietly.
bool StreamLink::adopt_session(std::uint64_t session, std::uint64_t peer_expects) {
  if (session_ == session) {
    trim(peer_expects);
    return true;
  }
  if (session_ != 0 || frames_in_ != 0 || !sessions_) {
    fail("a hello in the middle of a link");
    return false;
  }
  std::shared_ptr<StreamLink> owner;
  {
    std::lock_guard lock(sessions_->mu);
    auto& slot = sessions_->by_id[session];
    owner = slot.lock();
    if (!owner || owner->closed()) {
      slot = shared();
      owner = nullptr;
    }
  }
  if (!owner) {
    session_ = session;
    trim(peer_expects);
    queue_control(control_frame(kHello, session_, next_recv_seq_));
    return true;
  }
  auto taken =
      std::make_shared<std::pair<Protocol::socket, std::unique_ptr<TlsSession>>>(take_socket());
  shutdown("connection resumed by its session's link", LinkEnd::closed);
  asio::post(owner->strand_, [owner, peer_expects, taken]() mutable {
    owner->resume(std::move(taken->first), std::move(taken->second), peer_expects);
    owner->queue_control(control_frame(kHello, owner->session_, owner->next_recv_seq_));
  });
  return false;
}

std::pair<Protocol::socket, std::unique_ptr<TlsSession>> StreamLink::take_socket() {
  std::lock_guard lock(mu_);
  ++epoch_;
  return {std::move(socket_), std::move(tls_)};
}

void StreamLink::complete(IoHandler handler, asio::error_code ec, std::size_t n) {
  // Frames already in the ring are read on, up to kReadDepth, even when one of them woke work that
  // runs after this handler (an actor run to completion on this thread): that work then takes every
  // message read for it in one turn, instead of a turn of the loop per frame. Whatever ends the
  // run (an empty ring, or the depth) leaves the read waiting in the loop, where the watchdog's
  // loop serves it if that work blocks.
  if (read_depth_ < kReadDepth) {
    ++read_depth_;
    handler(ec, n);
    --read_depth_;
    return;
  }
  asio::post(strand_, [handler = std::move(handler), ec, n] { handler(ec, n); });
}

void StreamLink::tls_read(asio::mutable_buffer buffer, std::size_t done, IoHandler handler) {
  std::string error;
  bool peer_closed = false;
  auto* data = static_cast<std::byte*>(buffer.data());
  done += tls_->take({data + done, buffer.size() - done}, error, peer_closed);
  if (!error.empty()) return fail(error);
  if (done == buffer.size()) return complete(std::move(handler), {}, done);
  if (peer_closed) return complete(std::move(handler), asio::error::eof, done);
  const std::span<std::byte> space = tls_->read_space();
  socket_.async_read_some(
      asio::buffer(space.data(), space.size()),
      asio::bind_executor(strand_,
                          [self = shared(), buffer, done, handler = std::move(handler),
                           session = tls_.get()](asio::error_code ec, std::size_t n) mutable {
                            // A connection handed to another link, or closed, is no longer this
                            // read's.
                            if (ec || session != self->tls_.get()) {
                              return handler(ec ? ec : asio::error::operation_aborted, done);
                            }
                            session->received(n);
                            self->tls_read(buffer, done, std::move(handler));
                          }));
}

}  // namespace baton::net::internal
