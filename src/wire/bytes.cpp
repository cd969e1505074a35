#include "baton/wire/bytes.hpp"

#include <cstring>
#include <stdexcept>
#include <system_error>

#include "wire/slab.hpp"

namespace baton {

Bytes Bytes::copy(const void* data, std::size_t size) {
  if (size == 0) return {};
  if (wire::travels_as_slab(size)) {
    try {
      return wire::copy_to_slab(data, size);
    } catch (const std::system_error&) {
      // No memfd here (or no memory for one): ordinary memory, copied when sent.
    }
  }
  std::shared_ptr<std::byte[]> buf(new std::byte[size]);
  std::memcpy(buf.get(), data, size);
  const std::byte* p = buf.get();
  return view(std::shared_ptr<const void>(std::move(buf), p), p, size);
}

Bytes Bytes::make(std::size_t size, const std::function<void(std::span<std::byte>)>& fill) {
  if (size == 0) return {};
  if (wire::travels_as_slab(size)) {
    bool filling = false;
    try {
      return wire::make_slab(size, [&](std::span<std::byte> to) {
        filling = true;
        fill(to);
      });
    } catch (const std::system_error&) {
      if (filling) throw;  // fill's own failure: not tried again
      // As in copy(): ordinary memory.
    }
  }
  std::shared_ptr<std::byte[]> buf(new std::byte[size]());
  fill({buf.get(), size});
  const std::byte* p = buf.get();
  return view(std::shared_ptr<const void>(std::move(buf), p), p, size);
}

Bytes Bytes::adopt(std::vector<std::byte> v) {
  auto owner = std::make_shared<const std::vector<std::byte>>(std::move(v));
  return view(owner, owner->data(), owner->size());
}

Bytes Bytes::adopt(std::string s) {
  auto owner = std::make_shared<const std::string>(std::move(s));
  return view(owner, reinterpret_cast<const std::byte*>(owner->data()), owner->size());
}

Bytes Bytes::slice(std::size_t offset, std::size_t len) const {
  if (offset > size_ || len > size_ - offset) {
    throw std::out_of_range("Bytes::slice(" + std::to_string(offset) + ", " + std::to_string(len) +
                            ") of a buffer of " + std::to_string(size_));
  }
  return view(owner_, data_ + offset, len);
}

bool operator==(const Bytes& a, const Bytes& b) {
  return a.size_ == b.size_ && (a.size_ == 0 || std::memcmp(a.data_, b.data_, a.size_) == 0);
}

}  // namespace baton
