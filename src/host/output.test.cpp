// The output forwarder over real pipes: prefixes, aggregation across ranks, partial and very
// long lines, both streams. flush() is the synchronisation; nothing sleeps.

#include "baton/host/output.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <mutex>
#include <string>
#include <vector>

namespace baton {
namespace {

using namespace std::chrono_literals;

struct Collected {
  std::mutex mu;
  std::vector<OutputLine> lines;
  OutputOptions options(std::chrono::milliseconds window) {
    return OutputOptions{window, [this](const OutputLine& l) {
                           std::lock_guard lock(mu);
                           lines.push_back(l);
                         }};
  }
};

/// A pipe whose read end the forwarder owns; the test writes the other end.
int add_pipe(OutputForwarder& f, int stream, const std::string& mesh, std::size_t rank) {
  int fds[2];
  EXPECT_EQ(::pipe(fds), 0);
  f.add(fds[0], stream, mesh, rank);
  return fds[1];
}

void put(int fd, const std::string& s) {
  ASSERT_EQ(::write(fd, s.data(), s.size()), static_cast<ssize_t>(s.size()));
}

TEST(Output, FormatsPrefixesAndRankRanges) {
  EXPECT_EQ((OutputLine{1, "procs0", {3}, "hello"}.to_string()), "[procs0 3] hello");
  EXPECT_EQ((OutputLine{1, "m", {0, 1, 2, 3, 5}, "x"}.to_string()), "[m 0-3,5] x (x5)");
  EXPECT_EQ((OutputLine{2, "m", {1, 3, 4}, "y"}.to_string()), "[m 1,3-4] y (x3)");
}

TEST(Output, TheSameLineFromManyRanksIsPrintedOnce) {
  Collected c;
  OutputForwarder f(c.options(10s));
  std::vector<int> w;
  for (std::size_t r = 0; r < 4; ++r) w.push_back(add_pipe(f, 1, "procs0", r));
  for (std::size_t r = 0; r < 4; ++r) put(w[r], "loading\nrank " + std::to_string(r) + "\n");
  f.flush();
  std::lock_guard lock(c.mu);
  ASSERT_EQ(c.lines.size(), 5u);
  EXPECT_EQ(c.lines[0].text, "loading");
  EXPECT_EQ(c.lines[0].ranks, (std::vector<std::size_t>{0, 1, 2, 3}));
  for (std::size_t i = 1; i < 5; ++i) {
    EXPECT_EQ(c.lines[i].ranks.size(), 1u);
    EXPECT_EQ(c.lines[i].text, "rank " + std::to_string(c.lines[i].ranks[0]));
  }
  for (int fd : w) ::close(fd);
}

TEST(Output, AggregationOffPrintsEveryLine) {
  Collected c;
  OutputForwarder f(c.options(0ms));
  std::vector<int> w;
  for (std::size_t r = 0; r < 4; ++r) w.push_back(add_pipe(f, 1, "m", r));
  for (int fd : w) put(fd, "same\n");
  f.flush();
  std::lock_guard lock(c.mu);
  ASSERT_EQ(c.lines.size(), 4u);
  for (const auto& l : c.lines) {
    EXPECT_EQ(l.text, "same");
    EXPECT_EQ(l.ranks.size(), 1u);
  }
  for (int fd : w) ::close(fd);
}

TEST(Output, StreamsMeshesAndRepeatsStayApart) {
  Collected c;
  OutputForwarder f(c.options(10s));
  const int out = add_pipe(f, 1, "a", 0);
  const int err = add_pipe(f, 2, "a", 0);
  const int other = add_pipe(f, 1, "b", 0);
  put(out, "x\nx\n");  // one rank saying it twice: two lines
  put(err, "x\n");
  put(other, "x\n");
  f.flush();
  std::lock_guard lock(c.mu);
  ASSERT_EQ(c.lines.size(), 4u);
  int on_stderr = 0;
  for (const auto& l : c.lines) {
    EXPECT_EQ(l.ranks.size(), 1u);
    on_stderr += l.stream == 2 ? 1 : 0;
  }
  EXPECT_EQ(on_stderr, 1);
  ::close(out);
  ::close(err);
  ::close(other);
}

TEST(Output, PartialAndHugeLinesArriveWhole) {
  Collected c;
  {
    OutputForwarder f(c.options(0ms));
    const int w = add_pipe(f, 1, "m", 7);
    const std::string huge(std::size_t{200} * 1024, 'h');
    std::thread writer([&] {
      put(w, huge + "\n");
      put(w, "no newline at the end");
      ::close(w);
    });
    writer.join();
  }  // the destructor reads to the end of every pipe
  std::lock_guard lock(c.mu);
  std::size_t total = 0;
  ASSERT_GE(c.lines.size(), 5u);
  for (std::size_t i = 0; i + 1 < c.lines.size(); ++i) {
    EXPECT_LE(c.lines[i].text.size(), OutputForwarder::kMaxLine);
    total += c.lines[i].text.size();
  }
  EXPECT_EQ(total, 200u * 1024);
  EXPECT_EQ(c.lines.back().text, "no newline at the end");
  EXPECT_EQ(c.lines.back().ranks, (std::vector<std::size_t>{7}));
}

}  // namespace
}  // namespace baton
