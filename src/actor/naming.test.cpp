// A translation unit that only names an actor: it declares the class and its endpoints and
// passes references around by name, and must compile without the serialization library (which
// the headers for calling and spawning bring in).

#include "baton/actor/actor.hpp"

#include <gtest/gtest.h>

#include <string>
#include <string_view>
#include <type_traits>

#ifdef CEREAL_CEREAL_HPP_
#error "baton/actor/actor.hpp pulled in cereal: keep encoding out of the actor base header"
#endif

namespace {

class Sampler : public baton::Actor {
 public:
  int draw(int seed) { return seed + 1; }
  std::string label() const { return "sampler"; }

  static constexpr auto endpoints = baton::endpoints<&Sampler::draw, &Sampler::label>();
};

// Naming a reference needs no definition of it.
struct Holder {
  const baton::ActorRef<Sampler>* ref = nullptr;
};

}  // namespace

TEST(Naming, AnActorIsDeclaredWithItsEndpointsFromTheBaseHeaderAlone) {
  static_assert(std::remove_cvref_t<decltype(Sampler::endpoints)>::size == 2);
  EXPECT_TRUE(baton::detail::function_name<&Sampler::draw>().ends_with("Sampler::draw"));
  EXPECT_TRUE(baton::detail::function_name<&Sampler::label>().ends_with("Sampler::label"));
  EXPECT_TRUE(baton::detail::type_name<Sampler>().ends_with("Sampler"));
  using Draw = baton::detail::member_fn<decltype(&Sampler::draw)>;
  static_assert(Draw::arity == 1);
  EXPECT_EQ(Holder{}.ref, nullptr);
  static_assert(std::is_same_v<baton::detail::reply_t<decltype(&Sampler::draw)>, int>);
  static_assert(std::is_same_v<baton::detail::reply_t<decltype(&Sampler::label)>, std::string>);
}
