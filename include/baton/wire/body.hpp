#pragma once

// A message body, apart from how values are written into it (archive.hpp), so that headers
// which only pass bodies along need no serialization library.

#include <cstddef>
#include <string>
#include <vector>

#include "baton/wire/bytes.hpp"

namespace baton {

/// A message body: inline bytes (the arguments) plus out-of-band parts (large buffers).
struct Body {
  std::string head;
  std::vector<Bytes> parts;

  std::size_t total_size() const {
    std::size_t n = head.size();
    for (const auto& p : parts) n += p.size();
    return n;
  }
};

}  // namespace baton
