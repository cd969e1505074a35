// A job's credentials handed to an agent over a pipe (`baton-host --credentials -`): what
// arrives is what was sent, kept private; anything else is refused saying what was wrong.

#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "host/credentials.hpp"
#include "host/hosts.test.hpp"

namespace baton {
namespace {

using ::testing::HasSubstr;

using test::TempDir;

/// A pipe whose read end gives `text`.
int pipe_of(const std::string& text) {
  int p[2];
  EXPECT_EQ(::pipe(p), 0);
  EXPECT_EQ(::write(p[1], text.data(), text.size()), static_cast<ssize_t>(text.size()));
  ::close(p[1]);
  return p[0];
}

std::string file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST(Credentials, WhatIsSentOverAPipeArrivesWholeAndPrivate) {
  TempDir dir;
  const internal::Credentials made = internal::make_credentials(dir.path / "made");
  const int fd = pipe_of(internal::credentials_text(made.secret, made.tls));
  const internal::Credentials got = internal::receive_credentials(fd, dir.path / "got");
  ::close(fd);
  EXPECT_EQ(got.secret, made.secret);
  EXPECT_EQ(file(got.tls.key_file), file(made.tls.key_file));
  EXPECT_EQ(file(got.tls.cert_file), file(made.tls.cert_file));
  EXPECT_EQ(file(got.tls.ca_file), file(made.tls.ca_file));
  struct stat st {};
  ASSERT_EQ(::stat((dir.path / "got").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  ASSERT_EQ(::stat(got.tls.key_file.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
}

TEST(Credentials, GarbageOrACutOffTextIsRefusedSayingWhatWasWrong) {
  TempDir dir;
  const internal::Credentials made = internal::make_credentials(dir.path / "made");
  const std::string whole = internal::credentials_text(made.secret, made.tls);
  const std::pair<std::string, std::string> cases[] = {
      {"", "none came"},
      {"GET / HTTP/1.1\r\n\r\n", "not baton credentials"},
      {whole.substr(0, whole.size() - 10), "cut-off key.pem"},
      {whole.substr(0, whole.find("ca.pem")) + "ca.pem lots\n", "bad size for ca.pem"},
  };
  for (const auto& [text, why] : cases) {
    const int fd = pipe_of(text);
    try {
      (void)internal::receive_credentials(fd, dir.path / "got");
      ADD_FAILURE() << "accepted: " << why;
    } catch (const UsageError& e) {
      EXPECT_THAT(e.what(), HasSubstr(why));
    }
    ::close(fd);
  }
}

TEST(Credentials, AnAgentGivenGarbageOnItsInputSaysSoAndExits) {
  TempDir dir;
  int in[2];
  ASSERT_EQ(::pipe2(in, O_CLOEXEC), 0);
  const std::string garbage = "\x01\x02garbage\n";
  ASSERT_EQ(::write(in[1], garbage.data(), garbage.size()), static_cast<ssize_t>(garbage.size()));
  ::close(in[1]);
  ::dup2(in[0], STDIN_FILENO);  // the child's standard input: the garbage
  ::close(in[0]);
  const test::SelfChild agent = test::start_self_as(
      BATON_HOST_BIN, "baton-host",
      {"--credentials", "-", "--advertise", "127.0.0.1", "--cache", dir.path.string()},
      test::environment({"BATON_"}), STDERR_FILENO);
  ::close(STDIN_FILENO);
  const std::string said = test::read_to_end(agent.from);
  int status = 0;
  ::waitpid(agent.pid, &status, 0);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 2);
  EXPECT_THAT(said, HasSubstr("not baton credentials"));
  // Nothing of it was kept.
  EXPECT_TRUE(std::filesystem::is_empty(dir.path)) << "the agent left files in its cache";
}

}  // namespace
}  // namespace baton
