// The frame writer of a link: one frame at a time, control frames between data frames; and what
// the peer acknowledged, dropped from what is kept for resending.

#include <sys/socket.h>
#include <sys/uio.h>

#include <algorithm>
#include <climits>

#include "net/link_impl.hpp"
#include "wire/slab.hpp"

namespace baton::net::internal {

std::size_t StreamLink::queued_bytes() const {
  std::lock_guard lock(mu_);
  return out_bytes_;
}

/// Drops the frames the peer acknowledged: those with seq < `next`.
void StreamLink::trim(std::uint64_t next) {
  std::lock_guard lock(mu_);
  while (!out_.empty() && written_ > 0 && out_base_seq_ < next) {
    pop_front_locked();
    --written_;
  }
}

/// A unix socket is never repaired (see broken()), so what is written needs no keeping.
void StreamLink::drop_written_locked(std::vector<Frame>* spent) {
  if (!unix_) return;
  while (written_ > 0) {
    pop_front_locked(spent);
    --written_;
  }
}

void StreamLink::pop_front_locked(std::vector<Frame>* spent) {
  out_bytes_ -= out_.front().size();
  if (spent != nullptr) spent->push_back(std::move(out_.front()));
  out_.pop_front();
  ++out_base_seq_;
  if (out_bytes_ <= options_.max_queued_bytes / 2) room_came_locked();
}

void StreamLink::room_came_locked() {
  room_.notify_all();
  for (auto& f : room_waiters_) asio::post(ctx_, std::move(f));
  room_waiters_.clear();
}

bool StreamLink::full() const {
  std::lock_guard lock(mu_);
  return !closed_ && out_bytes_ > options_.max_queued_bytes;
}

bool StreamLink::when_room(std::function<void()> f) {
  std::lock_guard lock(mu_);
  if (closed_ || out_bytes_ <= options_.max_queued_bytes) return false;
  room_waiters_.push_back(std::move(f));
  return true;
}

void StreamLink::send_ack() {
  unacked_in_ = 0;
  queue_control(control_frame(kAck, next_recv_seq_));
}

void StreamLink::queue_control(Frame frame) {
  std::lock_guard lock(mu_);
  if (closed_) return;
  ctl_.push_back(std::move(frame));
  if (connected_) start_writer_locked();
}

void StreamLink::start_writer_locked() {
  if (writing_ || !connected_) return;
  writing_ = true;
  asio::post(strand_, [self = shared(), epoch = epoch_.load()] { self->write_next(epoch); });
}

/// Data frames queued behind the one being written go out in the same write, up to these: a
/// stream of sends that outruns the peer costs one write and one lock per batch, not per frame.
constexpr std::size_t kBatchFrames = 64;
constexpr std::size_t kBatchBytes = std::size_t{256} << 10;

void StreamLink::write_next(std::uint64_t epoch) {
  Frame* frame = nullptr;
  bool control = false;
  std::size_t skip = 0;
  std::size_t count = 0;  // data frames in this write
  batch_.clear();         // (a control frame goes alone)
  {
    std::lock_guard lock(mu_);
    if (epoch != epoch_) return;
    if (closed_ || !connected_) {
      writing_ = false;
      return;
    }
    if (!front_started_locked() && !ctl_.empty()) {
      frame = &ctl_.front();
      control = true;
    } else if (written_ < out_.size()) {
      frame = &out_[written_];
      skip = front_sent_;  // bytes a direct write already sent
      count = 1;
      // (A deque keeps its elements where they are as frames are queued behind them.)
      for (std::size_t bytes = frame->size(), i = written_ + 1;
           !tls_ && i < out_.size() && count < kBatchFrames; ++i) {
        const Frame& next = out_[i];
        if (bytes + next.size() > kBatchBytes) break;
        if (std::any_of(next.parts.begin(), next.parts.end(),
                        [](const Bytes& p) { return wire::travels_as_slab(p.size()); })) {
          break;  // goes first in a write of its own, its memfds ahead of it
        }
        bytes += next.size();
        batch_.push_back(&next);
        ++count;
      }
    } else {
      writing_ = false;
      return;
    }
  }
  if (tls_) return write_sealed(epoch, *frame, control);
  // Over shared memory a large part goes as a slab: its memfd on the socket, not its bytes.
  const bool slabs = !control && shm_ && shm_->writing;
  if (slabs && !send_slabs(*frame)) return;  // closed, with the reason
  buffers_.clear();
  frame_ends_.clear();
  std::size_t total = 0;
  auto add = [&](const void* data, std::size_t size) {
    if (skip >= size) {
      skip -= size;
      return;
    }
    buffers_.emplace_back(static_cast<const char*>(data) + skip, size - skip);
    total += size - skip;
    skip = 0;
  };
  add(frame->header.data(), frame->header.size());
  for (const Bytes& p : frame->parts) {
    if (!slabs || !wire::travels_as_slab(p.size())) add(p.data(), p.size());
  }
  frame_ends_.push_back(total);
  for (const Frame* next : batch_) {
    add(next->header.data(), next->header.size());
    for (const Bytes& p : next->parts) add(p.data(), p.size());
    frame_ends_.push_back(total);
  }
  in_flight_ = true;
  async_write_all(buffers_, asio::bind_executor(strand_, [self = shared(), control, count, epoch](
                                                             asio::error_code ec, std::size_t n) {
                    if (epoch != self->epoch_) return;
                    self->in_flight_ = false;
                    if (ec) {
                      if (!control) self->wrote_part(n);
                      return self->write_failed(epoch, ec);
                    }
                    self->wrote(epoch, control, count);
                  }));
}

/// The frames of a write went out whole (strand): the next ones follow.
void StreamLink::wrote(std::uint64_t epoch, bool control, std::size_t count) {
  {
    std::lock_guard lock(mu_);
    if (control) {
      ctl_.pop_front();
      if (shm_ && shm_->switch_after > 0 && --shm_->switch_after == 0) writes_switched_locked();
    } else {
      written_ += count;
      front_sent_ = 0;
      drop_written_locked(&spent_);  // a sender waiting for the lock does not wait for free()
    }
  }
  spent_.clear();
  // Closed meanwhile: what went out is written (not returned to its senders as unsent).
  if (close_after_write_) return shutdown(*close_after_write_, LinkEnd::closed, true);
  write_next(epoch);
}

/// A write of data frames failed after `n` of its bytes (strand): the frames it wrote whole are
/// written, as in wrote(), so that a closing link does not return them to their senders as
/// unsent; the one it cut is not.
void StreamLink::wrote_part(std::size_t n) {
  std::lock_guard lock(mu_);
  std::size_t whole = 0;
  while (whole < frame_ends_.size() && frame_ends_[whole] <= n) ++whole;
  if (whole == 0) return;
  written_ += whole;
  front_sent_ = whole < frame_ends_.size() ? n - frame_ends_[whole - 1] : 0;
  drop_written_locked();
}

/// On a TLS link (strand): seals the frame a piece at a time, at most kTlsPiece of plaintext,
/// and writes the records to the socket.
void StreamLink::write_sealed(std::uint64_t epoch, const Frame& frame, bool control) {
  {
    std::lock_guard lock(mu_);
    if (tls_out_sent_ == tls_out_.size()) tls_seal_locked(frame);
    buffers_.assign(
        1, asio::const_buffer(tls_out_.data() + tls_out_sent_, tls_out_.size() - tls_out_sent_));
  }
  in_flight_ = true;
  asio::async_write(socket_, buffers_,
                    asio::bind_executor(strand_, [self = shared(), control, epoch, &frame](
                                                     asio::error_code ec, std::size_t) {
                      if (epoch != self->epoch_) return;
                      self->in_flight_ = false;
                      if (ec) return self->write_failed(epoch, ec);
                      bool more = false;
                      {
                        std::lock_guard lock(self->mu_);
                        self->tls_out_sent_ = self->tls_out_.size();
                        more = self->tls_sealed_ < frame.size();  // more of it to seal
                        if (!more) self->tls_reset_locked();
                      }
                      if (more) return self->write_sealed(epoch, frame, control);
                      self->wrote(epoch, control);
                    }));
}

void StreamLink::tls_seal_locked(const Frame& frame) {
  std::vector<std::span<const std::byte>> pieces;
  pieces.reserve(1 + frame.parts.size());
  pieces.emplace_back(reinterpret_cast<const std::byte*>(frame.header.data()), frame.header.size());
  for (const Bytes& p : frame.parts) pieces.emplace_back(p.data(), p.size());
  const std::size_t n = std::min(kTlsPiece, frame.size() - tls_sealed_);
  tls_out_.clear();
  tls_out_sent_ = 0;
  tls_->seal(pieces, tls_sealed_, n, tls_out_);
  tls_sealed_ += n;
}

void StreamLink::tls_reset_locked() {
  tls_out_.clear();
  tls_out_sent_ = 0;
  tls_sealed_ = 0;
}

/// A write failed (strand). On a unix socket the peer closed its end or died, and what it wrote
/// before is still ours to read: writing stops, and the reader closes the link at the end of
/// the stream, after the frames before it (unless reading is paused: then at once).
void StreamLink::write_failed(std::uint64_t epoch, const asio::error_code& ec) {
  if (unix_ && ec != asio::error::operation_aborted && !parked_) return;
  broken(epoch, ec);
}

/// One non-blocking gather write of a whole frame; returns the bytes the socket took.
std::size_t StreamLink::write_now(const Frame& frame) {
  if (shm_ && shm_->writing) {
    for (const Bytes& p : frame.parts) {
      if (wire::travels_as_slab(p.size())) return 0;  // its slab goes the asynchronous way
    }
    return shm_write_now(frame);
  }
  if (tls_ctx_) {
    // TLS: a frame small enough is sealed here and written as a plain link's bytes are; what
    // the socket does not take now goes the asynchronous way (tls_sealed_ says it is begun).
    if (!tls_ || frame.size() > kTlsPiece) return 0;
    tls_seal_locked(frame);
    const ssize_t n = ::send(socket_.native_handle(), tls_out_.data(), tls_out_.size(),
                             MSG_DONTWAIT | MSG_NOSIGNAL);
    tls_out_sent_ = n > 0 ? static_cast<std::size_t>(n) : 0;
    if (tls_out_sent_ < tls_out_.size()) return 0;
    tls_reset_locked();
    return frame.size();
  }
  std::vector<iovec> iov;
  iov.reserve(1 + frame.parts.size());
  iov.push_back({const_cast<char*>(frame.header.data()), frame.header.size()});
  for (const Bytes& p : frame.parts) {
    if (p.size() > 0) iov.push_back({const_cast<std::byte*>(p.data()), p.size()});
  }
  msghdr msg{};
  msg.msg_iov = iov.data();
  msg.msg_iovlen = std::min<std::size_t>(iov.size(), IOV_MAX);
  const ssize_t n = ::sendmsg(socket_.native_handle(), &msg, MSG_DONTWAIT | MSG_NOSIGNAL);
  return n > 0 ? static_cast<std::size_t>(n) : 0;  // errors surface on the async path
}

}  // namespace baton::net::internal
