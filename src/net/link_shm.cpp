// Shared memory under a link between procs of one host: the frames that would go through the
// unix socket go through two rings in a memfd (shm_ring.hpp) instead, with the same framing,
// sequence numbers, limits and backpressure. A side that sleeps is woken through an eventfd (a
// doorbell: one per direction); the socket stays, to carry slabs' memfds and to tell when the
// peer's process ends (its end of stream).
//
// The switch, at a frame boundary in each direction:
//   dialler:  hello, offer, then one byte carrying the memfd and the two eventfds (SCM_RIGHTS),
//             all on the socket as the first things written; every later frame goes to its ring.
//   listener: reads the offer, then the byte and the fds; maps the region and reads the
//             dialler's ring from then on; writes "taken" as its last frame on the socket, and
//             its frames to its ring after it; then one byte carrying its wake group's eventfd
//             (wake_group.hpp), if "taken" said one follows, before any slab's memfd.
//   dialler:  reads the socket until "taken", and its ring after it; watches the wake group
//             once its eventfd comes.
// The listener rings only once its writes are past the switch.

#include <sched.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "net/io_thread.hpp"
#include "net/link_impl.hpp"
#include "wire/slab.hpp"

namespace baton::net {

bool shared_memory_by_default() {
  const char* v = std::getenv("BATON_SHM");
  return v == nullptr || std::strcmp(v, "0") != 0;
}

namespace internal {

namespace {
// Memfds the peer may send ahead of the frames that use them.
constexpr std::size_t kMaxPendingSlabs = 4096;
// After a deferred look at an empty ring found nothing: chances to defer left out.
constexpr int kDeferSkips = 8;
}  // namespace

StreamLink::Shm::~Shm() {
  for (const int fd : fds) ::close(fd);
  close_bells();
}

void StreamLink::Shm::attach_rings(bool dialler) {
  const shm::RegionLayout l = shm::layout(region.base, region.capacity);
  const int mine = dialler ? 0 : 1;
  out = shm::RingEnd(l.control[mine], l.data[mine], region.capacity);
  in = shm::RingEnd(l.control[1 - mine], l.data[1 - mine], region.capacity);
}

StreamLink::IoHandler StreamLink::Shm::Op::unpark() {
  const auto slot = parked.lock();
  return slot ? std::exchange(*slot, nullptr) : nullptr;
}

void StreamLink::Shm::Op::abort() {
  handler = nullptr;
  pending = false;
  parked.reset();  // the wait ends: a later one (none, once closed) would start its own
  wait.cancel();
}

/// A sender's thread, before the envelope is queued: its large parts become slabs there (the
/// copy, if any, costs the sender, not the I/O thread), if the link runs over shared memory.
void StreamLink::slabs_for(Envelope& env) {
  bool large = false;
  for (const Bytes& p : env.body.parts) large = large || wire::travels_as_slab(p.size());
  if (!large) return;
  {
    std::lock_guard lock(mu_);
    if (!shm_ || !shm_->writing) return;
  }
  for (Bytes& p : env.body.parts) {
    if (!wire::travels_as_slab(p.size())) continue;
    try {
      p = wire::to_slab(p);
    } catch (const std::exception&) {
      return;  // tried again on the I/O thread, which closes the link if it fails there too
    }
  }
}

/// The writer (strand), before a data frame goes to the ring: sends the memfd of each of its
/// large parts, in order, making a slab of any that is not one yet. False: the link closed.
bool StreamLink::send_slabs(Frame& frame) {
  for (Bytes& p : frame.parts) {
    if (!wire::travels_as_slab(p.size())) continue;
    std::string error;
    try {
      p = wire::to_slab(p);
      error = shm::send_fd(socket_.native_handle(), wire::slab_fd(p),
                           static_cast<int>(options_.dead_after.count()), 's');
    } catch (const std::exception& e) {
      error = e.what();
    }
    if (!error.empty()) {
      fail("cannot pass a part of " + std::to_string(p.size()) + " bytes to the peer: " + error);
      return false;
    }
  }
  return true;
}

/// The reader (strand): part `i` of the frame being read is a slab; its memfd came on the
/// socket (or waits for the watcher to bring it).
void StreamLink::read_slab(std::uint64_t epoch, std::size_t i) {
  Shm& s = *shm_;
  if (s.fds.empty() || s.group_pending) {  // the first memfd to come is the group's eventfd
    if (s.peer_gone) return broken(epoch, asio::error::eof);
    s.slab_part = i;
    s.slab_epoch = epoch;
    return;
  }
  const int fd = s.fds.front();
  s.fds.pop_front();
  Bytes part;
  const std::string error = wire::map_slab(fd, static_cast<std::size_t>(part_lengths_[i]), part);
  if (!error.empty()) return ring_broke(error);
  last_recv_ = coarse_now();
  incoming_.body.parts.push_back(std::move(part));
  read_part(epoch, i + 1);
}

/// The dialler, on the strand, before it writes anything else: offers shared memory. False if
/// it could not (the link goes on over the socket, or closed with the reason).
bool StreamLink::offer_shm() {
  if (!unix_ || !options_.shared_memory || shm_) return false;
  auto s = std::make_unique<Shm>(ctx_, strand_);
  try {
    s->region = shm::Region::create();
  } catch (const std::exception& e) {
    log_line(options_, detail::LogLevel::debug,
             "link " + description_ + ": no shared memory (" + e.what() + "); using the socket");
    return false;
  }
  s->attach_rings(true);
  s->writing = true;
  std::string error;
  const int dialler_bell = shm::make_bell(error);
  if (dialler_bell >= 0) {
    if (const std::error_code ec = s->bell_in.assign(dialler_bell); ec) {
      error = "cannot watch an eventfd: " + ec.message();
    } else {
      s->bell_out = shm::make_bell(error);
    }
  }
  if (!error.empty()) {
    log_line(options_, detail::LogLevel::debug,
             "link " + description_ + ": no shared memory (" + error + "); using the socket");
    return false;
  }
  {
    std::lock_guard lock(mu_);
    // The hello set_dialler queued, and the offer, written now as one.
    std::string bytes = ctl_.front().flatten();
    ctl_.pop_front();
    bytes += control_frame(kShmOffer, 1).flatten();
    const int fd = socket_.native_handle();
    const int timeout_ms = static_cast<int>(options_.dead_after.count());
    error = shm::send_all(fd, bytes, timeout_ms);
    if (error.empty()) {
      error = shm::send_fds(fd, {s->region.fd, dialler_bell, s->bell_out}, timeout_ms);
    }
    if (error.empty()) {
      s->region.close_fd();  // the peer has its own now; the mapping keeps the memory
      shm_ = std::move(s);
    }
  }
  if (!error.empty()) {
    fail("cannot offer shared memory to " + description_ + ": " + error);
  }
  return true;
}

/// The listener, on the strand, after the offer: takes the fd that follows it, maps the
/// region, and switches.
void StreamLink::take_shm(std::uint64_t epoch) {
  if (redial_ || shm_ || !unix_) return fail("an unexpected shared-memory offer");
  std::string error;
  const shm::Offered offered = shm::receive_offer(socket_.native_handle(), error);
  if (offered.region < 0 && error.empty()) {
    socket_.async_wait(Protocol::socket::wait_read,
                       asio::bind_executor(strand_, [self = shared(), epoch](asio::error_code ec) {
                         if (epoch != self->epoch_ || self->closed()) return;
                         if (ec) return self->broken(epoch, ec);
                         self->take_shm(epoch);
                       }));
    return;
  }
  if (offered.region < 0) return fail(error);
  auto s = std::make_unique<Shm>(ctx_, strand_);
  s->group = asio::use_service<WakeGroups>(ctx_).group();
  s->bell_out = offered.dialler_bell;
  if (const std::error_code ec = s->bell_in.assign(offered.listener_bell); ec) {
    ::close(offered.region);
    return fail("cannot watch the eventfd the peer sent: " + ec.message());
  }
  error = shm::Region::map(offered.region, s->region);
  if (!error.empty()) return fail("cannot use the shared memory the peer offered: " + error);
  s->attach_rings(false);
  s->reading = true;
  {
    std::lock_guard lock(mu_);
    shm_ = std::move(s);
    ctl_.push_back(control_frame(kShmTaken, shm_->group ? 2 : 1));
    shm_->switch_after = ctl_.size();
    start_writer_locked();
  }
  watch_spins();
  watch_shm(epoch);
  watch_wake_ups(&Shm::bell_in, epoch);
  read_prefix(epoch);
}

/// The dialler, on the strand: the listener's frames come from its ring from now on.
void StreamLink::shm_taken(std::uint64_t epoch, std::uint64_t group) {
  if (!shm_ || shm_->reading || (group != 1 && group != 2)) {
    return fail("an unexpected shared-memory answer");
  }
  {
    std::lock_guard lock(mu_);  // transport() reads it
    shm_->reading = true;
  }
  shm_->group_pending = group == 2;  // its eventfd comes on the socket: see on_socket()
  watch_spins();
  watch_shm(epoch);
  watch_wake_ups(&Shm::bell_in, epoch);
  read_prefix(epoch);
}

/// The listener's writer, after the control frame that ends the socket's stream (strand).
void StreamLink::writes_switched_locked() {
  shm_->writing = true;
  if (shm_->group) {
    // The group's eventfd, before any slab's memfd (those go only to the ring's frames).
    const std::string error = shm::send_fd(socket_.native_handle(), shm_->group->fd,
                                           static_cast<int>(options_.dead_after.count()), 'g');
    if (error.empty()) {
      shm_->group->links.fetch_add(1, std::memory_order_relaxed);
      shm_->group_counted = true;
    } else {  // the socket is broken: the peer, waiting for the eventfd, sees it end
      log_line(options_, detail::LogLevel::debug,
               "link " + description_ + ": cannot hand over the wake group: " + error);
    }
  }
  if (shm_->owe_doorbell) {
    shm_->owe_doorbell = false;
    doorbell();
  }
}

/// The strand, as reading from the ring starts: a thread about to wait for events on this
/// link's event loop may watch the ring while the link is busy (spin.hpp).
void StreamLink::watch_spins() {
  Shm& s = *shm_;
  s.spin = std::make_shared<SpinTarget>();
  s.spin->owner = shared_from_this();
  s.spin->control = s.in.control();
  s.spin->resume = [this, weak = std::weak_ptr<StreamLink>(shared())] {
    asio::post(strand_, [weak] {
      const auto self = weak.lock();
      if (self && !self->closed()) self->serve_read();
    });
  };
  s.spinners = &asio::use_service<Spinners>(ctx_);
  s.spinners->add(s.spin);
}

/// Waits for the peer's next wake-up through `watch`: its bell, or its wake group (eventfds
/// never read, edge_watch.hpp); then serves the ring. A wake-up that comes while the ring is
/// served, before the wait is armed again, ends that wait at once.
void StreamLink::watch_wake_ups(EdgeWatch Shm::*watch, std::uint64_t epoch) {
  (*shm_.*watch).async_wait([self = shared(), watch, epoch](asio::error_code ec) {
    asio::dispatch(self->strand_, [self, watch, epoch, ec] {
      if (epoch != self->epoch_ || self->closed()) return;
      if (ec) {
        return self->ring_broke(
            std::string(watch == &Shm::bell_in ? "its wake-ups" : "its wake group") +
            " stopped: " + ec.message());
      }
      self->serve_read();
      if (self->closed()) return;
      self->serve_write();
      if (!self->closed()) self->watch_wake_ups(watch, epoch);
    });
  });
}

/// The dialler (strand): the peer's wake group came, the first memfd on the socket after the
/// switch. Watched from now on, and the peer told so in the ring (group_armed): it may wake this
/// side with the group from then on, and the watch is armed before it can.
void StreamLink::take_group(std::uint64_t epoch) {
  Shm& s = *shm_;
  const int event = s.fds.front();
  s.fds.pop_front();
  s.group_pending = false;
  if (!shm::is_eventfd(event)) {
    ::close(event);
    return ring_broke("the peer's wake group is not an eventfd");
  }
  if (const std::error_code ec = s.group_in.assign(event); ec) {
    return ring_broke("cannot watch its wake group: " + ec.message());
  }
  s.in.control()->group_armed.store(1, std::memory_order_seq_cst);
  watch_wake_ups(&Shm::group_in, epoch);
}

/// Waits for the socket: slabs' memfds, or its end (the peer is gone).
void StreamLink::watch_shm(std::uint64_t epoch) {
  socket_.async_wait(Protocol::socket::wait_read,
                     asio::bind_executor(strand_, [self = shared(), epoch](asio::error_code ec) {
                       if (epoch != self->epoch_ || self->closed()) return;
                       self->on_socket(epoch, ec);
                     }));
}

/// The socket woke the watcher (strand): slabs' memfds, or the peer's end.
void StreamLink::on_socket(std::uint64_t epoch, const asio::error_code& ec) {
  Shm& s = *shm_;
  if (ec) {
    s.peer_gone = true;
  } else {
    const shm::Drained d = shm::drain(socket_.native_handle(), s.fds);
    if (!d.error.empty()) return ring_broke(d.error);
    if (s.fds.size() > kMaxPendingSlabs) {
      return ring_broke("the peer sent more memfds than its frames use");
    }
    s.peer_gone = s.peer_gone || d.eof;
    if (s.group_pending && !s.fds.empty()) {
      take_group(epoch);
      if (closed()) return;
    }
  }
  if (s.slab_part && (!s.fds.empty() || s.peer_gone)) {
    const std::size_t i = *std::exchange(s.slab_part, std::nullopt);
    read_slab(s.slab_epoch, i);
    if (closed()) return;
  }
  serve_read();
  if (closed()) return;
  serve_write();
  if (!s.peer_gone && !closed()) watch_shm(epoch);
}

void StreamLink::doorbell() {
  if (!shm_->writing) {
    shm_->owe_doorbell = true;  // the socket still carries our frames
    return;
  }
  ring_bell();
}

void StreamLink::ring_bell() {
  const std::uint64_t one = 1;
  const std::lock_guard lock(shm_->bell_mu);
  if (shm_->bell_out >= 0) {
    (void)::write(shm_->bell_out, &one, sizeof one);  // a count that only grows: never full
  }
}

void StreamLink::Shm::close_bells() {
  bell_in.close();  // its wait ends, and with it its hold on the link
  group_in.close();
  if (std::exchange(group_counted, false)) group->links.fetch_sub(1, std::memory_order_relaxed);
  const std::lock_guard lock(bell_mu);
  if (bell_out >= 0) ::close(std::exchange(bell_out, -1));
}

void StreamLink::ring_broke(const std::string& why) {
  fail("the peer broke the shared-memory ring: " + why);
}

/// Calls a read's or write's handler: inline while few are nested (a stream of frames already
/// in the ring is read without a trip through the event loop), posted beyond that, and posted
/// when a frame delivered woke work that runs after this handler: that work may block, and the
/// next frame may be what it waits for (the watchdog's loop reads it then).
void StreamLink::shm_read(asio::mutable_buffer buffer, IoHandler handler) {
  Shm& s = *shm_;
  s.read_buffer = buffer;
  s.read_done = 0;
  s.read_op.pending = true;
  s.read_op.handler = std::move(handler);
  serve_read();
}

/// Takes `buffer` whole from the ring if all of it is there already: no handler is made and no
/// turn of the loop taken, where most frames of a busy link are. False (nothing taken) when it
/// is not there, or a read waits or has just waited (serve_read() does its bookkeeping then).
bool StreamLink::shm_take(asio::mutable_buffer buffer) {
  if (!shm_ || !shm_->reading) return false;
  Shm& s = *shm_;
  if (s.read_op.pending || s.read_parked || s.in.ready(buffer.size()) < buffer.size()) return false;
  s.in.read(buffer.data(), buffer.size());
  if (s.in.writer_wants_waking()) doorbell();
  return true;  // (deliver() counts the frame as hearing from the peer)
}

/// Ends the read or write in progress: its handler runs now, or, if it waits, its wait ends.
void StreamLink::finish(Shm::Op& op, asio::error_code ec, std::size_t n) {
  op.pending = false;
  if (op.handler) return complete(std::exchange(op.handler, nullptr), ec, n);
  if (IoHandler h = op.unpark()) complete(std::move(h), ec, n);
}

/// The read or write in progress waits for the peer: its handler goes to the slot of a wait
/// that the link's close (or its event loop's end) ends; finish() takes it back out.
void StreamLink::park(Shm::Op& op) {
  if (!op.handler) return;  // waits already
  if (const auto slot = op.parked.lock()) {
    *slot = std::exchange(op.handler, nullptr);  // the wait of an earlier park goes on
    return;
  }
  auto slot = std::make_shared<IoHandler>(std::exchange(op.handler, nullptr));
  op.parked = slot;
  op.wait.expires_at(asio::steady_timer::time_point::max());
  op.wait.async_wait([this, slot](asio::error_code) {
    // Only a cancel ends the wait. An empty slot: no handler waits, and nothing holds this
    // link, which may be gone (its timer's end was the cancel): touch nothing. A handler in
    // the slot holds the link, and the cancel was its close (abort()).
    if (!*slot) return;
    complete(std::exchange(*slot, nullptr), asio::error::operation_aborted, 0);
  });
}

void StreamLink::serve_read() {
  Shm& s = *shm_;
  if (!s.read_op.pending) return;
  auto* at = static_cast<std::byte*>(s.read_buffer.data());
  for (;;) {
    const std::size_t n = s.in.read(at + s.read_done, s.read_buffer.size() - s.read_done);
    s.read_done += n;
    if (n > 0 && s.read_parked) {
      // Bytes after a wait: was it short enough for a spinner to have caught them?
      s.read_parked = false;
      s.spinners->set_hot(*s.spin, false);
      s.busy = Clock::now() - s.parked_at <= s.spinners->window();
    }
    if (n > 0 && s.in.writer_wants_waking()) doorbell();
    if (s.read_done == s.read_buffer.size()) {
      last_recv_ = coarse_now();  // a large frame's bytes count as hearing from the peer
      return finish(s.read_op, {}, s.read_done);
    }
    if (!s.in.corrupt().empty()) return ring_broke(s.in.corrupt());
    if (n > 0) last_recv_ = coarse_now();
    if (s.peer_gone) return finish(s.read_op, asio::error::eof, 0);
    if (n == 0 && !s.read_deferred && inline_work_waits()) {
      // The frames just read woke work that this thread runs next (an actor, run to completion):
      // a peer that streams writes its next frames meanwhile. The ring is looked at again after
      // that work, awake, rather than asleep now, when the peer would ring for each frame. A
      // look that finds nothing (a peer that waits for a reply) costs a turn of the loop, so
      // the next kDeferSkips chances are let go.
      if (s.defer_skips > 0) {
        --s.defer_skips;
      } else {
        s.read_deferred = true;
        asio::post(strand_, [self = shared()] {
          if (self->closed()) return;
          Shm& shm = *self->shm_;
          shm.read_deferred = false;
          if (shm.in.ready(1) == 0) shm.defer_skips = kDeferSkips;
          self->serve_read();
        });
        return;
      }
    }
    if (n == 0 && s.in.sleep_if_empty()) {  // the doorbell, or a spinner, brings us back
      if (!s.read_parked && s.spin && s.spinners->window().count() > 0) {
        s.read_parked = true;
        s.parked_at = Clock::now();
        s.spin->seen.store(s.in.position(), std::memory_order_relaxed);
        s.spinners->set_hot(*s.spin, s.busy);
      }
      return park(s.read_op);
    }
  }
}

void StreamLink::shm_write(const std::vector<asio::const_buffer>& buffers, IoHandler handler) {
  Shm& s = *shm_;
  s.write_buffers = buffers;
  s.write_index = 0;
  s.write_offset = 0;
  s.write_total = 0;
  s.write_op.pending = true;
  s.write_op.handler = std::move(handler);
  serve_write();
}

void StreamLink::serve_write() {
  Shm& s = *shm_;
  if (!s.write_op.pending) return;
  for (;;) {
    bool wrote = false;
    while (s.write_index < s.write_buffers.size()) {
      const asio::const_buffer& b = s.write_buffers[s.write_index];
      const std::size_t n = s.out.write(static_cast<const std::byte*>(b.data()) + s.write_offset,
                                        b.size() - s.write_offset);
      s.write_offset += n;
      s.write_total += n;
      wrote = wrote || n > 0;
      if (s.write_offset < b.size()) break;
      ++s.write_index;
      s.write_offset = 0;
    }
    if (wrote && s.out.reader_wants_waking() != 0) doorbell();
    if (s.write_index == s.write_buffers.size()) return finish(s.write_op, {}, s.write_total);
    if (!s.out.corrupt().empty()) return ring_broke(s.out.corrupt());
    if (s.peer_gone) return finish(s.write_op, asio::error::broken_pipe, s.write_total);
    if (!wrote && s.out.wait_if_full()) return park(s.write_op);  // the doorbell brings us back
  }
}

/// A sender's direct write (under mu_, no writer running): as much of the frame as fits.
std::size_t StreamLink::shm_write_now(const Frame& frame) {
  Shm& s = *shm_;
  std::size_t total = s.out.write(frame.header.data(), frame.header.size());
  if (total == frame.header.size()) {
    for (const Bytes& p : frame.parts) {
      const std::size_t n = s.out.write(p.data(), p.size());
      total += n;
      if (n < p.size()) break;
    }
  }
  if (total > 0) {
    if (const std::uint32_t slept_on = s.out.reader_wants_waking()) {
      // Asleep on this thread's core, the peer runs only once this thread stops: while a cast
      // is sent, its wake-up waits for the end of it (wake_ups.hpp).
      // A peer that watches this side's wake group waits too: the end of the cast may wake it
      // with others in one write.
      if (held_wake_ups != nullptr &&
          (slept_on - 1 == static_cast<std::uint32_t>(::sched_getcpu()) ||
           armed_group() != nullptr)) {
        held_wake_ups->push_back(shared());
      } else {
        doorbell();
      }
    }
  }
  return total;
}

}  // namespace internal

}  // namespace baton::net
