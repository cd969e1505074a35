// A storage volume of the tensor store (see volume.hpp): versions assembled from shards, made
// readable once they cover their tensor, and read back as any box of it.

#include "store/volume.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <new>

#include "baton/actor/port.hpp"
#include "wire/slab.hpp"

namespace baton::store::detail {
namespace {

/// Where the elements of `box` start in the row-major layout of `outer` (which contains it), in
/// elements, if they are contiguous there: the dimensions after the first one `box` cuts are
/// whole, and those before it are one element long.
std::optional<std::int64_t> contiguous_in(const Box& outer, const Box& box) {
  const std::size_t rank = box.rank();
  std::size_t cut = 0;  // the first dimension, from the end, that box does not span whole
  while (cut < rank && box.sizes[rank - 1 - cut] == outer.sizes[rank - 1 - cut]) ++cut;
  for (std::size_t d = 0; d + cut + 1 < rank; ++d) {
    if (box.sizes[d] != 1) return std::nullopt;
  }
  std::int64_t offset = 0;
  std::int64_t stride = 1;
  for (std::size_t d = rank; d-- > 0;) {
    offset += (box.offsets[d] - outer.offsets[d]) * stride;
    stride *= outer.sizes[d];
  }
  return offset;
}

/// Memory of `size` bytes that readers on this host will read one-sided (an upload's, a box's
/// scratch), in huge pages where the kernel gives them (MADV_HUGEPAGE). Cross-memory attach pins
/// and copies page by page: from 2 MiB pages it reached about a memcpy's speed here, from 4 KiB
/// pages 0.6-0.7x. Every byte is written before it is read, so nothing is zeroed for it.
std::shared_ptr<std::byte[]> memory_to_lease(std::size_t size) {
  constexpr std::size_t kHugePage = std::size_t{2} << 20;
  if (size < kHugePage) return std::shared_ptr<std::byte[]>(new std::byte[size]);
  void* at = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (at == MAP_FAILED) throw std::bad_alloc();
  (void)::madvise(at, size, MADV_HUGEPAGE);  // a hint: 4 KiB pages where it is not taken
  return {static_cast<std::byte*>(at), [size](std::byte* p) { ::munmap(p, size); }};
}

std::string boxes(const std::vector<Box>& list) {
  std::string out;
  for (const Box& b : list) out += (out.empty() ? "" : ", ") + b.to_string();
  return out;
}

}  // namespace

std::string Volume::refuse(const PutCheck& item) const {
  const TensorInfo& info = item.info;
  const std::string what = "put of " + quoted(item.key) + ": ";
  if (direct_.contains(item.key)) {
    return what +
           "the key is in direct mode (read from its writer's memory); erase it before "
           "putting values into the store under its name";
  }
  if (info.element == 0) return what + "an element of 0 bytes";
  for (const std::int64_t n : info.shape) {
    if (n < 0) return what + "a tensor of shape " + info.to_string() + " (a negative extent)";
  }
  const Box whole = Box::whole(info.shape);
  if (item.box.rank() != whole.rank() || !contains(whole, item.box)) {
    return what + "shard " + item.box.to_string() + " lies outside the tensor " + info.to_string() +
           " (a shard is a box of the global tensor)";
  }
  const auto want = static_cast<std::uint64_t>(item.box.elements()) * info.element;
  if (item.size != want) {
    return what + "the value has " + std::to_string(item.size) + " bytes, but shard " +
           item.box.to_string() + " of " + info.to_string() + " needs " + std::to_string(want);
  }
  return {};
}

Answer Volume::check(const std::vector<PutCheck>& items) {
  for (const PutCheck& item : items) {
    if (std::string why = refuse(item); !why.empty()) return {Code::bad, std::move(why)};
  }
  return {};
}

PutAnswer Volume::put(const std::vector<PutItem>& items) {
  PutAnswer a;
  prune();
  std::vector<PutCheck> checks;
  checks.reserve(items.size());
  for (const PutItem& item : items) checks.push_back(PutCheck::of(item));
  a.answer = check(checks);
  if (a.answer.code != Code::ok) return a;
  // Values written one-sided into memory reserved here: each upload must still be held, and of
  // the size the item says.
  std::vector<std::shared_ptr<Registered>> uploaded(items.size());
  for (std::size_t i = 0; i < items.size(); ++i) {
    if (items[i].upload == 0) continue;
    auto it = uploads_.find(items[i].upload);
    if (it == uploads_.end() || it->second.held->bytes.size() != items[i].upload_size) {
      a.answer = {Code::bad, "put of " + quoted(items[i].key) +
                                 ": the memory its bytes were written into is not held here (a " +
                                 "put must follow its upload within " +
                                 std::to_string(kUploadHeld.count() / 1000) +
                                 " s); nothing of the put was stored, put again"};
      return a;
    }
    uploaded[i] = it->second.held;
  }
  a.puts.reserve(items.size());
  for (std::size_t i = 0; i < items.size(); ++i) {
    if (uploaded[i]) uploads_.erase(items[i].upload);
    a.puts.push_back(store(items[i], items[i].group, std::move(uploaded[i])));
  }
  return a;
}

std::vector<Upload> Volume::reserve(const std::vector<std::uint64_t>& sizes) {
  prune();
  std::vector<Upload> out;
  out.reserve(sizes.size());
  const auto until = std::chrono::steady_clock::now() + kUploadHeld;
  for (const std::uint64_t n : sizes) {
    if (n == 0 || n > kPieceBytes) {
      throw UsageError("reserve of " + std::to_string(n) + " bytes: an upload holds 1 to " +
                       std::to_string(kPieceBytes) + " bytes (one piece of a put)");
    }
    std::shared_ptr<std::byte[]> memory = memory_to_lease(n);  // every byte is written
    auto held = std::make_shared<Registered>(Bytes::view(memory, memory.get(), n));
    const std::uint64_t id = next_lease_++;
    uploads_[id] = {held, until};
    out.push_back({id, held->buffer});
  }
  return out;
}

void Volume::prune() {
  const auto now = std::chrono::steady_clock::now();
  std::erase_if(stored_leases_, [&](const auto& l) { return l.second.until <= now; });
  std::erase_if(uploads_, [&](const auto& u) { return u.second.until <= now; });
}

Put Volume::store(const PutItem& item, std::uint64_t group, std::shared_ptr<Registered> uploaded) {
  Key& k = keys_[item.key];
  ++stats_.puts;
  stats_.bytes_in += item.bytes();
  stats_.bytes_by_path[item.via] += item.bytes();
  ++stats_.transfers_by_path[item.via];
  // The oldest version being assembled, of this tensor, that the shard does not overlap; a
  // piece of a large put joins only its own put's version.
  auto joins = [&](const Version& v) {
    if (v.info != item.info || v.group != group) return false;
    return std::none_of(v.shards.begin(), v.shards.end(),
                        [&](const Shard& s) { return intersect(s.box, item.box).has_value(); });
  };
  auto it = std::find_if(k.open.begin(), k.open.end(), joins);
  if (it == k.open.end()) {
    k.open.push_back(Version{k.next++, item.info, {}, group});
    it = std::prev(k.open.end());
  }
  const Bytes& bytes = uploaded ? uploaded->bytes : item.value;
  it->shards.push_back(Shard{item.box, bytes, std::move(uploaded)});
  std::vector<Box> have;
  have.reserve(it->shards.size());
  for (const Shard& s : it->shards) have.push_back(s.box);
  const Put done{it->number, uncovered(Box::whole(item.info.shape), have).empty()};
  if (!done.complete) return done;
  // Complete: readable from now on. Versions still being assembled that are older can no longer
  // become the latest, and go.
  Version v = std::move(*it);
  k.open.erase(it);
  while (!k.open.empty() && k.open.front().number < v.number) k.open.pop_front();
  auto at = std::find_if(k.complete.begin(), k.complete.end(),
                         [&](const Version& c) { return c.number > v.number; });
  k.complete.insert(at, std::move(v));
  const std::size_t keep = std::max<std::uint64_t>(1, item.keep);
  while (k.complete.size() > keep) k.complete.pop_front();
  return done;
}

void Volume::undo(const std::vector<std::string>& keys, const std::vector<Put>& puts) {
  for (std::size_t i = 0; i < keys.size() && i < puts.size(); ++i) {
    auto it = keys_.find(keys[i]);
    if (it == keys_.end()) continue;
    auto drop = [&](std::deque<Version>& list) {
      std::erase_if(list, [&](const Version& v) { return v.number == puts[i].version; });
    };
    drop(it->second.complete);
    drop(it->second.open);
    if (it->second.complete.empty() && it->second.open.empty()) keys_.erase(it);
  }
}

Answer Volume::read(const GetItem& item, Got& out, Source* source) {
  auto it = keys_.find(item.key);
  if (it == keys_.end() || it->second.complete.empty()) {
    if (it != keys_.end() && !it->second.open.empty()) {
      const Version& v = it->second.open.back();
      std::vector<Box> have;
      for (const Shard& s : v.shards) have.push_back(s.box);
      return {Code::missing, "key " + quoted(item.key) + " is partial: version " +
                                 std::to_string(v.number) + " of " + v.info.to_string() +
                                 " has shards " + boxes(have) + " and lacks " +
                                 boxes(uncovered(Box::whole(v.info.shape), have)) +
                                 " (put the missing shards first)"};
    }
    return {Code::missing, "no key " + quoted(item.key) + " in the store"};
  }
  std::deque<Version>& kept = it->second.complete;
  Version* v = &kept.back();
  if (item.version) {
    auto at = std::find_if(kept.begin(), kept.end(),
                           [&](const Version& c) { return c.number == *item.version; });
    if (at == kept.end()) {
      std::string numbers;
      for (const Version& c : kept)
        numbers += (numbers.empty() ? "" : ", ") + std::to_string(c.number);
      return {Code::missing, "version " + std::to_string(*item.version) + " of key " +
                                 quoted(item.key) + " is not kept (kept: " + numbers +
                                 "; put with a larger keep to keep more)"};
    }
    v = &*at;
  }
  const Box whole = Box::whole(v->info.shape);
  const Box box = item.box.value_or(whole);
  if (box.rank() != whole.rank() || !contains(whole, box)) {
    return {Code::bad, "get of " + quoted(item.key) + ": box " + box.to_string() +
                           " lies outside the tensor " + v->info.to_string()};
  }
  out.info = v->info;
  out.box = box;
  out.version = v->number;
  const std::size_t element = v->info.element;
  if (static_cast<std::uint64_t>(box.elements()) * element > kPieceBytes) {
    return {Code::too_big, {}};  // the reader asks for it in pieces
  }
  // Within one shard, where its bytes are contiguous there: a view, no copy.
  for (Shard& s : v->shards) {
    if (!contains(s.box, box)) continue;
    if (const auto at = contiguous_in(s.box, box)) {
      const auto bytes = static_cast<std::size_t>(box.elements()) * element;
      const auto start = static_cast<std::size_t>(*at) * element;
      if (bytes == s.data.size()) slab_once(s, item);
      // The whole shard as it is (a slab goes on as the same memfd), or a slice of it.
      out.data = bytes == s.data.size() ? s.data : s.data.slice(start, bytes);
      if (source != nullptr) *source = {&s, start, nullptr};
      return {};
    }
  }
  auto assemble = [&](std::byte* dst) {
    for (const Shard& s : v->shards) {
      if (const auto region = intersect(s.box, box)) {
        copy_region(s.data.data(), s.box, dst, box, *region, element);
      }
    }
  };
  const auto bytes = static_cast<std::size_t>(box.elements()) * element;
  if (source != nullptr && item.lease && bytes >= kLeaseBytes) {
    try {
      source->scratch = take_scratch(bytes);
      // Ours, and no lease holds it while it is out of the pool.
      assemble(const_cast<std::byte*>(source->scratch->bytes.data()));
      out.data = source->scratch->bytes;
      return {};
    } catch (const std::exception&) {
      source->scratch = nullptr;  // not registrable here: assembled for the answer below
    }
  }
  out.data = Bytes::make(bytes, [&](std::span<std::byte> dst) { assemble(dst.data()); });
  return {};
}

/// A shard of ordinary memory (uploaded one-sided, put from this proc, or carried by a message
/// from another host) that a reader on this host asks for whole by message: the link would copy it
/// into a fresh memfd at every answer, so it becomes one now, once, and later answers pass that
/// memfd. Its registration goes with the old memory (leases granted keep theirs); the next lease
/// registers the memfd.
void Volume::slab_once(Shard& s, const GetItem& item) {
  if (item.via != "shm" || item.lease || !wire::travels_as_slab(s.data.size())) return;
  if (wire::slab_fd(s.data) >= 0) return;
  try {
    s.data = wire::to_slab(s.data);
    s.registered.reset();
  } catch (const std::exception&) {
    // No memfd here: the link makes its copy per answer, as before.
  }
}

std::shared_ptr<Volume::Registered> Volume::take_scratch(std::size_t size) {
  auto it = std::find_if(scratch_.begin(), scratch_.end(),
                         [&](const auto& r) { return r->bytes.size() == size; });
  if (it != scratch_.end()) {
    auto r = std::move(*it);
    scratch_.erase(it);
    return r;
  }
  std::shared_ptr<std::byte[]> memory = memory_to_lease(size);  // every byte is assembled
  auto r = std::make_shared<Registered>(Bytes::view(memory, memory.get(), size));
  r->scratch = true;
  return r;
}

void Volume::give_back(std::shared_ptr<Registered> scratch) {
  if (scratch->bytes.size() > kScratchBytes) return;
  scratch_.push_back(std::move(scratch));
  std::size_t total = 0;
  for (const auto& r : scratch_) total += r->bytes.size();
  while (scratch_.size() > kScratchKept || total > kScratchBytes) {
    total -= scratch_.front()->bytes.size();
    scratch_.pop_front();
  }
}

GetAnswer Volume::get(const std::vector<GetItem>& items) {
  prune();
  GetAnswer a;
  a.got.resize(items.size());
  for (std::size_t i = 0; i < items.size(); ++i) {
    if (direct_.contains(items[i].key)) {
      // Read from the writer's memory under a lease; a batch asks again key by key for it.
      a.got.clear();
      if (items.size() == 1) {
        a.answer = lease(items[i].key, items[i], a);
        return a;
      }
      a.answer = Answer{Code::leased, "a direct key in a batch"};
      return a;
    }
    Source source;
    a.answer = read(items[i], a.got[i], &source);
    if (a.answer.code == Code::too_big && items.size() == 1) return a;  // with what to read
    if (a.answer.code != Code::ok) {
      a.got.clear();
      return a;
    }
    // A whole slab for a reader on this host's shared memory goes in the answer as its memfd
    // (nothing copied on the way), and the reader maps it and copies from it in parallel: about
    // 1.0x a memcpy here, where a one-sided read of the same mapping reaches 0.6-0.8x.
    const bool slab_to_map = items[i].via == "shm" && wire::slab_fd(a.got[i].data) >= 0;
    if (items.size() == 1 && items[i].lease && a.got[i].data.size() >= kLeaseBytes &&
        !slab_to_map && lease_stored(a.got[i], source, a)) {
      return a;
    }
  }
  for (std::size_t i = 0; i < a.got.size(); ++i) {
    ++stats_.gets;
    stats_.bytes_out += a.got[i].data.size();
    stats_.bytes_by_path[items[i].via] += a.got[i].data.size();
    ++stats_.transfers_by_path[items[i].via];
  }
  return a;
}

Volume::Registered::Registered(Bytes b)
    : bytes(std::move(b)),
      buffer(RdmaBuffer::register_memory(const_cast<std::byte*>(bytes.data()), bytes.size())) {}

Volume::Registered::~Registered() {
  try {
    (void)buffer.drop();  // in this process: at once
  } catch (const std::exception&) {
    // The runtime is gone, and its registry with it.
  }
}

bool Volume::lease_stored(Got& got, Source& source, GetAnswer& out) {
  std::shared_ptr<Registered> held = source.scratch;  // assembled for this get, if it was
  Shard* shard = source.shard;
  const std::size_t offset = shard != nullptr ? source.offset : 0;
  try {
    if (held != nullptr) {
      // Registered when it was made.
    } else if (shard == nullptr) {
      held = std::make_shared<Registered>(got.data);  // assembled for this get alone
    } else {
      if (shard->registered == nullptr) {
        // A received slab is mapped lazily: its pages are asked for once, here, rather than
        // one fault at a time as the reader's first copy reaches them.
        wire::populate_for_read(shard->data);
        shard->registered = std::make_shared<Registered>(shard->data);
      }
      held = shard->registered;
    }
  } catch (const std::exception&) {
    return false;  // not registrable here: the bytes go in the answer
  }
  const auto now = std::chrono::steady_clock::now();
  const std::uint64_t id = next_lease_++;
  stored_leases_[id] = {held, now + kStoredLease};  // counted in stats when released, read
  out.lease = ReadLease{held->buffer,         got.info, got.version, id,
                        kStoredLease.count(), offset,   got.box,     false};
  out.got.clear();
  out.answer = {Code::leased, ""};
  return true;
}

bool Volume::release(const std::string& key, std::uint64_t lease, std::uint64_t size,
                     const std::string& path) {
  prune();
  bool held = false;
  if (auto l = stored_leases_.find(lease); l != stored_leases_.end()) {
    held = true;  // (prune() dropped it if it ran out)
    std::shared_ptr<Registered> bytes = std::move(l->second.held);
    stored_leases_.erase(l);
    // Scratch memory goes back to the pool once read, and only then: a lease that ran out may
    // still be read by a slow reader, so its memory is dropped (by prune()), never used again.
    if (bytes->scratch && bytes.use_count() == 1) give_back(std::move(bytes));
  } else {
    held = direct_release(key, lease);
  }
  // A leased get counts once its reader has the bytes: not when the lease is granted (the read
  // may fail), nor when it outlasted its lease (the reader reads again).
  if (held && size > 0) {
    ++stats_.gets;
    stats_.bytes_out += size;
    stats_.bytes_by_path[path] += size;
    ++stats_.transfers_by_path[path];
  }
  return held;
}

bool Volume::exists(const std::string& key) {
  return latest(key).has_value();
}

std::vector<std::string> Volume::keys(const std::string& prefix) {
  std::vector<std::string> out;
  for (auto it = keys_.lower_bound(prefix); it != keys_.end(); ++it) {
    if (it->first.compare(0, prefix.size(), prefix) != 0) break;
    if (!it->second.complete.empty()) out.push_back(it->first);
  }
  for (auto it = direct_.lower_bound(prefix); it != direct_.end(); ++it) {
    if (it->first.compare(0, prefix.size(), prefix) != 0) break;
    if (it->second.latest) out.push_back(it->first);
  }
  std::sort(out.begin(), out.end());
  return out;
}

void Volume::erase(const std::string& key) {
  keys_.erase(key);
  direct_.erase(key);  // its writer's next acquire or publish says so
}

std::optional<std::uint64_t> Volume::latest(const std::string& key) {
  if (auto d = direct_.find(key); d != direct_.end()) {
    if (!d->second.latest) return std::nullopt;
    return d->second.version;
  }
  auto it = keys_.find(key);
  if (it == keys_.end() || it->second.complete.empty()) return std::nullopt;
  return it->second.complete.back().number;
}

std::vector<std::string> Volume::nearest(const std::string& key) {
  std::vector<std::string> out;
  auto at = keys_.lower_bound(key);
  auto back = at;
  for (int i = 0; i < 3 && back != keys_.begin(); ++i) out.push_back((--back)->first);
  for (int i = 0; i < 3 && at != keys_.end(); ++i, ++at) out.push_back(at->first);
  return out;
}

VolumeStats Volume::stats() {
  VolumeStats s = stats_;
  s.proc = context().id.proc.to_string();
  s.keys = 0;
  s.versions = 0;
  s.bytes_held = 0;
  for (const auto& [key, d] : direct_) {
    if (!d.latest) continue;
    ++s.keys;
    ++s.versions;  // held in its writer's memory, not here
  }
  for (const auto& [key, k] : keys_) {
    if (!k.complete.empty()) ++s.keys;
    for (const auto* list : {&k.complete, &k.open}) {
      for (const Version& v : *list) {
        ++s.versions;
        for (const Shard& sh : v.shards) s.bytes_held += sh.data.size();
      }
    }
  }
  return s;
}

std::string Volume::host() {
  char name[256] = {};
  ::gethostname(name, sizeof name - 1);
  std::string where = name;
  const std::string address = baton::detail::address_text(context().id.proc);
  if (address.rfind("tcp://", 0) == 0) {
    where += " " + address.substr(6, address.rfind(':') - 6);  // the IP, without the port
  }
  return where;
}

}  // namespace baton::store::detail
