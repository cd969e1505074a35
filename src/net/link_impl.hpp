#pragma once

// Internal: what the files of a link share. A StreamLink is one link over a unix or TCP
// socket (optionally under TLS); its parts live in files of their own:
//   link.cpp         the I/O thread, opening a link (hello, secret, TLS), send, close
//   link_reader.cpp  the frame reader: prefix, header, parts; control frames and sessions
//   link_writer.cpp  the frame writer: one frame at a time, control frames between them
//   link_repair.cpp  heartbeats, and repairing a broken connection (redial, or wait)
//   link_shm.cpp     shared memory: the rings that replace the socket's bytes on one host
//   listener.cpp     the listener: accepting, authenticating and adopting connections
//   tls.cpp          the job's certificates and the TLS context

#include <sys/socket.h>
#include <time.h>

#include "net/asio.hpp"  // before any other Asio header: see there

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "baton/net/link.hpp"
#include "log/log.hpp"
#include "net/edge_watch.hpp"
#include "net/shm_ring.hpp"
#include "net/spin.hpp"
#include "net/tls_session.hpp"
#include "net/wake_group.hpp"
#include "net/wake_ups.hpp"
#include "net/watchdog.hpp"

namespace baton::net {

using Protocol = asio::generic::stream_protocol;

struct IoThread::Impl : std::enable_shared_from_this<IoThread::Impl> {
  asio::io_context ctx;
  asio::executor_work_guard<asio::io_context::executor_type> guard{ctx.get_executor()};
  std::thread thread;

  // Run to completion (io_thread.cpp): work the loop thread's handlers woke, run on that
  // thread after each handler. `after` is the loop thread's alone.
  std::deque<std::function<void()>> after;
  std::atomic<bool> inline_enabled{true};
  // Odd while the loop thread runs such work; the watchdog takes the event loop over when it
  // stays odd (the same work) for a period, or at once when that work says it will block.
  std::atomic<std::uint64_t> work_serial{0};
  std::atomic<bool> blocking{false};
  std::uint64_t watched_serial = 0;  // the watchdog's
  std::atomic<bool> driving{false};  // the watchdog runs the event loop
  std::mutex drive_mu;
  std::condition_variable drive_cv;
  std::unique_ptr<Watchdog> watchdog;
  Spinners& spinners = asio::use_service<Spinners>(ctx);  // spin.hpp

  // A guest: a thread waiting for a reply, which runs the event loop itself meanwhile while the
  // loop thread is parked (drive_until). Under lead_mu.
  std::mutex lead_mu;
  std::condition_variable lead_cv;
  std::atomic<bool> guest_wanted{false};  // the loop thread parks at its next turn
  bool guest = false;                     // a guest waits for the loop, or runs it
  bool leading = false;                   // a guest runs the loop
  bool parked = false;                    // the loop thread waits for guests to be done
  bool stopping = false;
  std::uint64_t guest_turns = 0;

  void loop(IoThread* self);
  void park();
  void run_after();
  Look watch();
};

namespace internal {

extern thread_local bool t_io_thread;  // this thread runs an IoThread's event loop

Protocol::endpoint to_endpoint(asio::io_context& ctx, const Address& a);
/// Readies a link's socket: no process this one starts inherits it (Asio opens sockets without
/// SOCK_CLOEXEC), and on TCP each frame goes out when written (TCP_NODELAY: a link writes whole
/// frames, and Nagle's wait for an acknowledgement would hold a call's reply behind it).
void prepare_socket(int fd);

// Link control frames carry this header; they have no sequence number of their own.
constexpr std::string_view kControl = "baton.link";
constexpr std::string_view kHello = "hello";  // body: session, next seq expected from the peer
constexpr std::string_view kAck = "ack";      // body: next seq expected from the peer
constexpr std::string_view kBye = "bye";      // the peer closes the link on purpose
constexpr std::string_view kReason = "baton.link.reason";  // a bye's header: why
// Shared memory (link_shm.cpp): the dialler offers a memfd and two eventfds for wake-ups (the
// fds follow the frame, with one byte, as SCM_RIGHTS) and writes to its ring from then on; the
// listener answers, as the last frame on the socket, that it reads and writes the rings from then
// on (with 2: its wake group's eventfd follows, one byte as SCM_RIGHTS, before any slab's memfd;
// see wake_group.hpp).
constexpr std::string_view kShmOffer = "shm";
constexpr std::string_view kShmTaken = "shm-taken";

/// A frame of the link's own (`kind` names it), with its two numbers; a bye carries its reason.
Frame control_frame(std::string_view kind, std::uint64_t a, std::uint64_t b = 0,
                    std::string_view reason = {});

std::uint64_t new_session_id();

/// Logs `line` at `level`, if the log takes that level, where `options` say (the library's log
/// by default).
void log_line(const LinkOptions& options, detail::LogLevel level, const std::string& line);

class StreamLink;

/// The links a listener accepted, by session, so a reconnecting dialler finds its link again.
struct Sessions {
  std::mutex mu;
  std::unordered_map<std::uint64_t, std::weak_ptr<StreamLink>> by_id;
};

/// steady_clock's time to within a scheduler tick (CLOCK_MONOTONIC_COARSE: the same clock, read
/// without asking the hardware), for when a peer was last heard from: taken for every frame, and
/// compared with dead_after, seconds.
inline std::chrono::steady_clock::time_point coarse_now() {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
  return std::chrono::steady_clock::time_point(
      std::chrono::duration_cast<std::chrono::steady_clock::duration>(
          std::chrono::seconds(ts.tv_sec) + std::chrono::nanoseconds(ts.tv_nsec)));
}

class StreamLink final : public Link {
 public:
  using Clock = std::chrono::steady_clock;

  // link.cpp: opening, sending, closing.
  StreamLink(asio::io_context& ctx, Protocol::socket socket, std::string description,
             const LinkOptions& options, std::shared_ptr<SSL_CTX> tls_ctx = nullptr);
  void set_dialler(Address to);
  /// The dialler on an I/O thread: the first connection is opened on the strand (see
  /// connect_first()), not by the caller.
  void connect_on_strand();
  /// The accepting side: a hello on a new connection may hand it to an existing link.
  void set_sessions(std::shared_ptr<Sessions> sessions) { sessions_ = std::move(sessions); }
  void start(LinkHandler handler);
  bool send(Envelope env) override;
  void close(const std::string& reason) override;
  void close_and_wait(const std::string& reason) override;
  bool closed() const override;
  std::string describe() const override { return description_; }
  std::uint64_t connections() const override;
  std::string transport() const override;
  /// What it carried (see counters.hpp); any thread reads them.
  std::atomic<std::uint64_t> sent_messages_{0};
  std::atomic<std::uint64_t> sent_bytes_{0};
  std::atomic<std::uint64_t> received_messages_{0};
  std::atomic<std::uint64_t> received_bytes_{0};
  void secure(std::uint64_t epoch);
  void tls_handshake(Protocol::socket& socket, TlsSession& session, std::uint64_t epoch,
                     std::function<void(const std::string&)> done);
  void authenticated(std::uint64_t epoch);

  // link_repair.cpp
  void resume(Protocol::socket socket, std::unique_ptr<TlsSession> tls, std::uint64_t peer_expects);

  // link_reader.cpp
  void pause_reading() override { pause_requested_.store(true, std::memory_order_release); }
  void resume_reading() override;

  // link_shm.cpp
  /// The wake group a held wake-up may go to: the peer watches it. Null: ring the link's bell.
  WakeGroup* armed_group() const;
  /// Whether the peer's reader says it sleeps now (a shared-memory link; tests wait for it).
  bool peer_sleeps() const;

  // link_writer.cpp
  std::size_t queued_bytes() const override;
  bool full() const override;
  bool when_room(std::function<void()> f) override;

 private:
  std::shared_ptr<StreamLink> shared() {
    return std::static_pointer_cast<StreamLink>(shared_from_this());
  }

  // --- reading (link_reader.cpp) ---------------------------------------------------------------
  void read_then(asio::mutable_buffer buffer, std::uint64_t epoch,
                 void (StreamLink::*next)(std::uint64_t));
  void read_prefix(std::uint64_t epoch);
  void on_prefix(std::uint64_t epoch);
  void on_header(std::uint64_t epoch);
  void read_part(std::uint64_t epoch, std::size_t i);
  void read_chunk(std::uint64_t epoch, std::size_t i, std::shared_ptr<std::vector<std::byte>> buf,
                  std::size_t done);
  void deliver(std::uint64_t epoch);
  void on_control(std::uint64_t epoch, const std::string& kind);
  bool adopt_session(std::uint64_t session, std::uint64_t peer_expects);
  std::pair<Protocol::socket, std::unique_ptr<TlsSession>> take_socket();

  template <class Buffers, class Handler>
  void async_read_all(const Buffers& buffers, Handler&& handler) {
    if (shm_ && shm_->reading) {
      return shm_read(asio::mutable_buffer(buffers), std::forward<Handler>(handler));
    }
    if (tls_) return tls_read(asio::mutable_buffer(buffers), 0, std::forward<Handler>(handler));
    asio::async_read(socket_, buffers, std::forward<Handler>(handler));
  }
  template <class Buffers, class Handler>
  void async_write_all(const Buffers& buffers, Handler&& handler) {
    // (A TLS link seals its records itself and writes them to the socket: link_writer.cpp.)
    if (shm_ && shm_->writing) return shm_write(buffers, std::forward<Handler>(handler));
    asio::async_write(socket_, buffers, std::forward<Handler>(handler));
  }

  // --- acknowledgements and writing (link_writer.cpp) ------------------------------------------
  void trim(std::uint64_t next);
  /// `spent`: where the frames dropped go, to be freed after the lock (the writer's batch).
  void drop_written_locked(std::vector<Frame>* spent = nullptr);
  void pop_front_locked(std::vector<Frame>* spent = nullptr);
  void send_ack();
  void queue_control(Frame frame);
  void start_writer_locked();
  void write_next(std::uint64_t epoch);
  void write_sealed(std::uint64_t epoch, const Frame& frame, bool control);
  void wrote(std::uint64_t epoch, bool control, std::size_t count = 1);
  void wrote_part(std::size_t n);
  std::size_t write_now(const Frame& frame);

  // --- heartbeats and repair (link_repair.cpp) -------------------------------------------------
  void arm_heartbeat();
  /// A read from the ring waits for the peer's wake-up (its handler handed to park()).
  bool shm_read_sleeps() const;
  bool unread_input();
  bool excuse_silence();
  void serve_missed_wakeup();
  bool connected() const;
  void write_failed(std::uint64_t epoch, const asio::error_code& ec);
  void broken(std::uint64_t epoch, const asio::error_code& ec);
  void resolve(const Address& to,
               std::function<void(const std::string& error, const Protocol::endpoint& ep)> then);
  void redial(std::uint64_t epoch);
  void reconnect(const Protocol::endpoint& ep, std::uint64_t epoch);
  void resecure(Protocol::socket socket, std::uint64_t epoch);
  void retry_or_give_up(std::uint64_t epoch, const std::string& why);
  void wait_for_peer(std::uint64_t epoch);
  static std::string eof_reason(const asio::error_code& ec);

  using IoHandler = std::function<void(asio::error_code, std::size_t)>;
  /// Calls a read's handler at once, unless that nests too deep (then posts it).
  void complete(IoHandler handler, asio::error_code ec, std::size_t n);
  // Read handlers called inline, nested (strand), up to kReadDepth; deeper ones are posted.
  static constexpr int kReadDepth = 64;
  int read_depth_ = 0;

  // --- TLS (link_reader.cpp) -------------------------------------------------------------------
  /// Fills `buffer` (`done` of it already) with the peer's plaintext, opening its records.
  void tls_read(asio::mutable_buffer buffer, std::size_t done, IoHandler handler);

  // --- shared memory (link_shm.cpp) -----------------------------------------------------------
  struct Shm {
    shm::Region region;
    shm::RingEnd in;            // the peer's frames (strand)
    shm::RingEnd out;           // ours (the writer: strand, or a sender under mu_)
    bool reading = false;       // frames come from `in` (set under mu_ on the strand)
    bool writing = false;       // frames go to `out` (set under mu_ on the strand)
    bool peer_gone = false;     // the socket ended: the peer closed or died (strand)
    bool owe_doorbell = false;  // a wake-up waits for `writing` (strand)
    // Wake-ups: the peer writes `bell_in` to wake this side (never read: edge_watch.hpp), this
    // side writes `bell_out` (two eventfds the dialler made and sent with the memfd). The link's
    // close closes both at once, not when the last handler that holds the link lets go:
    // `bell_mu` keeps a wake-up's write from meeting that close (a wake-up is rare beside the
    // frames, so the lock costs nothing).
    EdgeWatch bell_in;
    std::mutex bell_mu;
    int bell_out = -1;  // (bell_mu)
    // The wake group: the listener's own (handed to the peer, rung for a cast); the dialler
    // watches the peer's in `group_in` (never read either), once its eventfd came
    // (`group_pending`).
    std::shared_ptr<WakeGroup> group;
    EdgeWatch group_in;
    bool group_pending = false;
    bool group_counted = false;    // this link is one of its group's (strand)
    std::size_t switch_after = 0;  // control frames to write on the socket before `writing`
    // A read or write in progress. One that must wait for the peer puts its handler (which
    // holds the link) in a slot that a timer's wait owns, a wait that only a cancel ends: an
    // event loop that goes frees it with its other operations, and no cycle keeps the link
    // alive. The wait outlives the handler: the next wait of the op puts its handler in the
    // same slot, and finish() takes it out and calls it at once, with no cancel, post or turn
    // of the event loop per wait.
    struct Op {
      explicit Op(const asio::strand<asio::io_context::executor_type>& strand) : wait(strand) {}
      bool pending = false;
      IoHandler handler;  // until it waits
      asio::steady_timer wait;
      std::weak_ptr<IoHandler> parked;  // the slot of the timer's wait, while it waits
      /// The handler waiting in the slot, taken out (empty if none).
      IoHandler unpark();
      /// The link closes: the handler is dropped, or its wait ends (with operation_aborted).
      void abort();
    };
    Op read_op, write_op;
    asio::mutable_buffer read_buffer;
    std::size_t read_done = 0;
    std::vector<asio::const_buffer> write_buffers;
    std::size_t write_index = 0, write_offset = 0, write_total = 0;
    // Spinning (spin.hpp): what a spinner watches of `in`; when the read last parked; whether
    // frames came within the spin window of each other (strand).
    std::shared_ptr<SpinTarget> spin;
    Spinners* spinners = nullptr;  // of this link's event loop
    bool read_parked = false;
    bool read_deferred = false;  // an empty ring is looked at again after this thread's work
    int defer_skips = 0;         // chances to defer left out since a deferral found nothing
    bool busy = false;
    Clock::time_point parked_at;
    std::optional<std::uint64_t> stuck_at;  // where a waiting read stood with bytes to read
    std::deque<int> fds;                    // the memfds of slabs the peer sent, in order (strand)
    std::optional<std::size_t> slab_part;   // a part waits for its memfd (strand)
    std::uint64_t slab_epoch = 0;
    Shm(asio::io_context& ctx, const asio::strand<asio::io_context::executor_type>& strand)
        : bell_in(ctx), group_in(ctx), read_op(strand), write_op(strand) {}
    /// Maps the two rings of `region`: the dialler writes the first, the listener the second.
    void attach_rings(bool dialler);
    /// Closes both wake-up descriptors (the link closes).
    void close_bells();
    Shm(const Shm&) = delete;
    Shm& operator=(const Shm&) = delete;
    ~Shm();
  };
  bool offer_shm();
  void take_shm(std::uint64_t epoch);
  void shm_taken(std::uint64_t epoch, std::uint64_t group);
  void watch_shm(std::uint64_t epoch);
  void watch_wake_ups(EdgeWatch Shm::*watch, std::uint64_t epoch);
  void take_group(std::uint64_t epoch);
  void watch_spins();
  void on_socket(std::uint64_t epoch, const asio::error_code& ec);
  void shm_read(asio::mutable_buffer buffer, IoHandler handler);
  void shm_write(const std::vector<asio::const_buffer>& buffers, IoHandler handler);
  void serve_read();
  bool shm_take(asio::mutable_buffer buffer);
  void serve_write();
  void finish(Shm::Op& op, asio::error_code ec, std::size_t n);
  void park(Shm::Op& op);
  void doorbell();
  /// Wakes the peer now (any thread: bell_mu).
  void ring_bell();
  friend class baton::net::HeldWakeUps;
  friend void ring_held_wake_ups();
  friend void ring_all(std::vector<std::shared_ptr<StreamLink>>& held);
  void ring_broke(const std::string& why);
  void writes_switched_locked();
  std::size_t shm_write_now(const Frame& frame);
  void read_slab(std::uint64_t epoch, std::size_t i);
  bool send_slabs(Frame& frame);
  void slabs_for(Envelope& env);

  // --- opening (link.cpp) -------------------------------------------------------------------
  void open(std::uint64_t epoch);
  void connect_first(std::uint64_t epoch);

  // --- closing (link.cpp) ----------------------------------------------------------------------
  /// Closes the link for good: on_closed hears `end` and `reason`; a goodbye goes to the peer
  /// if `tell_peer` (this side's own close).
  void shutdown(const std::string& reason, LinkEnd end = LinkEnd::lost, bool tell_peer = false);
  /// The link ends on an error (the peer's bad bytes, a gap, a frame out of place; something
  /// this side could not get): said at warn level, since only a bug, a hostile peer or a
  /// starved process does it, and the link closes as lost.
  void fail(const std::string& reason);

  asio::io_context& ctx_;
  asio::strand<asio::io_context::executor_type> strand_;
  asio::steady_timer timer_;
  Protocol::socket socket_;           // the connection, unless TLS holds it
  std::shared_ptr<SSL_CTX> tls_ctx_;  // set when this link runs TLS
  std::unique_ptr<TlsSession> tls_;   // the connection's TLS (tls_session.hpp)
  std::string description_;
  LinkOptions options_;
  LinkHandler handler_;
  std::optional<Address> redial_;       // set on the dialling side
  std::uint64_t session_ = 0;           // 0: none (a peer that sent no hello)
  std::shared_ptr<Sessions> sessions_;  // set on the accepting side
  bool connect_on_strand_ = false;      // the first connection is opened by connect_first()

  // Touched only on the strand (epoch_ is also changed under mu_, and read there).
  std::atomic<std::uint64_t> epoch_{0};  // the connection handlers belong to
  std::byte prefix_[4] = {};
  std::string header_;
  Envelope incoming_;
  std::vector<std::uint64_t> part_lengths_;
  std::uint64_t next_recv_seq_ = 0;
  std::uint64_t frames_in_ = 0;
  std::uint64_t incoming_bytes_ = 0;  // of the frame being read
  std::size_t unacked_in_ = 0;
  Clock::time_point last_recv_ = coarse_now();
  Clock::time_point excused_at_;  // when excuse_silence() last excused a silence
  std::atomic<bool> pause_requested_{false};
  std::optional<std::uint64_t> parked_;  // reading stopped after a frame of this epoch (strand)
  Clock::time_point repair_deadline_;
  std::string repair_reason_;
  std::chrono::milliseconds backoff_{5};
  std::unique_ptr<asio::steady_timer> repair_timer_;
  // The dialler: whether the listener's hello came on this connection; whether a connection
  // of this link broke before (strand).
  bool answered_ = false;
  bool repairing_ = false;

  // Writing state, under mu_. out_ holds every data frame not yet acknowledged, from seq
  // out_base_seq_ on; the first written_ of them are on the wire.
  mutable std::mutex mu_;
  std::condition_variable room_;                     // send() waits here while the link is full
  std::vector<std::function<void()>> room_waiters_;  // when_room(), posted when there is room
  void room_came_locked();
  std::size_t out_bytes_ = 0;  // bytes in out_
  std::deque<Frame> out_;
  std::deque<Frame> ctl_;
  std::uint64_t out_base_seq_ = 0;
  std::size_t written_ = 0;
  std::vector<asio::const_buffer> buffers_;
  std::vector<Frame> spent_;             // frames the writer wrote, freed after the lock
  std::vector<const Frame*> batch_;      // data frames written after out_[written_] in one write
  std::vector<std::size_t> frame_ends_;  // where each data frame of the write in flight ends
  // TLS (tls_session.hpp): records this side sealed of the frame at out_[written_] (or of the
  // control frame at ctl_.front()), and how much of them is on the wire. Under mu_, by the one
  // writer: a sender while the writer is idle, or the strand while writing_.
  std::string tls_out_;
  std::size_t tls_out_sent_ = 0;
  std::size_t tls_sealed_ = 0;  // plaintext bytes of the frame sealed so far
  // What is sealed at a time: a frame up to this size from the sending thread, larger ones in
  // pieces of it, so sealing never holds a second copy of a large frame.
  static constexpr std::size_t kTlsPiece = std::size_t{256} << 10;
  /// Seals the next piece of `frame` (from tls_sealed_ on) into tls_out_.
  void tls_seal_locked(const Frame& frame);
  void tls_reset_locked();
  /// What of `bye` the socket did not take from write_now(), which took `n` of it.
  std::string unwritten_locked(const Frame& bye, std::size_t n);
  /// A frame has begun to go out: part of it written, or sealed.
  bool front_started_locked() const { return front_sent_ != 0 || tls_sealed_ != 0; }
  std::uint64_t next_send_seq_ = 0;
  std::size_t front_sent_ = 0;  // bytes of out_[written_] already written
  std::uint64_t connections_ = 1;
  bool unix_ = false;       // a unix-domain socket: an end of stream is final
  bool in_flight_ = false;  // an asynchronous write is on the current connection (strand)
  std::optional<std::string> close_after_write_;  // close() waits for the write in flight
  bool writing_ = false;
  bool connected_ = true;
  std::atomic<bool> closed_{false};  // set under mu_; closed() reads it without the lock
  std::unique_ptr<Shm> shm_;         // set once the link uses shared memory (under mu_)
};

}  // namespace internal
}  // namespace baton::net
