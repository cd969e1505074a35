#include "baton/wire/envelope.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <random>

namespace baton {
namespace {

using ::testing::HasSubstr;

Envelope sample(std::size_t part_size = 5000) {
  Envelope env;
  env.sender = ActorId::parse("ctl/client[0]");
  env.dest = PortId::parse("trainers.3/trainer[0]#0");
  env.seq = 77;
  env.headers = {{"endpoint", "Trainer::train"}, {"trace", "abc"}};
  env.body = encode(std::string("args"), Bytes::copy(std::string(part_size, 'x')),
                    Bytes::copy(std::string(part_size, 'y')));
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

TEST(Envelope, RoundTripsAndPartsAreViewsOfTheFrame) {
  const Envelope env = sample();
  const Frame frame = encode_frame(env);
  ASSERT_EQ(frame.parts.size(), 2u);
  const Bytes flat = Bytes::copy(frame.flatten());
  const Envelope back = decode_frame(flat);
  expect_same(env, back);
  EXPECT_EQ(*back.header("endpoint"), "Trainer::train");
  EXPECT_EQ(back.header("missing"), nullptr);
  for (const Bytes& p : back.body.parts) {
    EXPECT_GE(p.data(), flat.data());
    EXPECT_LE(p.data() + p.size(), flat.data() + flat.size());
  }
}

TEST(Envelope, TheHeaderDoesNotGrowWithTheParts) {
  const Frame small = encode_frame(sample(kOutOfBandThreshold));
  const Frame big = encode_frame(sample(1 << 20));
  EXPECT_EQ(small.header.size(), big.header.size());
  EXPECT_EQ(big.parts[0].size(), std::size_t{1} << 20);
}

TEST(Envelope, EveryTruncationIsADecodeError) {
  const std::string flat = encode_frame(sample(kOutOfBandThreshold)).flatten();
  for (std::size_t n = 0; n < flat.size(); n += (n < 400 ? 1 : 97)) {
    EXPECT_NE(decode_error(flat.substr(0, n)), "no error") << "truncated at " << n;
  }
  EXPECT_THAT(decode_error(flat + "x"), HasSubstr("trailing"));
}

TEST(Envelope, BadMagicVersionAndLimitsAreNamed) {
  const std::string flat = encode_frame(sample()).flatten();
  std::string bad_magic = flat;
  bad_magic[4] ^= 0x55;
  EXPECT_THAT(decode_error(bad_magic), HasSubstr("magic"));
  std::string bad_version = flat;
  bad_version[8] = 9;
  EXPECT_THAT(decode_error(bad_version), HasSubstr("version 9"));
  std::string huge_header = flat;
  const std::uint32_t len = 0xffffffff;
  std::memcpy(huge_header.data(), &len, 4);
  EXPECT_THAT(decode_error(huge_header), HasSubstr("exceeds the limit"));
  DecodeLimits tight;
  tight.max_parts = 1;
  EXPECT_THAT(decode_error(flat, tight), HasSubstr("parts exceed the limit"));
  tight = {};
  tight.max_headers = 1;
  EXPECT_THAT(decode_error(flat, tight), HasSubstr("headers exceed the limit"));
  tight = {};
  tight.max_frame_bytes = 6000;
  EXPECT_THAT(decode_error(flat, tight), HasSubstr("frame parts exceed"));
}

TEST(Envelope, EncodingOverTheLimitsIsALengthErrorWithAdvice) {
  DecodeLimits tight;
  tight.max_frame_bytes = 1000;
  try {
    encode_frame(sample(), tight);
    FAIL() << "expected std::length_error";
  } catch (const std::length_error& e) {
    EXPECT_THAT(e.what(), HasSubstr("RdmaBuffer"));
  }
  Envelope fat = sample();
  fat.body.head = std::string(2000, 'h');
  tight = {};
  tight.max_header_bytes = 1000;
  try {
    encode_frame(fat, tight);
    FAIL() << "expected std::length_error";
  } catch (const std::length_error& e) {
    EXPECT_THAT(e.what(), HasSubstr("baton::Bytes"));
  }
}

TEST(Envelope, RandomGarbageNeverCrashes) {
  std::mt19937 rng(99);
  const std::string valid = encode_frame(sample(kOutOfBandThreshold)).flatten();
  int accepted = 0;
  for (int iter = 0; iter < 5000; ++iter) {
    std::string bytes;
    if (iter % 2 == 0) {
      bytes.resize(rng() % 256);
      for (char& c : bytes) c = static_cast<char>(rng());
    } else {
      bytes = valid;
      for (int e = 0; e < 3; ++e) bytes[rng() % bytes.size()] = static_cast<char>(rng());
    }
    try {
      decode_frame(Bytes::copy(bytes));
      ++accepted;
    } catch (const DecodeError&) {
    }
  }
  EXPECT_LT(accepted, 5000);
}

}  // namespace
}  // namespace baton
