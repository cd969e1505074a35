#include "baton/wire/address.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "baton/wire/archive.hpp"

namespace baton {
namespace {

using ::testing::HasSubstr;

std::string parse_error(const std::string& text) {
  try {
    Address::parse(text);
  } catch (const ParseError& e) {
    return e.what();
  }
  return "no error";
}

TEST(Address, EveryFormRoundTrips) {
  for (const std::string& text :
       {std::string("inproc://ctl"), std::string("inproc://a.b-c_9"),
        std::string("unix:///tmp/baton.sock"), std::string("unix:///"),
        std::string("unix://@baton-job-1"), std::string("unix:///") + std::string(106, 'p'),
        std::string("unix://@") + std::string(106, 'a'), std::string("tcp://127.0.0.1:5000"),
        std::string("tcp://node-3.cluster:0"), std::string("tcp://localhost:65535"),
        std::string("tcp://[::1]:65535"), std::string("tcp://[fe80::1:2]:80")}) {
    const Address a = Address::parse(text);
    EXPECT_EQ(a.to_string(), text);
    EXPECT_EQ(Address::parse(a.to_string()), a);
    EXPECT_EQ(decode<Address>(encode(a)), a) << text;
  }
}

TEST(Address, FieldsOfEachForm) {
  const Address in = Address::parse("inproc://ctl");
  EXPECT_EQ(in.transport, Address::Transport::inproc);
  EXPECT_EQ(in.host, "ctl");
  const Address path = Address::parse("unix:///run/b.sock");
  EXPECT_EQ(path.transport, Address::Transport::unix_socket);
  EXPECT_EQ(path.host, "/run/b.sock");
  const Address abstract = Address::parse("unix://@job");
  EXPECT_EQ(abstract.transport, Address::Transport::unix_socket);
  EXPECT_EQ(abstract.host, "@job");
  const Address v4 = Address::parse("tcp://10.0.0.1:5000");
  EXPECT_EQ(v4.transport, Address::Transport::tcp);
  EXPECT_EQ(v4.host, "10.0.0.1");
  EXPECT_EQ(v4.port, 5000);
  const Address v6 = Address::parse("tcp://[fe80::1]:80");
  EXPECT_EQ(v6.transport, Address::Transport::tcp);
  EXPECT_EQ(v6.host, "fe80::1");
  EXPECT_EQ(v6.port, 80);
  // A v6 host built by hand prints in brackets.
  Address built;
  built.transport = Address::Transport::tcp;
  built.host = "::";
  built.port = 9;
  EXPECT_EQ(built.to_string(), "tcp://[::]:9");
  EXPECT_EQ(Address::parse(built.to_string()), built);
}

TEST(Address, ErrorsNameTheTextTheProblemAndTheAcceptedForms) {
  struct Case {
    std::string text;
    const char* says;
  };
  const Case cases[] = {
      {"", "unknown transport"},
      {"http://x:1", "unknown transport"},
      {"TCP://x:1", "unknown transport"},
      {"tcp:/x:1", "unknown transport"},
      {"inproc://", "in-process name"},
      {"inproc://bad name", "in-process name"},
      {"inproc://a/b", "in-process name"},
      {"inproc://" + std::string(129, 'n'), "in-process name"},
      {"tcp://host", "missing ':PORT'"},
      {"tcp://[::1]", "missing ':PORT'"},
      {"tcp://[::1]80", "missing ':PORT'"},
      {"tcp://host:", "0 to 65535"},
      {"tcp://[::1]:", "0 to 65535"},
      {"tcp://host:70000", "0 to 65535"},
      {"tcp://host:65536", "0 to 65535"},
      {"tcp://host:99999999999999999999", "0 to 65535"},
      {"tcp://host:-1", "0 to 65535"},
      {"tcp://host:12x", "0 to 65535"},
      {"tcp://host:80/path", "0 to 65535"},
      {"tcp://::1:80", "brackets"},
      {"tcp://fe80::1:80", "brackets"},
      {"tcp://[::1:80", "missing ']'"},
      {"tcp://:80", "host is empty"},
      {"tcp://[]:80", "host is empty"},
      {"tcp://" + std::string(254, 'h') + ":80", "too long"},
      {"tcp://ho st:80", "invalid character"},
      {"tcp://h/x:80", "invalid character"},
      {"unix://relative.sock", "absolute"},
      {"unix://./rel.sock", "absolute"},
      {"unix://", "empty"},
      {"unix:///" + std::string(107, 'p'), "longer than 107"},
      {"unix:///" + std::string(120, 'p'), "longer than 107"},
      {"unix://@" + std::string(107, 'a'), "longer than 107"},
  };
  for (const Case& c : cases) {
    const std::string what = parse_error(c.text);
    EXPECT_THAT(what, HasSubstr("invalid address '" + c.text + "'")) << c.text;
    EXPECT_THAT(what, HasSubstr(c.says)) << c.text;
    EXPECT_THAT(what, HasSubstr("inproc://NAME")) << c.text;
    EXPECT_THAT(what, HasSubstr("unix:///PATH")) << c.text;
    EXPECT_THAT(what, HasSubstr("tcp://HOST:PORT")) << c.text;
  }
}

// Bytes that would garble or cut the message (a NUL ends what()) are shown escaped.
TEST(Address, UnprintableTextIsEscapedInTheMessage) {
  const std::string what = parse_error(std::string("unix:///tmp/a\0b", 15));
  EXPECT_THAT(what,
              HasSubstr("invalid address 'unix:///tmp/a\\x00b': the socket path contains a NUL"));
  EXPECT_THAT(what, HasSubstr("tcp://HOST:PORT"));
  EXPECT_THAT(parse_error("tcp://h\x01:80"),
              HasSubstr("'tcp://h\\x01:80': the host has an invalid"));
  const std::string long_what = parse_error("tcp://" + std::string(100000, 'h'));
  EXPECT_THAT(long_what, HasSubstr("hhh...': missing ':PORT'"));
  EXPECT_LT(long_what.size(), 1000u);
  // The same goes for an address off the wire.
  try {
    decode<Address>(encode(std::string("inproc://\0", 10)));
    ADD_FAILURE();
  } catch (const DecodeError& e) {
    EXPECT_THAT(e.what(), HasSubstr("'inproc://\\x00': the in-process name"));
  }
}

// Whatever parses prints to a text that parses to the same address.
TEST(Address, RandomTextEitherParsesStablyOrIsAParseError) {
  std::mt19937 rng(11);
  const std::vector<std::string> prefixes = {"inproc://", "unix://", "tcp://", "tcp://[", ""};
  const std::string alphabet = "ab01:[]/@.-_ 9";
  int parsed = 0;
  for (int iter = 0; iter < 20000; ++iter) {
    std::string text = prefixes[rng() % prefixes.size()];
    const std::size_t n = rng() % 12;
    for (std::size_t i = 0; i < n; ++i) text += alphabet[rng() % alphabet.size()];
    try {
      const Address a = Address::parse(text);
      ++parsed;
      EXPECT_EQ(Address::parse(a.to_string()), a) << text;
      EXPECT_EQ(decode<Address>(encode(a)), a) << text;
    } catch (const ParseError&) {
    }
  }
  EXPECT_GT(parsed, 100);
}

TEST(Address, EncodeDecodeRoundTrips) {
  const std::vector<Address> all{Address::parse("inproc://x"), Address::parse("unix:///s"),
                                 Address::parse("unix://@s"), Address::parse("tcp://h:1"),
                                 Address::parse("tcp://[::1]:2")};
  EXPECT_EQ(decode<std::vector<Address>>(encode(all)), all);
  // An address travels as its text.
  EXPECT_EQ(encode(all[3]).head, encode(std::string("tcp://h:1")).head);
}

TEST(Address, AnInvalidAddressOffTheWireIsADecodeError) {
  for (const char* bad : {"tcp://nope", "", "ftp://x:1", "unix://rel", "tcp://h:70000"}) {
    try {
      decode<Address>(encode(std::string(bad)));
      ADD_FAILURE() << bad;
    } catch (const DecodeError& e) {
      EXPECT_THAT(e.what(), HasSubstr("invalid address")) << bad;
    }
  }
  // Truncated text is a decode error, not a parse error.
  Body cut = encode(std::string("tcp://h:1"));
  cut.head.pop_back();
  EXPECT_THROW(decode<Address>(cut), DecodeError);
}

}  // namespace
}  // namespace baton
