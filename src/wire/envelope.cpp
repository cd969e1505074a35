#include "baton/wire/envelope.hpp"

#include <cstring>
#include <stdexcept>

namespace baton {

const std::string* Envelope::header(std::string_view key) const {
  for (const auto& [k, v] : headers) {
    if (k == key) return &v;
  }
  return nullptr;
}

std::string Frame::flatten() const {
  std::string out;
  out.reserve(size());
  out += header;
  for (const auto& p : parts) out.append(p.str());
  return out;
}

Frame encode_frame(const Envelope& env, const DecodeLimits& limits) {
  if (env.body.parts.size() > limits.max_parts) {
    throw MessageTooLargeError("message has " + std::to_string(env.body.parts.size()) +
                               " out-of-band parts; the limit is " +
                               std::to_string(limits.max_parts));
  }
  if (env.headers.size() > limits.max_headers) {
    throw MessageTooLargeError("message has " + std::to_string(env.headers.size()) +
                               " headers; the limit is " + std::to_string(limits.max_headers));
  }
  Frame frame;
  Body hdr;
  // What the header takes, near enough that it is written with no reallocation: the fixed
  // fields, the two ids' names, the headers, the head and the parts' lengths.
  auto id_bytes = [](const ActorId& a) { return a.proc.name.size() + a.name.size() + 24; };
  std::size_t reserve = 64 + id_bytes(env.sender) + id_bytes(env.dest.actor) +
                        env.body.head.size() + 8 * env.body.parts.size();
  for (const auto& [k, v] : env.headers) reserve += k.size() + v.size() + 16;
  hdr.head.reserve(reserve);
  hdr.head.append(4, '\0');  // length prefix, patched below
  {
    OutputArchive ar(hdr);
    const std::uint32_t magic = Envelope::kMagic;
    ar(magic, Envelope::kVersion, env.seq, env.sender, env.dest, env.headers, env.body.head);
    const auto nparts = static_cast<std::uint32_t>(env.body.parts.size());
    ar(nparts);
    for (const auto& p : env.body.parts) ar(static_cast<std::uint64_t>(p.size()));
  }
  const std::size_t header_len = hdr.head.size() - 4;
  if (header_len > limits.max_header_bytes) {
    throw MessageTooLargeError("message header of " + std::to_string(header_len) +
                               " bytes exceeds the limit of " +
                               std::to_string(limits.max_header_bytes) +
                               "; pass large data as baton::Bytes so it travels out of band");
  }
  const auto len32 = static_cast<std::uint32_t>(header_len);
  std::memcpy(hdr.head.data(), &len32, 4);
  frame.header = std::move(hdr.head);
  frame.parts = env.body.parts;
  if (frame.size() > limits.max_frame_bytes) {
    throw MessageTooLargeError("message of " + std::to_string(frame.size()) +
                               " bytes exceeds the frame limit of " +
                               std::to_string(limits.max_frame_bytes) +
                               "; move bulk data with RdmaBuffer or raise DecodeLimits");
  }
  return frame;
}

void set_frame_seq(Frame& frame, std::uint64_t seq) {
  // After the length prefix, the magic and the version, as encode_frame() writes them.
  constexpr std::size_t kSeqAt = 4 + sizeof Envelope::kMagic + sizeof Envelope::kVersion;
  if (frame.header.size() < kSeqAt + sizeof seq) throw std::logic_error("not an encoded frame");
  std::memcpy(frame.header.data() + kSeqAt, &seq, sizeof seq);
}

std::size_t decode_header_length(const std::byte (&prefix)[4], const DecodeLimits& limits) {
  std::uint32_t len = 0;
  std::memcpy(&len, prefix, 4);
  if (len > limits.max_header_bytes) {
    throw DecodeError("frame header of " + std::to_string(len) + " bytes exceeds the limit of " +
                      std::to_string(limits.max_header_bytes));
  }
  return len;
}

std::vector<std::uint64_t> decode_header(std::string_view header, Envelope& out,
                                         const DecodeLimits& limits) {
  std::vector<std::uint64_t> lengths;
  try {
    InputArchive ar(header, limits);
    std::uint32_t magic = 0;
    std::uint8_t version = 0;
    ar(magic, version);
    if (magic != Envelope::kMagic) throw DecodeError("bad frame magic (not a baton peer?)");
    if (version != Envelope::kVersion) {
      throw DecodeError("frame version " + std::to_string(version) + ", expected " +
                        std::to_string(Envelope::kVersion) +
                        " (all procs of a job must run the same baton build)");
    }
    ar(out.seq, out.sender, out.dest);
    std::uint64_t nheaders = 0;
    ar(cereal::make_size_tag(nheaders));
    if (nheaders > limits.max_headers) {
      throw DecodeError(std::to_string(nheaders) + " headers exceed the limit of " +
                        std::to_string(limits.max_headers));
    }
    out.headers.resize(static_cast<std::size_t>(nheaders));
    for (auto& kv : out.headers) ar(kv);
    ar(out.body.head);
    std::uint32_t nparts = 0;
    ar(nparts);
    if (nparts > limits.max_parts) {
      throw DecodeError(std::to_string(nparts) + " parts exceed the limit of " +
                        std::to_string(limits.max_parts));
    }
    ar.check_count(nparts);
    lengths.resize(nparts);
    std::uint64_t total = header.size() + 4;
    if (total > limits.max_frame_bytes) {  // as encode_frame refuses it, even with no parts
      throw DecodeError("frame of " + std::to_string(total) + " bytes exceeds the limit of " +
                        std::to_string(limits.max_frame_bytes) + " bytes");
    }
    for (auto& len : lengths) {
      ar(len);
      if (len > limits.max_frame_bytes || total + len > limits.max_frame_bytes) {
        throw DecodeError("frame parts exceed the limit of " +
                          std::to_string(limits.max_frame_bytes) + " bytes");
      }
      total += len;
    }
    if (ar.remaining() != 0) {
      throw DecodeError(std::to_string(ar.remaining()) + " trailing bytes in the frame header");
    }
  } catch (const DecodeError&) {
    throw;
  } catch (const std::exception& e) {
    throw DecodeError(std::string("malformed frame header: ") + e.what());
  }
  return lengths;
}

Envelope decode_frame(const Bytes& frame, const DecodeLimits& limits) {
  if (frame.size() < 4) throw DecodeError("frame shorter than its length prefix");
  std::byte prefix[4];
  std::memcpy(prefix, frame.data(), 4);
  const std::size_t header_len = decode_header_length(prefix, limits);
  if (header_len > frame.size() - 4) {
    throw DecodeError("frame header of " + std::to_string(header_len) + " bytes, only " +
                      std::to_string(frame.size() - 4) + " present");
  }
  Envelope env;
  const auto lengths = decode_header(frame.str().substr(4, header_len), env, limits);
  std::size_t pos = 4 + header_len;
  env.body.parts.reserve(lengths.size());
  for (auto len : lengths) {
    if (len > frame.size() - pos) throw DecodeError("frame truncated inside a part");
    env.body.parts.push_back(frame.slice(pos, static_cast<std::size_t>(len)));
    pos += static_cast<std::size_t>(len);
  }
  if (pos != frame.size()) {
    throw DecodeError(std::to_string(frame.size() - pos) + " trailing bytes after the frame");
  }
  return env;
}

}  // namespace baton
