#pragma once

// Internal: the shared memory under a same-host link. One memfd holds two single-producer,
// single-consumer byte rings, one per direction; the link's frames flow through them as they
// would through a socket (same framing, sequence numbers and limits: see link_shm.cpp).
//
// The memory is shared with the peer's process, which may be hostile or die at any moment, so
// nothing read from it is trusted: each side keeps its own position in its own memory, and the
// peer's position (the writer's head, the reader's tail) is checked against it on every read.
// A position that could not have come from a well-behaved peer makes the ring corrupt, for
// good; what the bytes say is then checked by the frame decoder, as a socket's bytes are.
//
// A side that finds nothing to do says it sleeps (a flag in the ring), checks once more, and
// waits; the other side wakes it (a doorbell, see link_shm.cpp) only when the flag is set, so a
// busy stream of frames costs no system call at all.

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <string>
#include <string_view>
#include <vector>

namespace baton::net::shm {

/// One direction's positions and flags, each on its own cache line.
struct RingControl {
  alignas(64) std::atomic<std::uint64_t> head;           // bytes ever written (the writer's)
  alignas(64) std::atomic<std::uint64_t> tail;           // bytes ever read (the reader's)
  alignas(64) std::atomic<std::uint32_t> reader_sleeps;  // the reader waits (asleep_here())
  std::atomic<std::uint32_t> writer_waits;               // the writer waits for room
  std::atomic<std::uint32_t> group_armed;  // the reader watches the writer's wake group too
};

/// What a sleeping reader writes in `reader_sleeps`: 1 + the core it goes to sleep on (1 if
/// that is unknown), which the writer may use to order its wake-ups (see wake_ups.hpp).
std::uint32_t asleep_here();

/// The start of the shared region: what a mapper checks before it uses the rest.
struct RegionHeader {
  std::uint64_t magic;
  std::uint32_t version;
  std::uint32_t reserved;
  std::uint64_t capacity;  // bytes of each ring's data
};

constexpr std::uint64_t kMagic = 0x62'61'74'6f'6e'73'68'6dULL;  // "batonshm"
constexpr std::uint32_t kVersion = 2;
/// Each ring's data: enough for a stream of calls without a wait, small beside a proc's heap.
constexpr std::size_t kDefaultCapacity = std::size_t{1} << 20;

/// Bytes of a region with two rings of `capacity`.
std::size_t region_size(std::size_t capacity);

/// The two rings of a region as laid out in memory; `dialler` picks which one this side writes.
struct RegionLayout {
  RegionHeader* header;
  RingControl* control[2];  // [0]: dialler to listener, [1]: listener to dialler
  std::byte* data[2];
};
RegionLayout layout(void* base, std::size_t capacity);

/// This side's end of one ring. Only one thread uses an end at a time (the link sees to that).
class RingEnd {
 public:
  RingEnd() = default;
  RingEnd(RingControl* control, std::byte* data, std::size_t capacity)
      : control_(control), data_(data), capacity_(capacity) {}

  // --- the reading end ---
  /// Bytes ready to read (the writer's head read now); 0 and corrupt() when it is impossible.
  std::size_t readable();
  /// Bytes ready to read, at least `want` if there are: the writer's head as last read, read
  /// again only when that is not enough (its cache line stays with the writer meanwhile).
  std::size_t ready(std::size_t want);
  /// Copies up to `n` bytes out (as many as are ready) and returns how many.
  std::size_t read(void* to, std::size_t n);
  /// Says this end sleeps, unless bytes came meanwhile: true means wait for the doorbell.
  bool sleep_if_empty();
  /// After read(): true if the writer waits for room and should be woken (once), which is when
  /// at least half the ring is free.
  bool writer_wants_waking();

  // --- the writing end ---
  /// Room for bytes now (the reader's tail read now); 0 and corrupt() when it is impossible.
  std::size_t writable();
  /// Room for bytes, at least `want` if there is: the reader's tail as last read, read again
  /// only when that is not enough.
  std::size_t room(std::size_t want);
  /// Copies up to `n` bytes in (as many as fit) and returns how many.
  std::size_t write(const void* from, std::size_t n);
  /// Says this end waits for room, unless room came meanwhile: true means wait.
  bool wait_if_full();
  /// After write(): non-zero if the reader sleeps and should be woken (once): 1 + the core it
  /// went to sleep on, as it said (a hint, nothing more: the peer may lie).
  std::uint32_t reader_wants_waking();

  /// Why the ring is unusable, or empty.
  const std::string& corrupt() const { return corrupt_; }
  std::uint64_t position() const { return mine_; }
  /// The ring's shared positions and flags (a spinner watches the writer's head there).
  RingControl* control() const { return control_; }

 private:
  RingControl* control_ = nullptr;
  std::byte* data_ = nullptr;
  std::size_t capacity_ = 0;
  std::uint64_t mine_ = 0;   // this end's own position, kept out of the peer's reach
  std::uint64_t known_ = 0;  // the peer's position as last read (checked then)
  std::string corrupt_;
};

/// A fresh region in a memfd, mapped: its fd (close-on-exec) and address. Throws
/// std::system_error naming what failed.
struct Region {
  int fd = -1;
  void* base = nullptr;
  std::size_t size = 0;
  std::size_t capacity = 0;
  Region() = default;
  Region(const Region&) = delete;
  Region& operator=(const Region&) = delete;
  Region(Region&& o) noexcept;
  Region& operator=(Region&& o) noexcept;
  ~Region();

  static Region create(std::size_t capacity = kDefaultCapacity);
  /// Maps a region a peer made; "" or why it cannot be used (size, magic, version). Takes `fd`
  /// and closes it: the mapping alone keeps the memory.
  static std::string map(int fd, Region& out);
  /// Closes the descriptor once it was handed over; the mapping stays.
  void close_fd();
};

/// Sends all of `bytes` over `sock`, waiting up to `timeout_ms` at a time for room; "" or the
/// error.
std::string send_all(int sock, std::string_view bytes, int timeout_ms);
/// Sends `fds` with one byte (`tag`) over the unix socket `sock` (SCM_RIGHTS), waiting up to
/// `timeout_ms` for room; "" or the error.
std::string send_fds(int sock, const std::vector<int>& fds, int timeout_ms, char tag = 'm');
inline std::string send_fd(int sock, int fd, int timeout_ms, char tag = 'm') {
  return send_fds(sock, {fd}, timeout_ms, tag);
}
/// A new eventfd for a link's wake-ups (non-blocking, close-on-exec): -1 and `error` if none.
int make_bell(std::string& error);
/// Whether `fd` is an eventfd: a peer's descriptor is checked before it is written to.
bool is_eventfd(int fd);

/// Reads what waits on a shared-memory link's socket now: descriptors (appended to `fds`, in
/// the order sent; the bytes that carry them are dropped). `eof`: the peer's end closed (or reset).
/// It may leave bytes that came after its last read: call it again when the socket is readable.
struct Drained {
  bool eof = false;
  std::string error;  // a message that could not be taken whole (too many descriptors)
};
Drained drain(int sock, std::deque<int>& fds);
/// What the dialler of a shared-memory link sends after its offer: the region's memfd, then the
/// eventfd that wakes the dialler (the listener writes it) and the one that wakes the listener.
struct Offered {
  int region = -1;
  int dialler_bell = -1;
  int listener_bell = -1;
};
/// Receives the byte and the three descriptors of an offer, if they are there now. Nothing
/// (every fd -1) if they have not arrived yet (`error` empty); on `error`, nothing is kept.
Offered receive_offer(int sock, std::string& error);

}  // namespace baton::net::shm
