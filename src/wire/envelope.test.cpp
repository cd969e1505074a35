#include "baton/wire/envelope.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <exception>
#include <random>
#include <stdexcept>
#include <string>
#include <typeinfo>
#include <vector>

namespace baton {
namespace {

using ::testing::HasSubstr;

Envelope sample(std::size_t part_size = 5000) {
  Envelope env;
  env.sender = ActorId::parse("ctl/client[0]");
  env.dest = PortId::parse("trainers.3/trainer[0]#0");
  env.seq = 77;
  env.headers = {{"endpoint", "Trainer::train"}, {"trace", "abc"}, {"", ""}};
  env.body = encode(std::string("args"), Bytes::copy(std::string(part_size, 'x')),
                    Bytes::copy(std::string(part_size + 1, 'y')), Bytes::copy("small"),
                    Bytes::copy(std::string(part_size + 2, 'z')));
  return env;
}

void expect_same(const Envelope& a, const Envelope& b) {
  EXPECT_EQ(a.sender, b.sender);
  EXPECT_EQ(a.dest, b.dest);
  EXPECT_EQ(a.seq, b.seq);
  EXPECT_EQ(a.headers, b.headers);
  EXPECT_EQ(a.body.head, b.body.head);
  ASSERT_EQ(a.body.parts.size(), b.body.parts.size());
  for (std::size_t i = 0; i < a.body.parts.size(); ++i) EXPECT_EQ(a.body.parts[i], b.body.parts[i]);
}

std::string decode_error(const std::string& bytes, const DecodeLimits& limits = {}) {
  try {
    decode_frame(Bytes::copy(bytes), limits);
  } catch (const DecodeError& e) {
    return e.what();
  }
  return "no error";
}

template <class T>
void put(std::string& s, std::size_t offset, T v) {
  ASSERT_LE(offset + sizeof(v), s.size());
  std::memcpy(s.data() + offset, &v, sizeof(v));
}

std::uint32_t header_len(const std::string& flat) {
  std::uint32_t len = 0;
  std::memcpy(&len, flat.data(), 4);
  return len;
}

// Offsets into a flattened frame: prefix(4) magic(4) version(1) seq(8) sender dest headers...
constexpr std::size_t kMagicAt = 4;
constexpr std::size_t kVersionAt = 8;
constexpr std::size_t kSeqAt = 9;
std::size_t header_count_at(const Envelope& env) {
  return 17 + encode(env.sender).head.size() + encode(env.dest).head.size();
}
std::size_t part_count_at(const std::string& flat, std::size_t nparts) {
  return 4 + header_len(flat) - 8 * nparts - 4;
}

TEST(Envelope, RoundTripsWithHeadersAndSeveralParts) {
  const Envelope env = sample();
  const Frame frame = encode_frame(env);
  ASSERT_EQ(frame.parts.size(), 3u);
  EXPECT_EQ(frame.parts[0].data(), env.body.parts[0].data());  // encoding copies no part
  EXPECT_EQ(frame.size(), frame.flatten().size());
  const Bytes flat = Bytes::copy(frame.flatten());
  const Envelope back = decode_frame(flat);
  expect_same(env, back);
  EXPECT_EQ(*back.header("endpoint"), "Trainer::train");
  EXPECT_EQ(*back.header("trace"), "abc");
  EXPECT_EQ(*back.header(""), "");
  EXPECT_EQ(back.header("missing"), nullptr);
  const auto [args, x, y, small, z] =
      decode<std::tuple<std::string, Bytes, Bytes, Bytes, Bytes>>(back.body);
  EXPECT_EQ(args, "args");
  EXPECT_EQ(x.str(), std::string(5000, 'x'));
  EXPECT_EQ(y.str(), std::string(5001, 'y'));
  EXPECT_EQ(small.str(), "small");
  EXPECT_EQ(z.str(), std::string(5002, 'z'));
}

TEST(Envelope, AFrameIsNumberedAfterItIsEncoded) {
  Envelope env = sample();
  env.seq = 0;
  Frame frame = encode_frame(env);
  set_frame_seq(frame, 0x0102030405060708ULL);
  env.seq = 0x0102030405060708ULL;
  expect_same(env, decode_frame(Bytes::copy(frame.flatten())));
  Frame bare;
  EXPECT_THROW(set_frame_seq(bare, 1), std::logic_error);
}

TEST(Envelope, PartsAreViewsIntoTheContiguousFrame) {
  const Frame frame = encode_frame(sample());
  const Bytes flat = Bytes::copy(frame.flatten());
  const Envelope back = decode_frame(flat);
  const std::byte* at = flat.data() + frame.header.size();
  for (const Bytes& p : back.body.parts) {
    EXPECT_EQ(p.data(), at);  // in place, in order, no copy
    at += p.size();
  }
  EXPECT_EQ(at, flat.data() + flat.size());
  // The decoded body's Bytes are the same views.
  const auto t = decode<std::tuple<std::string, Bytes, Bytes, Bytes, Bytes>>(back.body);
  EXPECT_EQ(std::get<1>(t).data(), back.body.parts[0].data());
  EXPECT_EQ(std::get<4>(t).data(), back.body.parts[2].data());
}

TEST(Envelope, EmptyEnvelopesRoundTrip) {
  Envelope env;
  env.sender = ActorId::parse("a/b[1]");
  env.dest = PortId::parse("c/d[2]#3");
  const std::string flat = encode_frame(env).flatten();
  expect_same(env, decode_frame(Bytes::copy(flat)));
  env.seq = ~std::uint64_t{0};
  env.body.head = "inline only";
  expect_same(env, decode_frame(Bytes::copy(encode_frame(env).flatten())));
}

TEST(Envelope, TheStreamingDecoderAgreesWithTheContiguousOne) {
  const Envelope env = sample();
  const Frame frame = encode_frame(env);
  std::byte prefix[4];
  std::memcpy(prefix, frame.header.data(), 4);
  const std::size_t len = decode_header_length(prefix);
  ASSERT_EQ(len, frame.header.size() - 4);
  Envelope out;
  const auto lengths = decode_header(std::string_view(frame.header).substr(4), out);
  ASSERT_EQ(lengths.size(), frame.parts.size());
  for (std::size_t i = 0; i < lengths.size(); ++i) EXPECT_EQ(lengths[i], frame.parts[i].size());
  EXPECT_TRUE(out.body.parts.empty());
  out.body.parts = frame.parts;
  expect_same(env, out);
}

TEST(Envelope, TheHeaderDoesNotGrowWithTheParts) {
  const Frame small = encode_frame(sample(kOutOfBandThreshold));
  const Frame big = encode_frame(sample(1 << 20));
  EXPECT_EQ(small.header.size(), big.header.size());
  EXPECT_LT(big.header.size(), 400u);
  EXPECT_EQ(big.parts[0].size(), std::size_t{1} << 20);
  EXPECT_EQ(big.size(), big.header.size() + 3 * (std::size_t{1} << 20) + 3);
}

TEST(Envelope, EveryTruncationIsADecodeError) {
  const std::string flat = encode_frame(sample(kOutOfBandThreshold)).flatten();
  for (std::size_t n = 0; n < flat.size(); ++n) {
    EXPECT_NE(decode_error(flat.substr(0, n)), "no error") << "truncated at " << n;
  }
  EXPECT_THAT(decode_error(""), HasSubstr("shorter than its length prefix"));
  EXPECT_THAT(decode_error(flat.substr(0, 20)), HasSubstr("only 16 present"));
  EXPECT_THAT(decode_error(flat.substr(0, flat.size() - 1)), HasSubstr("truncated inside a part"));
  EXPECT_THAT(decode_error(flat + "x"), HasSubstr("1 trailing bytes after the frame"));
  // Every truncation of the header alone, through the streaming decoder.
  const std::string header = flat.substr(4, header_len(flat));
  for (std::size_t n = 0; n < header.size(); ++n) {
    Envelope out;
    EXPECT_THROW(decode_header(header.substr(0, n), out), DecodeError) << n;
  }
}

TEST(Envelope, WrongMagicAndVersionAreNamed) {
  const std::string flat = encode_frame(sample()).flatten();
  std::string bad_magic = flat;
  bad_magic[kMagicAt] ^= 0x55;
  EXPECT_THAT(decode_error(bad_magic), HasSubstr("bad frame magic"));
  std::string bad_version = flat;
  bad_version[kVersionAt] = 9;
  EXPECT_THAT(decode_error(bad_version), HasSubstr("frame version 9, expected 1"));
  std::string seq = flat;
  put(seq, kSeqAt, std::uint64_t{12345});
  EXPECT_EQ(decode_frame(Bytes::copy(seq)).seq, 12345u);  // the offsets above are right
}

TEST(Envelope, OverLongHeadersAreRejectedFromThePrefix) {
  const std::string flat = encode_frame(sample()).flatten();
  std::string huge = flat;
  put(huge, 0, std::uint32_t{0xffffffff});
  EXPECT_THAT(decode_error(huge), HasSubstr("frame header of 4294967295 bytes exceeds the limit"));
  const std::byte prefix[4] = {std::byte{0xff}, std::byte{0xff}, std::byte{0xff}, std::byte{0x7f}};
  EXPECT_THROW(decode_header_length(prefix), DecodeError);
  DecodeLimits tight;
  tight.max_header_bytes = header_len(flat) - 1;
  EXPECT_THAT(decode_error(flat, tight), HasSubstr("exceeds the limit"));
  tight.max_header_bytes = header_len(flat);
  EXPECT_EQ(decode_error(flat, tight), "no error");
  // A prefix longer than the bytes that follow.
  std::string longer = flat.substr(0, 4 + header_len(flat));
  put(longer, 0, header_len(flat) + 1);
  EXPECT_THAT(decode_error(longer), HasSubstr("present"));
  // A prefix shorter than the header leaves header bytes to be read as parts.
  std::string shorter = flat;
  put(shorter, 0, header_len(flat) - 1);
  EXPECT_NE(decode_error(shorter), "no error");
}

TEST(Envelope, TooManyPartsOrHeadersAreNamed) {
  const Envelope env = sample();
  const std::string flat = encode_frame(env).flatten();
  DecodeLimits tight;
  tight.max_parts = 2;
  EXPECT_THAT(decode_error(flat, tight), HasSubstr("3 parts exceed the limit of 2"));
  tight = {};
  tight.max_headers = 2;
  EXPECT_THAT(decode_error(flat, tight), HasSubstr("3 headers exceed the limit of 2"));
  // Counts far beyond the limits or the bytes present, written by a hostile peer.
  std::string parts = flat;
  put(parts, part_count_at(flat, 3), std::uint32_t{0xffffffff});
  EXPECT_THAT(decode_error(parts), HasSubstr("parts exceed the limit"));
  std::string some_parts = flat;
  put(some_parts, part_count_at(flat, 3), std::uint32_t{100});
  EXPECT_NE(decode_error(some_parts), "no error");
  std::string headers = flat;
  put(headers, header_count_at(env), std::uint64_t{1} << 40);
  EXPECT_THAT(decode_error(headers), HasSubstr("container of"));
  std::string more_headers = flat;
  put(more_headers, header_count_at(env), std::uint64_t{4});
  EXPECT_NE(decode_error(more_headers), "no error");
  std::string fewer_headers = flat;
  put(fewer_headers, header_count_at(env), std::uint64_t{2});
  EXPECT_NE(decode_error(fewer_headers), "no error");
}

TEST(Envelope, PartLengthsOverTheFrameLimitAreNamed) {
  const std::string flat = encode_frame(sample()).flatten();
  const std::size_t lengths_at = part_count_at(flat, 3) + 4;
  std::string huge = flat;
  put(huge, lengths_at, std::uint64_t{1} << 62);
  EXPECT_THAT(decode_error(huge), HasSubstr("frame parts exceed the limit of 1073741824 bytes"));
  std::string max = flat;
  put(max, lengths_at + 16, ~std::uint64_t{0});
  EXPECT_THAT(decode_error(max), HasSubstr("frame parts exceed the limit"));
  // Each part under the limit, their sum over it.
  std::string sum = flat;
  put(sum, lengths_at, std::uint64_t{600} << 20);
  put(sum, lengths_at + 8, std::uint64_t{600} << 20);
  EXPECT_THAT(decode_error(sum), HasSubstr("frame parts exceed the limit"));
  DecodeLimits tight;
  tight.max_frame_bytes = flat.size() - 1;
  EXPECT_THAT(decode_error(flat, tight), HasSubstr("frame parts exceed"));
  tight.max_frame_bytes = flat.size();
  EXPECT_EQ(decode_error(flat, tight), "no error");
  // A part length the frame does not hold.
  std::string longer = flat;
  put(longer, lengths_at + 16, std::uint64_t{6000});
  EXPECT_THAT(decode_error(longer), HasSubstr("truncated inside a part"));
}

TEST(Envelope, AFrameWithoutPartsIsHeldToTheFrameLimitAsTheEncoderHoldsIt) {
  Envelope env;
  env.sender = ActorId::parse("a/b[1]");
  env.dest = PortId::parse("c/d[2]#3");
  env.body.head = std::string(100, 'h');
  const std::string flat = encode_frame(env).flatten();
  DecodeLimits tight;
  tight.max_frame_bytes = flat.size();
  EXPECT_EQ(decode_error(flat, tight), "no error");
  EXPECT_NO_THROW(encode_frame(env, tight));
  tight.max_frame_bytes = flat.size() - 1;
  EXPECT_THAT(decode_error(flat, tight),
              HasSubstr("frame of " + std::to_string(flat.size()) + " bytes exceeds the limit of " +
                        std::to_string(flat.size() - 1) + " bytes"));
  EXPECT_THROW(encode_frame(env, tight), MessageTooLargeError);
  // The streaming decoder holds it to the limit too.
  Envelope out;
  EXPECT_THROW(decode_header(flat.substr(4), out, tight), DecodeError);
}

TEST(Envelope, TrailingHeaderBytesAndInvalidIdsAreRejected) {
  const Envelope env = sample();
  const std::string flat = encode_frame(env).flatten();
  // One junk byte at the end of the header, with the prefix counting it.
  std::string junk = flat;
  junk.insert(4 + header_len(flat), 1, '\x07');
  put(junk, 0, header_len(flat) + 1);
  EXPECT_THAT(decode_error(junk), HasSubstr("1 trailing bytes in the frame header"));
  // A sender whose actor name no parser would accept.
  std::string bad_name = flat;
  const std::size_t name_at = 17 + 8 + env.sender.proc.name.size() + 8;
  ASSERT_EQ(bad_name.substr(name_at, 6), "client");
  bad_name[name_at + 2] = '/';
  EXPECT_THAT(decode_error(bad_name), HasSubstr("invalid name"));
}

TEST(Envelope, EncodingOverTheLimitsIsALengthError) {
  const auto length_error = [](const Envelope& env, const DecodeLimits& limits) -> std::string {
    try {
      encode_frame(env, limits);
    } catch (const MessageTooLargeError& e) {
      return e.what();
    }
    return "no error";
  };
  const Envelope env = sample();
  DecodeLimits tight;
  tight.max_frame_bytes = 1000;
  EXPECT_THAT(length_error(env, tight), HasSubstr("exceeds the frame limit of 1000"));
  EXPECT_THAT(length_error(env, tight), HasSubstr("RdmaBuffer"));
  tight = {};
  tight.max_parts = 2;
  EXPECT_THAT(length_error(env, tight), HasSubstr("3 out-of-band parts; the limit is 2"));
  tight = {};
  tight.max_headers = 2;
  EXPECT_THAT(length_error(env, tight), HasSubstr("3 headers; the limit is 2"));
  Envelope fat = sample();
  fat.body.head = std::string(2000, 'h');
  tight = {};
  tight.max_header_bytes = 1000;
  EXPECT_THAT(length_error(fat, tight), HasSubstr("exceeds the limit of 1000"));
  EXPECT_THAT(length_error(fat, tight), HasSubstr("baton::Bytes"));
  // Exactly at the limits is fine, and decodes under the same limits.
  const Frame frame = encode_frame(env);
  tight = {};
  tight.max_frame_bytes = frame.size();
  tight.max_header_bytes = frame.header.size() - 4;
  tight.max_parts = 3;
  tight.max_headers = 3;
  EXPECT_EQ(length_error(env, tight), "no error");
  expect_same(env, decode_frame(Bytes::copy(encode_frame(env, tight).flatten()), tight));
}

TEST(Envelope, RandomGarbageNeverCrashes) {
  std::mt19937 rng(99);
  const Envelope env = sample(kOutOfBandThreshold);
  const std::string valid = encode_frame(env).flatten();
  const std::string valid_header = valid.substr(0, 4 + header_len(valid));
  int accepted = 0;
  constexpr int kIterations = 20000;
  for (int iter = 0; iter < kIterations; ++iter) {
    std::string bytes;
    switch (iter % 4) {
      case 0:  // noise
        bytes.resize(rng() % 256);
        for (char& c : bytes) c = static_cast<char>(rng());
        break;
      case 1:  // a valid length prefix and magic, then noise
        bytes = valid.substr(0, 9);
        bytes.resize(9 + rng() % 300);
        for (std::size_t i = 9; i < bytes.size(); ++i) bytes[i] = static_cast<char>(rng());
        put(bytes, 0, static_cast<std::uint32_t>(bytes.size() - 4 - rng() % 8));
        break;
      case 2:  // a few bytes of the header changed
        bytes = valid_header;
        for (int e = 0; e < 3; ++e)
          bytes[4 + rng() % (bytes.size() - 4)] = static_cast<char>(rng());
        bytes += valid.substr(valid_header.size());
        break;
      default:  // bytes changed anywhere, then maybe cut
        bytes = valid;
        for (int e = 0; e < 3; ++e) bytes[rng() % bytes.size()] = static_cast<char>(rng());
        if (rng() % 2) bytes.resize(rng() % bytes.size());
    }
    try {
      const Envelope got = decode_frame(Bytes::copy(bytes));
      ++accepted;
      // Whatever decodes re-encodes to the same frame.
      EXPECT_EQ(encode_frame(got).flatten(), bytes) << "iteration " << iter;
    } catch (const DecodeError&) {
    } catch (const std::exception& e) {
      ADD_FAILURE() << "iteration " << iter << ": " << typeid(e).name() << ": " << e.what();
    }
  }
  EXPECT_GT(accepted, 0);  // some header edits (seq, part bytes) leave a valid frame
  EXPECT_LT(accepted, kIterations);
}

}  // namespace
}  // namespace baton
