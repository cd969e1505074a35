// libFuzzer target for the wire decoders. Any bytes either decode or fail with DecodeError
// (anything else escapes and crashes the fuzzer); whatever decodes must be stable:
//   - a frame that decodes is exactly the encoding of the envelope it decodes to, decodes again
//     to the same envelope, and decodes to it through the streaming decoder too;
//   - the encoder and the decoder agree on the limits: a frame decodes under limits of exactly
//     its size and encodes under them, and with any one limit lowered neither accepts it;
//   - a body that decodes as T re-encodes to a body that decodes to the same T;
//   - the numeric fast path and the archive accept the same bodies, with the same values;
//   - every decoded bool is 0 or 1;
//   - an id or address that parses (or decodes) prints to a text that parses back to it.
//
// The first input byte picks how the rest is used, so that a short run with no corpus gets past
// the frame's length prefix, magic and ids and reaches the fields behind them:
//   0  the bytes are a whole frame
//   1  the bytes are patched into a valid frame: one byte picks the frame and whether to
//      overwrite or insert, two more the offset (an insertion into the header fixes its prefix)
//   2  the bytes follow a supplied length prefix, magic and version; two of them choose where
//      the header ends and the parts begin
//   3  the bytes are a message body, with two out-of-band parts beside it
//   4  the bytes are the text of an id or an address
//
//   clang++ -std=c++20 -g -O1 -fsanitize=fuzzer,address,undefined -Iinclude \
//     src/wire/envelope.fuzz.cpp src/wire/{bytes,ids,address,envelope,archive}.cpp -o envfuzz
//   ./envfuzz -runs=200000 -max_len=4096 -seed=1

#include <array>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <tuple>
#include <unordered_map>
#include <variant>
#include <vector>

#include "baton/wire/address.hpp"
#include "baton/wire/envelope.hpp"

namespace {

struct Config {
  int steps = 0;
  std::string name;
  std::optional<std::vector<double>> weights;
  template <class Ar>
  void serialize(Ar& ar) {
    ar(steps, name, weights);
  }
};

// The same fields as std::tuple<int, double>, but decoded through the archive.
struct Pair {
  int a = 0;
  double b = 0;
  template <class Ar>
  void serialize(Ar& ar) {
    ar(a, b);
  }
};

[[noreturn]] void fail(const char* what) {
  std::fprintf(stderr, "envelope fuzz: %s\n", what);
  std::abort();
}

void append_u32(std::string& s, std::uint32_t v) {
  s.append(reinterpret_cast<const char*>(&v), sizeof(v));
}

// Bodies of equal content: the same inline bytes and parts of the same bytes.
bool same_body(const baton::Body& a, const baton::Body& b) {
  if (a.head != b.head || a.parts.size() != b.parts.size()) return false;
  for (std::size_t i = 0; i < a.parts.size(); ++i) {
    if (!(a.parts[i] == b.parts[i])) return false;
  }
  return true;
}

bool same_envelope(const baton::Envelope& a, const baton::Envelope& b) {
  return a.seq == b.seq && a.sender == b.sender && a.dest == b.dest && a.headers == b.headers &&
         same_body(a.body, b.body);
}

// Decodes `body` as T; if that works, T's encoding must decode to an equal value.
template <class T>
void decode_stably(const baton::Body& body) {
  T value;
  try {
    value = baton::decode<T>(body);
  } catch (const baton::DecodeError&) {
    return;
  }
  if (!(baton::decode<T>(baton::encode(value)) == value)) fail("body round trip");
}

// Configs hold doubles (NaN != NaN), so they are compared by their encodings.
void decode_configs(const baton::Body& body) {
  std::map<std::string, Config> configs;
  try {
    configs = baton::decode<std::map<std::string, Config>>(body);
  } catch (const baton::DecodeError&) {
    return;
  }
  const baton::Body again = baton::encode(configs);
  if (baton::encode(baton::decode<std::map<std::string, Config>>(again)).head != again.head) {
    fail("config round trip");
  }
}

// The fast path for plain numbers and the archive must agree on which bodies hold an int and a
// double, and on their values.
void compare_number_paths(const baton::Body& body) {
  std::optional<std::tuple<int, double>> fast;
  std::optional<Pair> archived;
  try {
    fast = baton::decode<std::tuple<int, double>>(body);
  } catch (const baton::DecodeError&) {
  }
  try {
    archived = baton::decode<Pair>(body);
  } catch (const baton::DecodeError&) {
  }
  if (fast.has_value() != archived.has_value()) fail("fast path and archive disagree");
  if (!fast) return;
  const auto [a, b] = *fast;
  if (a != archived->a || std::memcmp(&b, &archived->b, sizeof(b)) != 0) {
    fail("fast path and archive decode different values");
  }
  if (baton::encode(a, b).head != body.head || baton::encode(*archived).head != body.head) {
    fail("numbers re-encode differently");
  }
}

void decode_ids(const baton::Body& body) {
  try {
    const auto port = baton::decode<baton::PortId>(body);
    if (!(baton::PortId::parse(port.to_string()) == port)) fail("decoded port id reprints");
  } catch (const baton::DecodeError&) {
  }
  try {
    const auto address = baton::decode<baton::Address>(body);
    if (!(baton::Address::parse(address.to_string()) == address)) fail("decoded address");
  } catch (const baton::DecodeError&) {
  }
}

// Every bool that decodes holds 0 or 1 (looked at as bytes: reading a bool of 2 would be UB).
void decode_bools(const baton::Body& body) {
  std::array<bool, 3> bools{};
  try {
    bools = baton::decode<std::array<bool, 3>>(body);
  } catch (const baton::DecodeError&) {
    return;
  }
  unsigned char bytes[sizeof(bools)];
  std::memcpy(bytes, bools.data(), sizeof(bools));
  for (unsigned char b : bytes) {
    if (b > 1) fail("a decoded bool is neither 0 nor 1");
  }
}

// Decodes `body` as one of several types, picked by `pick` (one per input keeps runs fast).
void decode_body(const baton::Body& body, std::uint64_t pick) {
  switch (pick % 11) {
    case 0:
      return decode_stably<std::vector<std::string>>(body);
    case 1:
      return decode_stably<std::map<int, std::optional<std::string>>>(body);
    case 2:
      return decode_stably<std::unordered_map<std::string, std::vector<std::int64_t>>>(body);
    case 3:
      return decode_stably<std::tuple<std::string, baton::Bytes, std::vector<baton::Bytes>>>(body);
    case 4:
      return decode_stably<std::variant<std::int32_t, std::string, std::vector<bool>>>(body);
    case 5:
      return decode_stably<std::vector<std::tuple<std::uint8_t, std::optional<std::uint16_t>>>>(
          body);
    case 6:
      return decode_stably<std::tuple<std::array<std::int16_t, 2>, std::array<bool, 2>>>(body);
    case 7:
      return decode_bools(body);
    case 8:
      return decode_configs(body);
    case 9:
      return compare_number_paths(body);
    default:
      return decode_ids(body);
  }
}

// Decoding `bytes` under `limits` succeeds exactly when encoding `env` under them does.
void check_limits_agree(const baton::Envelope& env, const std::string& bytes,
                        const baton::DecodeLimits& limits) {
  bool decoded = true;
  bool encoded = true;
  try {
    (void)baton::decode_frame(baton::Bytes::copy(bytes), limits);
  } catch (const baton::DecodeError&) {
    decoded = false;
  }
  try {
    (void)baton::encode_frame(env, limits);
  } catch (const std::length_error&) {
    encoded = false;
  }
  if (decoded != encoded) fail("the encoder and the decoder disagree on the limits");
}

void check_limits(const baton::Envelope& env, const std::string& bytes) {
  baton::DecodeLimits exact;
  exact.max_frame_bytes = bytes.size();
  exact.max_header_bytes = bytes.size() - 4;
  for (const auto& p : env.body.parts) exact.max_header_bytes -= p.size();
  exact.max_parts = env.body.parts.size();
  exact.max_headers = env.headers.size();
  try {
    (void)baton::decode_frame(baton::Bytes::copy(bytes), exact);
    (void)baton::encode_frame(env, exact);
  } catch (const std::exception&) {
    fail("a frame exactly at the limits is refused");
  }
  check_limits_agree(env, bytes, exact);
  baton::DecodeLimits lower = exact;
  --lower.max_frame_bytes;
  check_limits_agree(env, bytes, lower);
  lower = exact;
  --lower.max_header_bytes;
  check_limits_agree(env, bytes, lower);
  if (exact.max_parts > 0) {
    lower = exact;
    --lower.max_parts;
    check_limits_agree(env, bytes, lower);
  }
  if (exact.max_headers > 0) {
    lower = exact;
    --lower.max_headers;
    check_limits_agree(env, bytes, lower);
  }
}

void check_frame(const std::string& bytes) {
  baton::Envelope env;
  try {
    env = baton::decode_frame(baton::Bytes::copy(bytes));
  } catch (const baton::DecodeError&) {
    return;
  }
  const std::string again = baton::encode_frame(env).flatten();
  if (again != bytes) fail("a decoded frame re-encodes to different bytes");
  if (!same_envelope(baton::decode_frame(baton::Bytes::copy(again)), env)) {
    fail("a re-encoded frame decodes differently");
  }
  // The streaming decoder (prefix, header, then the parts by their lengths) agrees.
  std::byte prefix[4];
  std::memcpy(prefix, bytes.data(), 4);
  const std::size_t header_len = baton::decode_header_length(prefix);
  baton::Envelope streamed;
  const std::vector<std::uint64_t> lengths =
      baton::decode_header(bytes.substr(4, header_len), streamed);
  std::size_t pos = 4 + header_len;
  for (const std::uint64_t len : lengths) {
    streamed.body.parts.push_back(
        baton::Bytes::copy(bytes.substr(pos, static_cast<std::size_t>(len))));
    pos += static_cast<std::size_t>(len);
  }
  if (pos != bytes.size() || !same_envelope(streamed, env)) fail("the streaming decoder differs");
  check_limits(env, bytes);
  decode_body(env.body, env.seq);
}

// Valid frames for mode 1: one without parts, one with three parts (the last not referenced by
// the body).
const std::vector<std::string>& templates() {
  static const std::vector<std::string> frames = [] {
    baton::Envelope env;
    env.sender = baton::ActorId::parse("ctl/client[0]");
    env.dest = baton::PortId::parse("p/w[1]#2");
    env.seq = 3;
    env.headers = {{"k", "v"}, {"trace", "t"}};
    env.body = baton::encode(std::string("s"), 7, baton::Bytes::copy("b"), true);
    std::vector<std::string> out{baton::encode_frame(env).flatten()};
    env.headers.clear();
    env.body = baton::encode(
        std::vector<baton::Bytes>{baton::Bytes::copy(std::string(baton::kOutOfBandThreshold, 'x')),
                                  baton::Bytes::copy("y")},
        std::optional<int>(5));
    env.body.parts.push_back(baton::Bytes::copy("zz"));
    out.push_back(baton::encode_frame(env).flatten());
    return out;
  }();
  return frames;
}

std::string patched_template(std::string_view rest) {
  if (rest.size() < 3) return templates()[0];
  const auto pick = static_cast<std::uint8_t>(rest[0]);
  std::string frame = templates()[pick % templates().size()];
  const std::size_t offset = (static_cast<std::size_t>(static_cast<std::uint8_t>(rest[1])) |
                              static_cast<std::size_t>(static_cast<std::uint8_t>(rest[2])) << 8) %
                             (frame.size() + 1);
  const std::string_view patch = rest.substr(3);
  if (pick & 2) {
    frame.insert(offset, patch);
    std::uint32_t header_len = 0;
    std::memcpy(&header_len, frame.data(), 4);
    if (offset >= 4 && offset <= 4 + header_len) {
      header_len += static_cast<std::uint32_t>(patch.size());
      std::memcpy(frame.data(), &header_len, 4);
    }
  } else {
    frame.replace(offset, patch.size(), patch);
  }
  return frame;
}

template <class Id>
void parse_stably(std::string_view text) {
  try {
    const Id id = Id::parse(text);
    if (!(Id::parse(id.to_string()) == id)) fail("a parsed id or address reprints differently");
    if (!(baton::decode<Id>(baton::encode(id)) == id)) fail("a parsed id or address encodes");
  } catch (const baton::ParseError&) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::string_view rest(reinterpret_cast<const char*>(data + 1), size - 1);
  switch (data[0] % 5) {
    case 0:
      check_frame(std::string(rest));
      break;
    case 1:
      check_frame(patched_template(rest));
      break;
    case 2: {
      if (rest.size() < 2) break;
      const std::string_view fields = rest.substr(2);
      const std::size_t cut = (static_cast<std::size_t>(static_cast<std::uint8_t>(rest[0])) |
                               static_cast<std::size_t>(static_cast<std::uint8_t>(rest[1])) << 8) %
                              (fields.size() + 1);
      std::string frame;
      append_u32(frame, static_cast<std::uint32_t>(5 + cut));
      append_u32(frame, baton::Envelope::kMagic);
      frame += static_cast<char>(baton::Envelope::kVersion);
      frame += fields;
      check_frame(frame);
      break;
    }
    case 3: {
      baton::Body body;
      body.head = std::string(rest);
      body.parts = {baton::Bytes::copy(std::string(baton::kOutOfBandThreshold, 'p')),
                    baton::Bytes::copy("q")};
      decode_body(body, body.head.empty() ? 0 : static_cast<std::uint8_t>(body.head[0]));
      break;
    }
    default:
      if (rest.empty()) break;
      switch (static_cast<std::uint8_t>(rest[0]) % 4) {
        case 0:
          parse_stably<baton::ProcId>(rest.substr(1));
          break;
        case 1:
          parse_stably<baton::ActorId>(rest.substr(1));
          break;
        case 2:
          parse_stably<baton::PortId>(rest.substr(1));
          break;
        default:
          parse_stably<baton::Address>(rest.substr(1));
      }
  }
  return 0;
}
