#include "baton/wire/ids.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>
#include <unordered_set>
#include <vector>

#include "baton/wire/archive.hpp"

namespace baton {
namespace {

using ::testing::HasSubstr;

// The ParseError message of `parse(text)`, or "no error".
template <class Id>
std::string parse_error(const std::string& text) {
  try {
    Id::parse(text);
  } catch (const ParseError& e) {
    return e.what();
  }
  return "no error";
}

TEST(Ids, ProcIdsPrintAndParseBack) {
  for (const std::string& text :
       {std::string("ctl"), std::string("trainers.3"), std::string("a-b_c.9"), std::string("..."),
        std::string(128, 'x')}) {
    const ProcId id = ProcId::parse(text);
    EXPECT_EQ(id.name, text);
    EXPECT_EQ(id.to_string(), text);
    EXPECT_EQ(ProcId::parse(id.to_string()), id);
  }
}

TEST(Ids, ActorIdsPrintAndParseBack) {
  const ActorId id = ActorId::parse("trainers.3/trainer[12]");
  EXPECT_EQ(id.proc.name, "trainers.3");
  EXPECT_EQ(id.name, "trainer");
  EXPECT_EQ(id.index, 12u);
  for (const char* text : {"ctl/client[0]", "trainers.3/trainer[12]",
                           "p/a.b-c[18446744073709551615]", "A_1/Z-9.x[42]"}) {
    const ActorId a = ActorId::parse(text);
    EXPECT_EQ(a.to_string(), text);
    EXPECT_EQ(ActorId::parse(a.to_string()), a);
  }
  const ActorId built{ProcId{"ctl"}, "w", std::uint64_t{1} << 40};
  EXPECT_EQ(built.to_string(), "ctl/w[1099511627776]");
  EXPECT_EQ(ActorId::parse(built.to_string()), built);
}

TEST(Ids, PortIdsPrintAndParseBack) {
  const PortId port = PortId::parse("ctl/client[0]#7");
  EXPECT_EQ(port.actor.proc.name, "ctl");
  EXPECT_EQ(port.actor.name, "client");
  EXPECT_EQ(port.actor.index, 0u);
  EXPECT_EQ(port.port, 7u);
  EXPECT_EQ(port.to_string(), "ctl/client[0]#7");
  for (const char* text : {"ctl/client[0]#0", "t.3/trainer[2]#41", "p/n[3]#18446744073709551615"}) {
    const PortId p = PortId::parse(text);
    EXPECT_EQ(p.to_string(), text);
    EXPECT_EQ(PortId::parse(p.to_string()), p);
  }
}

TEST(Ids, MalformedProcIdsNameTheTextAndTheCharacterSet) {
  for (const std::string& text : {std::string(""), std::string("a b"), std::string("a/b"),
                                  std::string("x#1"), std::string(129, 'x')}) {
    const std::string what = parse_error<ProcId>(text);
    EXPECT_THAT(what, HasSubstr("invalid proc name '" + text + "'")) << text;
    EXPECT_THAT(what, HasSubstr("1-128 characters of [A-Za-z0-9_.-]")) << text;
  }
}

// Bytes that would garble or cut the message (a NUL ends what()) are shown escaped.
TEST(Ids, UnprintableTextIsEscapedInTheMessage) {
  const std::string nul("a\0b", 3);
  EXPECT_THAT(parse_error<ProcId>(nul),
              HasSubstr("invalid proc name 'a\\x00b' in 'a\\x00b': use 1-128"));
  EXPECT_THAT(parse_error<ProcId>("caf\xc3\xa9"), HasSubstr("'caf\\xc3\\xa9'"));
  EXPECT_THAT(parse_error<ActorId>("p/n[\n]"), HasSubstr("'p/n[\\x0a]': expected a decimal"));
  EXPECT_THAT(parse_error<PortId>(std::string("p/n[0]\0", 7)),
              HasSubstr("'p/n[0]\\x00': expected proc/name[index]#port"));
  // A huge text is cut rather than copied whole into the message.
  const std::string what = parse_error<ProcId>(std::string(100000, '!'));
  EXPECT_THAT(what, HasSubstr("!!!..."));
  EXPECT_LT(what.size(), 1000u);
}

TEST(Ids, MalformedActorIdsNameTheTextAndTheExpectedForm) {
  struct Case {
    std::string text;
    const char* expected;  // the expected form the message must name
  };
  const Case cases[] = {
      // Structure: no '/', no '[', no closing ']'.
      {"", "expected proc/name[index]"},
      {"noslash", "expected proc/name[index]"},
      {"noslash[0]", "expected proc/name[index]"},
      {"p/name", "expected proc/name[index]"},
      {"p/name[", "expected proc/name[index]"},
      {"p/n[1]x", "expected proc/name[index]"},
      {"p/n[0]#7", "expected proc/name[index]"},
      // Names.
      {"/name[0]", "[A-Za-z0-9_.-]"},
      {"p/[0]", "[A-Za-z0-9_.-]"},
      {"p q/n[0]", "[A-Za-z0-9_.-]"},
      {"p/a/b[0]", "[A-Za-z0-9_.-]"},
      {"p/n#[0]", "[A-Za-z0-9_.-]"},
      {"p/" + std::string(129, 'n') + "[0]", "[A-Za-z0-9_.-]"},
      // Indexes.
      {"p/n[]", "expected a decimal number"},
      {"p/n[x]", "expected a decimal number"},
      {"p/n[-1]", "expected a decimal number"},
      {"p/n[+1]", "expected a decimal number"},
      {"p/n[1 ]", "expected a decimal number"},
      {"p/n[0]]", "expected a decimal number"},
      {"p/n[18446744073709551616]", "expected a decimal number"},
  };
  for (const Case& c : cases) {
    const std::string what = parse_error<ActorId>(c.text);
    EXPECT_THAT(what, HasSubstr("'" + c.text + "'")) << c.text;
    EXPECT_THAT(what, HasSubstr(c.expected)) << c.text;
  }
  EXPECT_THAT(parse_error<ActorId>("p q/n[0]"), HasSubstr("invalid proc name 'p q'"));
  EXPECT_THAT(parse_error<ActorId>("p/a/b[0]"), HasSubstr("invalid actor name 'a/b'"));
  EXPECT_THAT(parse_error<ActorId>("p/n[x]"), HasSubstr("invalid actor index 'x'"));
}

TEST(Ids, MalformedPortIdsNameTheTextAndTheExpectedForm) {
  EXPECT_THAT(parse_error<PortId>("p/n[0]"), HasSubstr("'p/n[0]'"));
  EXPECT_THAT(parse_error<PortId>("p/n[0]"), HasSubstr("expected proc/name[index]#port"));
  for (const char* text :
       {"p/n[0]#", "p/n[0]#x1", "p/n[0]#1x", "p/n[0]#-1", "p/n[0]#99999999999999999999"}) {
    const std::string what = parse_error<PortId>(text);
    EXPECT_THAT(what, HasSubstr(std::string("in '") + text + "'")) << text;
    EXPECT_THAT(what, HasSubstr("invalid port number")) << text;
    EXPECT_THAT(what, HasSubstr("expected a decimal number")) << text;
  }
  // A malformed actor part reports the actor's expected form.
  EXPECT_THAT(parse_error<PortId>("p/n#3"), HasSubstr("expected proc/name[index]"));
  EXPECT_THAT(parse_error<PortId>("p/n[0]#1#2"), HasSubstr("'p/n[0]#1'"));
}

// Whatever parses prints to a text that parses to the same id (leading zeros may be dropped).
TEST(Ids, RandomTextEitherParsesStablyOrIsAParseError) {
  std::mt19937 rng(7);
  const std::string alphabet = "pn0123/[]#.-_ x";
  int parsed = 0;
  for (int iter = 0; iter < 20000; ++iter) {
    std::string text(rng() % 16, ' ');
    for (char& c : text) c = alphabet[rng() % alphabet.size()];
    if (iter % 3 == 0) text = "p/n[" + std::to_string(rng() % 100) + "]#" + text;
    try {
      const PortId id = PortId::parse(text);
      ++parsed;
      EXPECT_EQ(PortId::parse(id.to_string()), id) << text;
    } catch (const ParseError&) {
    }
    try {
      const ActorId id = ActorId::parse(text);
      EXPECT_EQ(ActorId::parse(id.to_string()), id) << text;
    } catch (const ParseError&) {
    }
  }
  EXPECT_GT(parsed, 0);
}

TEST(Ids, OrderingAndHashing) {
  const ActorId a0 = ActorId::parse("p/a[0]");
  const ActorId a1 = ActorId::parse("p/a[1]");
  const ActorId b0 = ActorId::parse("p/b[0]");
  EXPECT_LT(a0, a1);
  EXPECT_LT(a1, b0);
  EXPECT_NE(a0, b0);
  std::unordered_set<PortId> ports;
  ports.insert(PortId{a0, 1});
  ports.insert(PortId{a0, 1});
  ports.insert(PortId{a0, 2});
  ports.insert(PortId{a1, 1});
  EXPECT_EQ(ports.size(), 3u);
  EXPECT_EQ(std::hash<ActorId>{}(a0), std::hash<ActorId>{}(ActorId::parse("p/a[0]")));
}

TEST(Ids, RoundTripThroughTheArchive) {
  const PortId port = PortId::parse("trainers.3/trainer[2]#41");
  EXPECT_EQ(decode<PortId>(encode(port)), port);
  const ActorId actor = ActorId::parse("ctl/client[18446744073709551615]");
  EXPECT_EQ(decode<ActorId>(encode(actor)), actor);
  const ProcId proc = ProcId::parse(std::string(128, 'q'));
  EXPECT_EQ(decode<ProcId>(encode(proc)), proc);
  const std::vector<PortId> many{port, PortId{actor, 3}};
  EXPECT_EQ(decode<std::vector<PortId>>(encode(many)), many);
  // A ProcId is its name on the wire; an ActorId is proc name, name, index.
  EXPECT_EQ(encode(proc).head, encode(proc.name).head);
  EXPECT_EQ(encode(actor).head, encode(actor.proc.name, actor.name, actor.index).head);
}

TEST(Ids, HostileNamesOffTheWireAreDecodeErrors) {
  // The bytes an ActorId would have, with names no parser would accept.
  for (const std::string& bad :
       {std::string(""), std::string("a/b"), std::string("x[1]"), std::string("sp ace"),
        std::string("p#1"), std::string(129, 'x'), std::string("nul\0", 4)}) {
    const Body bad_name = encode(std::string("proc"), bad, std::uint64_t{0});
    EXPECT_THROW(decode<ActorId>(bad_name), DecodeError) << bad;
    const Body bad_proc = encode(bad, std::string("name"), std::uint64_t{0});
    EXPECT_THROW(decode<ActorId>(bad_proc), DecodeError) << bad;
    EXPECT_THROW(decode<ProcId>(encode(bad)), DecodeError) << bad;
    const Body bad_port = encode(std::string("proc"), bad, std::uint64_t{0}, std::uint64_t{7});
    EXPECT_THROW(decode<PortId>(bad_port), DecodeError) << bad;
  }
  try {
    decode<ActorId>(encode(std::string("proc"), std::string("a/b"), std::uint64_t{0}));
    ADD_FAILURE() << "expected a DecodeError";
  } catch (const DecodeError& e) {
    EXPECT_THAT(e.what(), HasSubstr("invalid name"));
  }
  // The valid layout decodes, so the rejections above are about the names alone.
  EXPECT_EQ(decode<ActorId>(encode(std::string("proc"), std::string("name"), std::uint64_t{4})),
            ActorId::parse("proc/name[4]"));
  // Truncated ids are decode errors too.
  const Body whole = encode(PortId::parse("p/n[1]#2"));
  for (std::size_t n = 0; n < whole.head.size(); ++n) {
    Body cut;
    cut.head = whole.head.substr(0, n);
    EXPECT_THROW(decode<PortId>(cut), DecodeError) << n;
  }
}

}  // namespace
}  // namespace baton
