#pragma once

// Serialization of endpoint arguments and results. cereal supplies the type support (standard
// containers, optionals, tuples, variants, user types with one `serialize` member); the two
// archives here supply a fast buffer writer and a reader that bounds every size and count.
//
// A user type declares its fields once:
//   struct Config { int steps; std::string name;
//                   template <class Ar> void serialize(Ar& ar) { ar(steps, name); } };
//
// The format is the host's byte order: every proc of a job runs the same binary.

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include <cereal/cereal.hpp>
#include <cereal/types/array.hpp>
#include <cereal/types/chrono.hpp>
#include <cereal/types/map.hpp>
#include <cereal/types/optional.hpp>
#include <cereal/types/set.hpp>
#include <cereal/types/string.hpp>
#include <cereal/types/tuple.hpp>
#include <cereal/types/unordered_map.hpp>
#include <cereal/types/utility.hpp>
#include <cereal/types/variant.hpp>
#include <cereal/types/vector.hpp>

#include "baton/wire/body.hpp"
#include "baton/wire/bytes.hpp"
#include "baton/wire/error.hpp"
#include "baton/wire/limits.hpp"

namespace baton {

class OutputArchive : public cereal::OutputArchive<OutputArchive, cereal::AllowEmptyClassElision> {
 public:
  explicit OutputArchive(Body& body)
      : cereal::OutputArchive<OutputArchive, cereal::AllowEmptyClassElision>(this), body_(body) {}

  void write(const void* data, std::size_t size) {
    if (size == 0) return;  // an empty container's data() may be null
    body_.head.append(static_cast<const char*>(data), size);
  }
  /// Adds an out-of-band part and returns its index.
  std::uint32_t add_part(Bytes part) {
    body_.parts.push_back(std::move(part));
    return static_cast<std::uint32_t>(body_.parts.size() - 1);
  }

 private:
  Body& body_;
};

class InputArchive : public cereal::InputArchive<InputArchive, cereal::AllowEmptyClassElision> {
 public:
  InputArchive(const Body& body, const DecodeLimits& limits = {})
      : cereal::InputArchive<InputArchive, cereal::AllowEmptyClassElision>(this),
        head_(body.head),
        parts_(&body.parts),
        limits_(limits) {}
  /// Reads bytes with no parts (a reference to one is refused), where they are, not copied.
  /// `head` must outlive the archive.
  explicit InputArchive(std::string_view head, const DecodeLimits& limits = {})
      : cereal::InputArchive<InputArchive, cereal::AllowEmptyClassElision>(this),
        head_(head),
        limits_(limits) {}

  void read(void* data, std::size_t size) {
    if (size > remaining()) {
      throw DecodeError("truncated payload: need " + std::to_string(size) + " bytes, " +
                        std::to_string(remaining()) + " left");
    }
    if (size == 0) return;  // an empty container's data() may be null
    std::memcpy(data, head_.data() + pos_, size);
    pos_ += size;
  }
  /// Rejects a container size that the remaining bytes cannot hold or that exceeds the limit.
  void check_count(std::uint64_t n) const {
    if (n > limits_.max_count || n > remaining()) {
      throw DecodeError("container of " + std::to_string(n) + " elements with only " +
                        std::to_string(remaining()) + " bytes left (limit " +
                        std::to_string(limits_.max_count) + ")");
    }
  }
  const Bytes& part(std::uint32_t index) const {
    const std::size_t n = parts_ != nullptr ? parts_->size() : 0;
    if (index >= n) {
      throw DecodeError("reference to part " + std::to_string(index) + " of " + std::to_string(n));
    }
    return (*parts_)[index];
  }
  std::size_t remaining() const { return head_.size() - pos_; }
  /// Bytes of the head consumed so far.
  std::size_t position() const { return pos_; }
  const DecodeLimits& limits() const { return limits_; }

 private:
  std::string_view head_;
  const std::vector<Bytes>* parts_ = nullptr;
  DecodeLimits limits_;  // a copy: callers often pass a temporary
  std::size_t pos_ = 0;
};

// --- the archive protocol cereal expects ----------------------------------------------------

template <class T>
std::enable_if_t<std::is_arithmetic_v<T>> CEREAL_SAVE_FUNCTION_NAME(OutputArchive& ar, const T& t) {
  ar.write(std::addressof(t), sizeof(t));
}
template <class T>
std::enable_if_t<std::is_arithmetic_v<T> && !std::is_same_v<T, bool>> CEREAL_LOAD_FUNCTION_NAME(
    InputArchive& ar, T& t) {
  ar.read(std::addressof(t), sizeof(t));
}
// A bool is loaded through a byte so that hostile values other than 0 and 1 are rejected.
inline void CEREAL_LOAD_FUNCTION_NAME(InputArchive& ar, bool& b) {
  std::uint8_t v = 0;
  ar.read(&v, 1);
  if (v > 1) throw DecodeError("invalid bool value " + std::to_string(v));
  b = v == 1;
}

template <class T>
void CEREAL_SAVE_FUNCTION_NAME(OutputArchive& ar, const cereal::BinaryData<T>& bd) {
  ar.write(bd.data, static_cast<std::size_t>(bd.size));
}
template <class T>
void CEREAL_LOAD_FUNCTION_NAME(InputArchive& ar, cereal::BinaryData<T>& bd) {
  ar.read(bd.data, static_cast<std::size_t>(bd.size));
  // cereal loads std::array<bool, N> as raw bytes: reject bytes other than 0 and 1 before any is
  // read as a bool.
  if constexpr (std::is_same_v<std::remove_cv_t<std::remove_pointer_t<T>>, bool>) {
    const auto* bytes = static_cast<const unsigned char*>(bd.data);
    for (std::size_t i = 0; i < static_cast<std::size_t>(bd.size); ++i) {
      if (bytes[i] > 1) throw DecodeError("invalid bool value " + std::to_string(bytes[i]));
    }
  }
}

template <class Archive, class T>
CEREAL_ARCHIVE_RESTRICT(InputArchive, OutputArchive)
CEREAL_SERIALIZE_FUNCTION_NAME(Archive& ar, cereal::NameValuePair<T>& t) {
  ar(t.value);
}

template <class T>
void CEREAL_SAVE_FUNCTION_NAME(OutputArchive& ar, const cereal::SizeTag<T>& t) {
  const auto n = static_cast<std::uint64_t>(t.size);
  ar.write(&n, sizeof(n));
}
template <class T>
void CEREAL_LOAD_FUNCTION_NAME(InputArchive& ar, cereal::SizeTag<T>& t) {
  std::uint64_t n = 0;
  ar.read(&n, sizeof(n));
  ar.check_count(n);
  t.size = static_cast<std::remove_reference_t<T>>(n);
}

// Bytes below the threshold travel inline; larger ones as a separate part, never copied.
inline void CEREAL_SAVE_FUNCTION_NAME(OutputArchive& ar, const Bytes& b) {
  if (b.size() < kOutOfBandThreshold) {
    const std::uint8_t tag = 0;
    const auto n = static_cast<std::uint64_t>(b.size());
    ar.write(&tag, 1);
    ar.write(&n, sizeof(n));
    ar.write(b.data(), b.size());
  } else {
    const std::uint8_t tag = 1;
    const std::uint32_t index = ar.add_part(b);
    ar.write(&tag, 1);
    ar.write(&index, sizeof(index));
  }
}
inline void CEREAL_LOAD_FUNCTION_NAME(InputArchive& ar, Bytes& b) {
  std::uint8_t tag = 0;
  ar.read(&tag, 1);
  if (tag == 0) {
    std::uint64_t n = 0;
    ar.read(&n, sizeof(n));
    ar.check_count(n);
    std::string s(static_cast<std::size_t>(n), '\0');
    ar.read(s.data(), s.size());
    b = Bytes::adopt(std::move(s));
  } else if (tag == 1) {
    std::uint32_t index = 0;
    ar.read(&index, sizeof(index));
    b = ar.part(index);
  } else {
    throw DecodeError("invalid bytes tag " + std::to_string(tag));
  }
}

// --- entry points ---------------------------------------------------------------------------

namespace detail {
// Numbers are laid out exactly as the archive would write them, without building an archive:
// the common case of small numeric arguments costs a memcpy.
template <class... Ts>
inline constexpr bool all_plain_numbers = ((std::is_arithmetic_v<Ts> &&
                                            !std::is_same_v<Ts, bool>)&&...);
}  // namespace detail

/// Appends the serialized values to `body`.
template <class... Ts>
void encode_into(Body& body, const Ts&... values) {
  if constexpr (sizeof...(Ts) == 0) {
    return;
  } else if constexpr (detail::all_plain_numbers<Ts...>) {
    (body.head.append(reinterpret_cast<const char*>(&values), sizeof(Ts)), ...);
  } else {
    OutputArchive ar(body);
    ar(values...);
  }
}

/// Serializes the values into a fresh body.
template <class... Ts>
Body encode(const Ts&... values) {
  Body body;
  encode_into(body, values...);
  return body;
}

namespace detail {
[[noreturn]] void rethrow_decode_failure(const char* type_name);
[[noreturn]] void throw_size_mismatch(std::size_t expected, std::size_t actual);
template <class T>
struct plain_number_tuple : std::false_type {};
template <class... Ts>
struct plain_number_tuple<std::tuple<Ts...>>
    : std::bool_constant<sizeof...(Ts) != 0 && all_plain_numbers<Ts...>> {};
}  // namespace detail

/// Decodes exactly one value of type T from the whole body; throws DecodeError.
template <class T>
T decode(const Body& body, const DecodeLimits& limits = {}) {
  T value{};
  if constexpr (detail::all_plain_numbers<T> || detail::plain_number_tuple<T>::value) {
    // The fast path of encode_into: fixed-size numbers, no archive.
    constexpr std::size_t size = [] {
      if constexpr (std::is_arithmetic_v<T>) {
        return sizeof(T);
      } else {
        return std::apply([](auto... v) { return (sizeof(v) + ...); }, T{});
      }
    }();
    if (body.head.size() != size) detail::throw_size_mismatch(size, body.head.size());
    if constexpr (std::is_arithmetic_v<T>) {
      std::memcpy(&value, body.head.data(), sizeof(T));
    } else {
      std::size_t pos = 0;
      std::apply(
          [&](auto&... v) {
            ((std::memcpy(&v, body.head.data() + pos, sizeof(v)), pos += sizeof(v)), ...);
          },
          value);
    }
    return value;
  }
  try {
    InputArchive ar(body, limits);
    ar(value);
    if (ar.remaining() != 0) {
      throw DecodeError(std::to_string(ar.remaining()) + " trailing bytes after the value");
    }
  } catch (const DecodeError&) {
    throw;
  } catch (...) {
    detail::rethrow_decode_failure(typeid(T).name());
  }
  return value;
}

}  // namespace baton

CEREAL_REGISTER_ARCHIVE(baton::OutputArchive)
CEREAL_REGISTER_ARCHIVE(baton::InputArchive)
CEREAL_SETUP_ARCHIVE_TRAITS(baton::InputArchive, baton::OutputArchive)
