#pragma once

// Internal: a storage volume of the tensor store, the actor that holds the keys placed on it.
// Each key keeps its complete versions (the newest `keep`) and the versions still being
// assembled from shards. Answers carry a code rather than throw, so the client tells a missing
// key from a bad request from a volume that is gone.

#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "actor/path.hpp"
#include "baton/actor/actor.hpp"
#include "baton/rdma/rdma.hpp"
#include "baton/store/store.hpp"
#include "wire/slab.hpp"

namespace baton::store::detail {

/// too_big: what was asked for is more than one message carries (kPieceBytes); the answer has
/// its tensor, box and version, to be read in pieces. leased: the answer has a lease on the bytes
/// asked for, to be read one-sided: from a direct key's writer, or from the volume's own memory.
enum class Code : std::uint8_t { ok, missing, bad, too_big, leased };

/// A get into the reader's memory of at least this many bytes asks for a lease, and reads the
/// volume's memory one-sided (cross-memory attach on one host, UCX across hosts) instead of
/// receiving the bytes in a message: one copy, into the destination (a box that spans shards is
/// assembled in the volume first). A whole value held as a memfd, for a reader on this host's
/// shared memory, is answered with the memfd instead (see Volume::get).
constexpr std::size_t kLeaseBytes = std::size_t{1} << 20;

/// How long a lease on a volume's stored bytes holds them for a reader that never releases it
/// (its proc died); a read that outlasts it is refused, and read again.
constexpr std::chrono::milliseconds kStoredLease{120000};

/// The most bytes of a value one message carries; larger values are put and read in pieces of
/// rows (a message carries at most 1 GiB).
constexpr std::size_t kPieceBytes = std::size_t{256} << 20;

/// A key as messages name it.
inline std::string quoted(const std::string& key) {
  return "'" + key + "'";
}

struct Answer {
  Code code = Code::ok;
  std::string message;
  template <class Ar>
  void serialize(Ar& ar) {
    ar(code, message);
  }
};

struct PutItem {
  std::string key;
  Bytes value;
  TensorInfo info;
  Box box;
  std::uint64_t keep = 1;
  std::uint64_t group = 0;  // the pieces of one large put share it (0: a put of its own)
  std::string via;          // how it travels to the volume (baton::detail::path_to)
  /// Instead of `value`: memory of the volume's that the writer wrote the value into one-sided
  /// (reserved by Volume::reserve), and its size.
  std::uint64_t upload = 0;
  std::uint64_t upload_size = 0;
  std::uint64_t bytes() const { return upload != 0 ? upload_size : value.size(); }
  template <class Ar>
  void serialize(Ar& ar) {
    ar(key, value, info, box, keep, group, via, upload, upload_size);
  }
};

/// Memory of a volume reserved for a writer to write one value into, one-sided.
struct Upload {
  std::uint64_t id = 0;
  RdmaBuffer buffer;
  template <class Ar>
  void serialize(Ar& ar) {
    ar(id, buffer);
  }
};

/// How long memory reserved for an upload waits for the put that names it.
constexpr std::chrono::milliseconds kUploadHeld{120000};

/// A value of at least kLeaseBytes put into a volume in another process is written one-sided
/// into memory the volume reserved for it (RdmaBuffer: cross-memory attach on one host, UCX
/// across hosts) rather than carried in the message: one copy, where a ring takes two, and the
/// volume goes on serving while it is written. On one host, a value that travels as a memfd
/// (wire::travels_as_slab) is passed whole, with no copy at all.
inline bool uploaded_one_sided(const PutItem& item) {
  const std::size_t n = item.value.size();
  if (n < kLeaseBytes || item.via == "in-process") return false;
  return item.via == "tcp" || item.via == "tls" || !wire::travels_as_slab(n);
}

/// A put's item as a check sees it: its bytes' count, not its bytes.
struct PutCheck {
  std::string key;
  TensorInfo info;
  Box box;
  std::uint64_t size = 0;
  static PutCheck of(const PutItem& item) { return {item.key, item.info, item.box, item.bytes()}; }
  template <class Ar>
  void serialize(Ar& ar) {
    ar(key, info, box, size);
  }
};

/// At most this many items go in one message (a message carries at most 4096 buffers).
constexpr std::size_t kItemsPerMessage = 1024;

struct PutAnswer {
  Answer answer;
  std::vector<Put> puts;
  template <class Ar>
  void serialize(Ar& ar) {
    ar(answer, puts);
  }
};

struct GetItem {
  std::string key;
  std::optional<std::uint64_t> version;
  std::optional<Box> box;
  std::string via;     // how the answer travels back (the same link)
  bool lease = false;  // into the reader's memory: a lease on large bytes rather than the bytes
  template <class Ar>
  void serialize(Ar& ar) {
    ar(key, version, box, via, lease);
  }
};

/// `items` with `via` set to the path from this process to `volume`.
template <class Item>
std::vector<Item> via(std::vector<Item> items, const ActorId& volume) {
  const std::string path = baton::detail::path_to(volume.proc);
  for (Item& i : items) i.via = path;
  return items;
}

/// A reader's hold on bytes it reads one-sided from `buffer`, until it releases the lease or
/// `lease_ms` pass: a direct key's latest version (its writer does not write into that buffer
/// meanwhile), or a stored version's bytes (the volume keeps them meanwhile, whatever is put or
/// erased).
struct ReadLease {
  RdmaBuffer buffer;
  TensorInfo info;
  std::uint64_t version = 0;
  std::uint64_t lease = 0;
  std::int64_t lease_ms = 0;
  std::uint64_t offset = 0;  // where the bytes of `box` start in `buffer`
  std::optional<Box> box;    // the box whose bytes (row-major) it holds; none: the whole tensor
  bool direct = true;        // in a direct writer's memory, else in the volume's
  template <class Ar>
  void serialize(Ar& ar) {
    ar(buffer, info, version, lease, lease_ms, offset, box, direct);
  }
};

struct GetAnswer {
  Answer answer;
  std::vector<Got> got;
  std::optional<ReadLease> lease;  // Code::leased's
  template <class Ar>
  void serialize(Ar& ar) {
    ar(answer, got, lease);
  }
};

/// What a direct writer's acquire gets: the buffer to write next, or none free yet (readers hold
/// every other one; ask again).
struct DirectSlot {
  Answer answer;
  std::optional<std::uint32_t> index;
  template <class Ar>
  void serialize(Ar& ar) {
    ar(answer, index);
  }
};

class Volume : public Actor {
 public:
  /// Checks every item, then stores them all (or none, answering why).
  PutAnswer put(const std::vector<PutItem>& items);
  /// Memory for values of `sizes` bytes that a writer writes one-sided and then puts (naming
  /// each Upload's id); held kUploadHeld for the put.
  std::vector<Upload> reserve(const std::vector<std::uint64_t>& sizes);
  /// Checks every item as put() would, storing nothing.
  Answer check(const std::vector<PutCheck>& items);
  /// Drops the versions `puts` made (a batch that failed elsewhere).
  void undo(const std::vector<std::string>& keys, const std::vector<Put>& puts);
  GetAnswer get(const std::vector<GetItem>& items);
  bool exists(const std::string& key);
  std::vector<std::string> keys(const std::string& prefix);
  void erase(const std::string& key);
  std::optional<std::uint64_t> latest(const std::string& key);
  /// The keys sorted next to `key` (for a KeyNotFound's message).
  std::vector<std::string> nearest(const std::string& key);
  VolumeStats stats();
  /// The host this volume is on: its name, and its address on the network for a proc reached
  /// over TCP (hosts of one machine in network namespaces share a name).
  std::string host();

  // Direct mode (direct.cpp): the key's versions live in buffers of its writer's memory.
  /// Opens `key` over the writer's `buffers` (each the whole tensor), replacing an earlier
  /// direct writer of it; refused for a key that holds stored versions.
  Answer direct_open(const std::string& key, const TensorInfo& info,
                     const std::vector<RdmaBuffer>& buffers, std::int64_t lease_ms);
  /// A buffer that is neither the latest version nor leased to a reader, given to the writer.
  DirectSlot direct_acquire(const std::string& key);
  /// Makes the acquired buffer `index` the latest version.
  PutAnswer direct_publish(const std::string& key, std::uint32_t index);
  /// Ends a reader's lease, counting its `size` bytes as moved by `path`; false if it had run
  /// out (the writer may have written the buffer, the volume freed the bytes).
  bool release(const std::string& key, std::uint64_t lease, std::uint64_t size,
               const std::string& path);

  static constexpr auto endpoints =
      baton::endpoints<&Volume::put, &Volume::reserve, &Volume::check, &Volume::undo, &Volume::get,
                       &Volume::exists, &Volume::keys, &Volume::erase, &Volume::latest,
                       &Volume::nearest, &Volume::stats, &Volume::host, &Volume::direct_open,
                       &Volume::direct_acquire, &Volume::direct_publish, &Volume::release>();

 private:
  /// Bytes of this volume registered for one-sided reads; unregistered once nothing holds them.
  struct Registered {
    Bytes bytes;
    RdmaBuffer buffer;
    bool scratch = false;  // memory of this volume's own, where a box is assembled for a reader
    explicit Registered(Bytes b);
    ~Registered();
    Registered(const Registered&) = delete;
    Registered& operator=(const Registered&) = delete;
  };
  struct Shard {
    Box box;
    Bytes data;
    std::shared_ptr<Registered> registered;  // made at its first lease (or upload), kept
  };
  struct Version {
    std::uint64_t number = 0;
    TensorInfo info;
    std::vector<Shard> shards;
    std::uint64_t group = 0;  // of the large put whose pieces make it
  };
  struct Key {
    std::deque<Version> complete;  // ascending, the newest `keep`
    std::deque<Version> open;      // being assembled, ascending
    std::uint64_t next = 1;
  };

  struct Direct {
    using Clock = std::chrono::steady_clock;
    struct Lease {
      std::uint64_t id = 0;
      std::uint32_t buffer = 0;
      Clock::time_point until;
    };
    TensorInfo info;
    std::vector<RdmaBuffer> buffers;
    std::optional<std::uint32_t> latest;    // the published version's buffer
    std::optional<std::uint32_t> acquired;  // the writer's, until it publishes
    std::uint64_t version = 0;
    std::chrono::milliseconds lease_for{0};
    std::vector<Lease> leases;  // readers'; those past `until` are dropped when next looked at
  };
  /// A lease on `key`'s latest version for a get, or why not.
  Answer lease(const std::string& key, const GetItem& item, GetAnswer& out);
  /// Ends a reader's lease on a direct key's buffer; false if it had run out.
  bool direct_release(const std::string& key, std::uint64_t lease);
  struct StoredLease {
    std::shared_ptr<Registered> held;
    std::chrono::steady_clock::time_point until;
  };

  /// Why `item` cannot be put now ("" if it can).
  std::string refuse(const PutCheck& item) const;
  /// Turns a whole shard a reader on this host gets by message into a memfd, once.
  static void slab_once(Shard& s, const GetItem& item);
  /// Stores `item` (whose bytes, if uploaded, are `uploaded`'s: registered already).
  Put store(const PutItem& item, std::uint64_t group,
            std::shared_ptr<Registered> uploaded = nullptr);
  /// Where read() finds an item's bytes: a view of one shard (which, and where in it), or
  /// assembled in scratch memory for a lease.
  struct Source {
    Shard* shard = nullptr;
    std::size_t offset = 0;
    std::shared_ptr<Registered> scratch;
  };
  /// Reads one item, or says why not (code and message). With `source`, the bytes of a box that
  /// spans shards are assembled in scratch memory when it is leased (`item.lease`, kLeaseBytes).
  Answer read(const GetItem& item, Got& out, Source* source = nullptr);
  /// A lease on the bytes `got` holds of a stored version, from where `source` says; false where
  /// they cannot be registered (sent instead).
  bool lease_stored(Got& got, Source& source, GetAnswer& out);
  /// Registered memory of `size` bytes to assemble a box in: one a released lease gave back, or
  /// new. Given back by release() to a pool of at most kScratchKept buffers, kScratchBytes.
  std::shared_ptr<Registered> take_scratch(std::size_t size);
  void give_back(std::shared_ptr<Registered> scratch);
  static constexpr std::size_t kScratchKept = 4;
  static constexpr std::size_t kScratchBytes = std::size_t{512} << 20;

  std::map<std::string, Key> keys_;
  std::map<std::string, Direct> direct_;                // keys in direct mode
  std::map<std::uint64_t, StoredLease> stored_leases_;  // readers' leases on stored bytes
  std::deque<std::shared_ptr<Registered>> scratch_;     // free, oldest first
  std::map<std::uint64_t, StoredLease> uploads_;        // reserved, awaiting their puts
  /// Drops leases and uploads that ran out.
  void prune();
  std::uint64_t next_lease_ = 1;
  VolumeStats stats_;
};

}  // namespace baton::store::detail
