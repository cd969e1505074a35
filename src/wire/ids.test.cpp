#include "baton/wire/ids.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "baton/wire/archive.hpp"

namespace baton {
namespace {

using ::testing::HasSubstr;

TEST(Ids, PrintAndParseBack) {
  for (const char* text : {"ctl", "trainers.3", "a-b_c.9"}) {
    EXPECT_EQ(ProcId::parse(text).to_string(), text);
  }
  for (const char* text :
       {"ctl/client[0]", "trainers.3/trainer[12]", "p/a.b-c[18446744073709551615]"}) {
    EXPECT_EQ(ActorId::parse(text).to_string(), text);
  }
  const PortId port = PortId::parse("ctl/client[0]#7");
  EXPECT_EQ(port.actor.proc.name, "ctl");
  EXPECT_EQ(port.actor.name, "client");
  EXPECT_EQ(port.port, 7u);
  EXPECT_EQ(port.to_string(), "ctl/client[0]#7");
}

TEST(Ids, MalformedTextIsRejectedWithTheExpectedForm) {
  struct Case {
    std::string text;
    const char* says;
  };
  const Case cases[] = {{"", "invalid proc name ''"},
                        {"a b", "invalid proc name 'a b'"},
                        {std::string(129, 'x'), "1-128 characters"}};
  for (const Case& c : cases) {
    try {
      ProcId::parse(c.text);
      ADD_FAILURE() << c.text;
    } catch (const ParseError& e) {
      EXPECT_THAT(e.what(), HasSubstr(c.says));
    }
  }
  for (const char* text : {"noslash", "p/name", "p/name[", "/name[0]", "p/[0]", "p/n[x]", "p/n[1]x",
                           "p/n[-1]", "p/n[99999999999999999999]"}) {
    try {
      ActorId::parse(text);
      ADD_FAILURE() << text;
    } catch (const ParseError& e) {
      EXPECT_THAT(e.what(), HasSubstr(text));
    }
  }
  try {
    PortId::parse("p/n[0]");
    ADD_FAILURE();
  } catch (const ParseError& e) {
    EXPECT_THAT(e.what(), HasSubstr("proc/name[index]#port"));
  }
  EXPECT_THROW(PortId::parse("p/n[0]#"), ParseError);
  EXPECT_THROW(PortId::parse("p/n[0]#x1"), ParseError);
}

TEST(Ids, RoundTripThroughTheArchive) {
  const PortId id = PortId::parse("trainers.3/trainer[2]#41");
  EXPECT_EQ(decode<PortId>(encode(id)), id);
}

TEST(Ids, HostileNamesOffTheWireAreRejected) {
  // The same bytes an ActorId would have, with names no parser would accept.
  for (const char* bad : {"", "a/b", "x[1]", "sp ace"}) {
    const Body body = encode(std::string("proc"), std::string(bad), std::uint64_t{0});
    EXPECT_THROW(decode<ActorId>(body), DecodeError) << bad;
    const Body body2 = encode(std::string(bad), std::string("name"), std::uint64_t{0});
    EXPECT_THROW(decode<ActorId>(body2), DecodeError) << bad;
  }
}

}  // namespace
}  // namespace baton
