#include "baton/wire/address.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "baton/wire/archive.hpp"

namespace baton {
namespace {

using ::testing::HasSubstr;

TEST(Address, EveryFormRoundTrips) {
  for (const char* text : {"inproc://ctl", "unix:///tmp/baton.sock", "unix://@baton-job-1",
                           "tcp://127.0.0.1:5000", "tcp://node-3.cluster:0", "tcp://[::1]:65535"}) {
    const Address a = Address::parse(text);
    EXPECT_EQ(a.to_string(), text);
    EXPECT_EQ(decode<Address>(encode(a)), a);
  }
  const Address v6 = Address::parse("tcp://[fe80::1]:80");
  EXPECT_EQ(v6.transport, Address::Transport::tcp);
  EXPECT_EQ(v6.host, "fe80::1");
  EXPECT_EQ(v6.port, 80);
}

TEST(Address, ErrorsNameTheProblemAndTheAcceptedForms) {
  struct Case {
    std::string text;
    const char* says;
  };
  const Case cases[] = {
      {"http://x:1", "unknown transport"},
      {"tcp://host", "missing ':PORT'"},
      {"tcp://host:70000", "0 to 65535"},
      {"tcp://host:12x", "0 to 65535"},
      {"tcp://::1:80", "brackets"},
      {"tcp://[::1:80", "missing ']'"},
      {"tcp://:80", "host is empty"},
      {"unix://relative.sock", "absolute"},
      {"unix://", "empty"},
      {"unix:///" + std::string(120, 'p'), "longer than 107"},
      {"inproc://bad name", "in-process name"},
  };
  for (const Case& c : cases) {
    try {
      Address::parse(c.text);
      ADD_FAILURE() << c.text;
    } catch (const ParseError& e) {
      EXPECT_THAT(e.what(), HasSubstr(c.says)) << c.text;
      EXPECT_THAT(e.what(), HasSubstr("tcp://HOST:PORT")) << c.text;
    }
  }
}

TEST(Address, AnInvalidAddressOffTheWireIsADecodeError) {
  EXPECT_THROW(decode<Address>(encode(std::string("tcp://nope"))), DecodeError);
}

}  // namespace
}  // namespace baton
