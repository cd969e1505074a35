#pragma once

// baton's tensor store: values put and got by key across a job, held by storage volumes (actors
// spread over a proc mesh). A value is plain bytes, or one shard of a global tensor (the box of
// it this value covers); a reader asks for any box of the tensor and gets exactly that box,
// assembled from the shards it meets. Every put of a key makes a new version; a key is readable
// once the shards of a version cover the whole tensor, and a reader always gets one whole
// version. A Store is a handle, like a mesh: copy it, or pass it in calls to actors in any proc.
//
// Inside an actor's coroutine, name the options before a co_await rather than writing them as a
// braced temporary in it: GCC 12 destroys such a temporary twice.
//
//   auto store = store::Store::create(procs);
//   store.put("w", Bytes::copy(v.data(), bytes), {"float32", 4, {8, 16}}).get();
//   Bytes rows = store.get("w", {.box = store::Box{{0, 0}, {4, 16}}}).get().data;

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "baton/actor/actor_ref.hpp"
#include "baton/actor/future.hpp"
#include "baton/mesh/proc_mesh.hpp"
#include "baton/store/box.hpp"
#include "baton/wire/bytes.hpp"

namespace baton::store {

/// What went wrong with a store operation: the message names the key, and what to do.
class StoreError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// No version of the key is complete (it was never put, was erased, or is partial).
class KeyNotFound : public StoreError {
 public:
  using StoreError::StoreError;
};

/// What a value's bytes are: elements of a tensor of `shape`, `element` bytes each, of `dtype`
/// (a name the store only compares: "float32", "bfloat16", ...). The default, a one-dimensional
/// tensor of bytes as long as the value, is plain bytes.
struct TensorInfo {
  std::string dtype;
  std::size_t element = 1;
  std::vector<std::int64_t> shape;

  bool operator==(const TensorInfo&) const = default;
  std::string to_string() const;
  template <class Ar>
  void serialize(Ar& ar) {
    ar(dtype, element, shape);
  }
};

struct PutOptions {
  /// The box of the global tensor this value covers; none: the whole tensor.
  std::optional<Box> shard;
  /// How many complete versions of the key the store keeps (at least 1). A reader that already
  /// holds a version's bytes keeps them whatever the store drops.
  std::size_t keep = 1;
};

struct GetOptions {
  /// The version to read; none: the latest complete one.
  std::optional<std::uint64_t> version;
  /// The box of the tensor to read; none: the whole tensor.
  std::optional<Box> box;
};

/// A value read: exactly the box asked for, its elements row-major.
struct Got {
  Bytes data;
  TensorInfo info;
  Box box;
  std::uint64_t version = 0;

  template <class Ar>
  void serialize(Ar& ar) {
    ar(data, info, box, version);
  }
};

/// What a put made: the version its value went into, and whether that version is complete
/// (readable) now.
struct Put {
  std::uint64_t version = 0;
  bool complete = false;

  template <class Ar>
  void serialize(Ar& ar) {
    ar(version, complete);
  }
};

/// What one volume holds and has moved.
struct VolumeStats {
  std::string proc;
  std::uint64_t keys = 0;
  std::uint64_t versions = 0;
  std::uint64_t bytes_held = 0;
  std::uint64_t puts = 0;
  /// A get read one-sided counts, with its bytes, once its reader has them.
  std::uint64_t gets = 0;
  std::uint64_t bytes_in = 0;
  std::uint64_t bytes_out = 0;
  /// Bytes put and got, and how many transfers, by the path they took between the volume and
  /// the other proc: "in-process", "shm" (one host: shared memory, large values as mapped
  /// memfds), "unix", "tcp", "tls" (another host); and "rdma " and the RdmaBuffer backend
  /// ("rdma cma", "rdma ucx", "rdma messages") for bytes moved one-sided: puts of 1 MiB or
  /// more (written into memory the volume reserves; on one host, those under 8 MiB, as larger
  /// ones pass whole as memfds), gets of 1 MiB or more into the reader's memory, and a direct
  /// key's reads.
  std::map<std::string, std::uint64_t> bytes_by_path;
  std::map<std::string, std::uint64_t> transfers_by_path;

  template <class Ar>
  void serialize(Ar& ar) {
    ar(proc, keys, versions, bytes_held, puts, gets, bytes_in, bytes_out, bytes_by_path,
       transfers_by_path);
  }
};

namespace detail {
class Volume;
struct ReadLease;
}  // namespace detail

struct DirectOptions {
  /// How long a reader may hold a version of a direct key. A read that takes longer fails with
  /// StoreError (the writer may have written that buffer meanwhile): read again.
  std::chrono::milliseconds lease{10000};
};

/// The writer's side of a key in direct mode (Store::direct). Its versions live in buffers of
/// the writer's own memory, registered for one-sided reads, and readers read them from there:
/// nothing is copied into the store. Double-buffered: the writer writes a version only into a
/// buffer acquire() gave it, which is neither the published version nor held by a reader, and
/// publish() makes that buffer the latest version. A get reads one published version whole,
/// never a buffer the writer is writing.
class DirectWriter {
 public:
  DirectWriter() = default;

  const std::string& key() const;
  std::size_t buffers() const;
  /// Buffer `index` of the writer's memory.
  std::span<std::byte> buffer(std::size_t index) const;
  /// The buffer to write the next version into. While readers hold every other one, it asks
  /// again (no thread waits), until their reads end or their leases run out.
  Future<std::size_t> acquire() const;
  /// Makes buffer `index`, which acquire() gave and the writer has written since, the key's
  /// latest version.
  Future<Put> publish(std::size_t index) const;
  /// Erases the key and unregisters the buffers (readers then get KeyNotFound); the memory is
  /// the caller's again once this is done.
  Future<void> close() const;

  /// It stays in the process whose memory it writes: sending one elsewhere throws.
  template <class Ar>
  void serialize(Ar&) {
    throw StoreError("a DirectWriter stays in the process that opened it (it writes its memory)");
  }

 private:
  friend class Store;
  struct State;
  std::shared_ptr<State> state_;
};

/// Where a store's volumes go.
enum class Spread : std::uint8_t {
  per_proc,  // one volume in each proc of the mesh
  per_host,  // one volume on each host, in the mesh's first proc there
  single,    // one volume, in the mesh's first proc
};

class Store {
 public:
  /// An empty handle, to be assigned a store.
  Store() = default;

  /// Spawns the store's volumes over `procs`. Outside actors; inside one, co_await
  /// create_async().
  static Store create(const ProcMesh& procs, Spread spread = Spread::per_proc,
                      const std::string& name = "store");
  static Future<Store> create_async(const ProcMesh& procs, Spread spread = Spread::per_proc,
                                    const std::string& name = "store");

  /// Puts `value` under `key`: the whole tensor `info` describes, or the shard `options.shard`
  /// of it. A shard joins the oldest version of the key still being assembled that it does not
  /// overlap (a new version otherwise); a version becomes readable once its shards cover the
  /// tensor. Fails (StoreError) for a value whose size is not its box's, a box outside the
  /// tensor, or a tensor unlike the one the version being assembled holds.
  Future<Put> put(const std::string& key, Bytes value, const TensorInfo& info = {},
                  const PutOptions& options = {}) const;
  /// put() of a copy of `value`: host memory, or device memory (a GPU's, through the gpu layer:
  /// its bytes come to the host in one copy, and volumes hold them there). `value` may be
  /// reused as soon as this returns.
  Future<Put> put(const std::string& key, std::span<const std::byte> value,
                  const TensorInfo& info = {}, const PutOptions& options = {}) const;
  /// Several puts, all or nothing: either every value is stored, or none is (the first error).
  /// Items whose volume is lost go to the next volume, as put's do.
  Future<std::vector<Put>> put_batch(
      const std::vector<std::tuple<std::string, Bytes, TensorInfo, PutOptions>>& puts) const;

  /// Reads `key` (a box of it, a version of it). KeyNotFound, naming the nearest keys, for a
  /// key with no complete version (a partial one is reported with what its shards miss).
  Future<Got> get(const std::string& key, const GetOptions& options = {}) const;
  /// get() into `destination`, host or device memory, which must be exactly the size of what is
  /// read and, when `dtype` is given, of that type (StoreError otherwise, saying what was
  /// expected, with `destination` untouched); it must stay valid until the future is ready.
  /// Device memory is written by the gpu layer: from a direct writer's device memory on this
  /// host, straight through GPU IPC; from host memory, with one copy from the host.
  Future<Got> get_into(const std::string& key, std::span<std::byte> destination,
                       const GetOptions& options = {}, const std::string& dtype = "") const;
  /// Several gets: every value, or the first error.
  Future<std::vector<Got>> get_batch(const std::vector<std::string>& keys) const;

  Future<bool> exists(const std::string& key) const;
  /// The keys that start with `prefix` (a plain string prefix: no separator is special), sorted.
  Future<std::vector<std::string>> keys(const std::string& prefix = "") const;
  /// Drops every version of `key`; nothing happens for a key that is not there.
  Future<void> erase(const std::string& key) const;
  /// The latest complete version of `key`, if any.
  Future<std::optional<std::uint64_t>> latest_version(const std::string& key) const;
  /// Each volume's holdings and traffic.
  Future<std::vector<VolumeStats>> stats() const;

  /// Opens `key` in direct mode (see DirectWriter) over `buffers` of the caller's host or device
  /// memory: at least two, each exactly `info`'s tensor, valid until close() is done. Readers
  /// get() it like any key; the bytes come from the writer's memory by the fastest path between
  /// the two procs (see RdmaBuffer: device memory of a proc on this host through GPU IPC, into
  /// the reader's device or host memory). StoreError for a key that holds stored versions.
  Future<DirectWriter> direct(const std::string& key, const TensorInfo& info,
                              std::vector<std::span<std::byte>> buffers,
                              const DirectOptions& options = {}) const;

  /// The handle as text, for where no baton type goes (a C++ actor that Python calls takes
  /// strings); from_handle() makes the handle again, in any process of the job.
  std::string handle() const;
  static Store from_handle(const std::string& text);

  std::size_t volumes() const { return volumes_.size(); }
  explicit operator bool() const { return !volumes_.empty(); }

  template <class Ar>
  void serialize(Ar& ar) {
    ar(volumes_);
  }

 private:
  explicit Store(std::vector<ActorRef<detail::Volume>> v) : volumes_(std::move(v)) {}
  /// Index of the volume `key` lives on.
  std::size_t home(const std::string& key) const;
  /// A get, into `into` if given.
  void fetch(const std::string& key, const GetOptions& options,
             std::optional<std::span<std::byte>> into, const std::string& dtype,
             const std::shared_ptr<baton::detail::State<Got>>& next) const;
  /// A get of more than one message carries, as pieces of `meta` (its box, tensor and version).
  void read_pieces(const std::string& key, Got meta, std::optional<std::span<std::byte>> into,
                   const std::string& dtype,
                   const std::shared_ptr<baton::detail::State<Got>>& next) const;
  /// A get read one-sided under `lease` (from `volume`): from a direct key's writer, or from the
  /// volume's own memory.
  void read_leased(const std::string& key, const GetOptions& options,
                   const detail::ReadLease& lease, const ActorRef<detail::Volume>& volume,
                   std::optional<std::span<std::byte>> into, const std::string& dtype,
                   const std::shared_ptr<baton::detail::State<Got>>& next) const;
  /// Fails `next` with a KeyNotFound that names the nearest keys.
  void not_found(const std::string& key, const std::string& message,
                 const std::shared_ptr<baton::detail::State<Got>>& next) const;

  std::vector<ActorRef<detail::Volume>> volumes_;
};

}  // namespace baton::store
