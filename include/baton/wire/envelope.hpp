#pragma once

// The unit every transport carries. A frame on a byte stream is
//   u32 header length | header | part 0 | part 1 | ...
// where the header holds the routing fields, the inline argument bytes and the part lengths,
// so large parts are written with scatter-gather and never copied into the header.

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "baton/wire/archive.hpp"
#include "baton/wire/ids.hpp"

namespace baton {

struct Envelope {
  static constexpr std::uint32_t kMagic = 0x4e544142;  // "BATN"
  static constexpr std::uint8_t kVersion = 1;

  ActorId sender;
  PortId dest;
  std::uint64_t seq = 0;
  std::vector<std::pair<std::string, std::string>> headers;
  Body body;

  /// The value of header `key`, or nullptr.
  const std::string* header(std::string_view key) const;
};

/// An encoded envelope: the header bytes and the parts, still separate for scatter-gather.
struct Frame {
  std::string header;  // includes the u32 length prefix
  std::vector<Bytes> parts;

  std::size_t size() const {
    std::size_t n = header.size();
    for (const auto& p : parts) n += p.size();
    return n;
  }
  /// All bytes in one contiguous buffer (for tests and datagram-like transports).
  std::string flatten() const;
};

/// Encodes an envelope; throws std::length_error if it exceeds the frame limits.
Frame encode_frame(const Envelope& env, const DecodeLimits& limits = {});
/// Sets the sequence number of a frame encode_frame() made: a link encodes a frame before it
/// takes its lock, and numbers it as it queues it.
void set_frame_seq(Frame& frame, std::uint64_t seq);

/// Length of the header (after the 4-byte prefix) announced by a frame prefix; throws
/// DecodeError if it exceeds the limits.
std::size_t decode_header_length(const std::byte (&prefix)[4], const DecodeLimits& limits = {});

/// Decodes a header (without the prefix) into an envelope whose parts are still empty, and
/// returns the lengths of the parts that follow it on the stream.
std::vector<std::uint64_t> decode_header(std::string_view header, Envelope& out,
                                         const DecodeLimits& limits = {});

/// Decodes one whole contiguous frame; parts are views of `frame`, not copies.
Envelope decode_frame(const Bytes& frame, const DecodeLimits& limits = {});

}  // namespace baton
