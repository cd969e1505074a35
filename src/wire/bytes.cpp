#include "baton/wire/bytes.hpp"

#include <cstring>
#include <stdexcept>

namespace baton {

Bytes Bytes::copy(const void* data, std::size_t size) {
  if (size == 0) return {};
  std::shared_ptr<std::byte[]> buf(new std::byte[size]);
  std::memcpy(buf.get(), data, size);
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
