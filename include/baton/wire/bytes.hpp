#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace baton {

/// An immutable, reference-counted byte buffer: copies share storage, slices never copy.
class Bytes {
 public:
  Bytes() = default;
  /// Copies `size` bytes from `data`. A buffer of 8 MiB or more lives in memory that other
  /// procs of this host map: sent to one of them, it is passed, not copied.
  static Bytes copy(const void* data, std::size_t size);
  static Bytes copy(std::string_view s) { return copy(s.data(), s.size()); }
  /// A new buffer of `size` bytes that `fill` writes in place (no copy afterwards); like copy(),
  /// one of 8 MiB or more is passed, not copied, to procs of this host. What `fill` does not
  /// write is zero.
  static Bytes make(std::size_t size, const std::function<void(std::span<std::byte>)>& fill);
  /// Takes ownership of a vector without copying it (sending it to a proc of this host copies
  /// it once if it is 8 MiB or more: make() or copy() avoid that).
  static Bytes adopt(std::vector<std::byte> v);
  /// Takes ownership of a string without copying it.
  static Bytes adopt(std::string s);
  /// Wraps memory kept alive by `owner`.
  static Bytes view(std::shared_ptr<const void> owner, const std::byte* data, std::size_t size) {
    Bytes b;
    b.owner_ = std::move(owner);
    b.data_ = data;
    b.size_ = size;
    return b;
  }

  const std::byte* data() const { return data_; }
  std::size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  std::span<const std::byte> span() const { return {data_, size_}; }
  std::string_view str() const { return {reinterpret_cast<const char*>(data_), size_}; }
  /// A view of [offset, offset + len) sharing this buffer's storage; throws if out of range.
  Bytes slice(std::size_t offset, std::size_t len) const;

  /// What keeps the bytes alive (a transport looks in it for memory it can pass on as it is).
  const std::shared_ptr<const void>& owner() const { return owner_; }

  friend bool operator==(const Bytes& a, const Bytes& b);

 private:
  std::shared_ptr<const void> owner_;
  const std::byte* data_ = nullptr;
  std::size_t size_ = 0;
};

}  // namespace baton
