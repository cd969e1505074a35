// TLS on TCP links: per-job certificates, mutual verification against the job's CA, refusal
// of a peer from another CA and of a peer that speaks plaintext; the link's own record layer
// against OpenSSL's (each reads the other's records), and against a peer that forges a record,
// sends bytes that are no record, or sends a key update. Waits are on conditions with a generous
// deadline.

#include <arpa/inet.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <openssl/ssl.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <deque>
#include <filesystem>
#include <mutex>

#include "baton/net/link.hpp"
#include "net/inbox.test.hpp"
#include "net/link_impl.hpp"
#include "net/tls_session.hpp"

namespace baton::net {
namespace {

using namespace std::chrono_literals;
using ::testing::HasSubstr;

using testing::Inbox;
using testing::make;

/// A directory of its own for one job's certificates, removed afterwards.
struct JobDir {
  std::filesystem::path path;
  JobDir() {
    std::string t = (std::filesystem::temp_directory_path() / "baton-tls-XXXXXX").string();
    if (::mkdtemp(t.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    path = t;
  }
  ~JobDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path, ignored);
  }
};

LinkOptions options_for(const TlsOptions& tls, const std::string& secret) {
  LinkOptions o;
  o.tls = tls;
  o.secret = secret;
  o.dead_after = 5s;
  return o;
}

TEST(Tls, JobCertificatesAreWrittenWithAPrivateKey) {
  JobDir dir;
  const TlsOptions t = make_job_certificates(dir.path.string());
  EXPECT_TRUE(t.enabled());
  for (const auto& f : {t.ca_file, t.cert_file, t.key_file}) {
    EXPECT_TRUE(std::filesystem::exists(f)) << f;
  }
  struct stat st {};
  ASSERT_EQ(::stat(t.key_file.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
}

TEST(Tls, PeersOfOneJobExchangeFramesBothWaysOverTls) {
  JobDir dir;
  const TlsOptions tls = make_job_certificates(dir.path.string());
  const std::string secret = new_job_secret();
  IoThread io;
  Inbox server_in;
  auto listener = Listener::listen(
      io, Address::parse("tcp://127.0.0.1:0"),
      [&](const std::shared_ptr<Link>& link) {
        return server_in.handler([weak = std::weak_ptr<Link>(link)](Envelope& env) {
          if (auto l = weak.lock()) l->send(env);  // echo
        });
      },
      options_for(tls, secret));
  Inbox client_in;
  auto client =
      Link::connect(io, listener->address(), client_in.handler(), options_for(tls, secret));
  constexpr std::uint64_t kCount = 50;
  for (std::uint64_t i = 0; i < kCount; ++i) {
    ASSERT_TRUE(client->send(make(i, i % 10 == 0 ? (1 << 20) : 100 + i)));
  }
  ASSERT_TRUE(client_in.wait_envelopes(kCount));
  std::lock_guard lock(client_in.mu);
  for (std::uint64_t i = 0; i < kCount; ++i) {
    ASSERT_EQ(client_in.envelopes[i].dest.port, i);
    const auto [n, bytes] = decode<std::tuple<int, Bytes>>(client_in.envelopes[i].body);
    ASSERT_EQ(n, static_cast<int>(i));
    ASSERT_EQ(bytes.size(), i % 10 == 0 ? std::size_t{1} << 20 : 100 + i);
  }
  EXPECT_TRUE(client_in.closed.empty());
}

TEST(Tls, APeerWithACertificateFromAnotherCaIsRefused) {
  JobDir ours_dir;
  JobDir theirs_dir;
  const TlsOptions ours = make_job_certificates(ours_dir.path.string());
  const TlsOptions theirs = make_job_certificates(theirs_dir.path.string());
  const std::string secret = new_job_secret();  // even with the secret: the CA decides
  IoThread io;
  Inbox server_in;
  auto listener = Listener::listen(
      io, Address::parse("tcp://127.0.0.1:0"),
      [&](const std::shared_ptr<Link>&) { return server_in.handler(); }, options_for(ours, secret));
  Inbox client_in;
  auto client =
      Link::connect(io, listener->address(), client_in.handler(), options_for(theirs, secret));
  // Queued, or refused at once if the handshake has already failed: either way it never lands.
  (void)client->send(make(1, 10));
  EXPECT_THAT(client_in.wait_closed(), HasSubstr("TLS handshake"));
  EXPECT_THAT(server_in.wait_closed(), HasSubstr("TLS handshake"));
  EXPECT_EQ(server_in.count(), 0u);
}

TEST(Tls, APlaintextPeerIsRefused) {
  JobDir dir;
  const TlsOptions tls = make_job_certificates(dir.path.string());
  IoThread io;
  Inbox server_in;
  auto listener = Listener::listen(
      io, Address::parse("tcp://127.0.0.1:0"),
      [&](const std::shared_ptr<Link>&) { return server_in.handler(); }, options_for(tls, {}));
  // A dialler without TLS: its frames are not a TLS handshake.
  Inbox client_in;
  LinkOptions plain;
  plain.dead_after = 5s;
  plain.reconnect_for = 300ms;
  auto client = Link::connect(io, listener->address(), client_in.handler(), plain);
  (void)client->send(make(1, 10));  // false if the refusal came first
  EXPECT_THAT(server_in.wait_closed(), HasSubstr("TLS handshake"));
  EXPECT_EQ(server_in.count(), 0u);
  // The server hangs up on every try before it answers: the dialler backs off and gives up at
  // the repair's deadline, not redial for ever.
  EXPECT_THAT(client_in.wait_closed(), HasSubstr("not restored within 300 ms"));
}

TEST(Tls, UnixLinksNeverUseTls) {
  JobDir dir;
  const TlsOptions tls = make_job_certificates(dir.path.string());
  IoThread io;
  Inbox server_in;
  const std::string path = (dir.path / "unix.sock").string();
  auto listener = Listener::listen(
      io, Address::parse("unix://" + path),
      [&](const std::shared_ptr<Link>&) { return server_in.handler(); }, options_for(tls, {}));
  // A plain dialler is understood: TLS is for links that leave the host.
  Inbox client_in;
  auto client = Link::connect(io, listener->address(), client_in.handler());
  ASSERT_TRUE(client->send(make(1, 10)));
  ASSERT_TRUE(server_in.wait_envelopes(1));
}

/// A TLS peer made with OpenSSL alone, over a blocking TCP socket: OpenSSL's own record layer
/// both ways, and bytes written under it at will.
class OpenSslPeer {
 public:
  OpenSslPeer(const TlsOptions& tls, const Address& to)
      : ctx_(internal::make_tls_context(tls)), fd_(::socket(AF_INET, SOCK_STREAM, 0)) {
    ::signal(SIGPIPE, SIG_IGN);  // OpenSSL writes with write(2); a closed peer must not kill us
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<std::uint16_t>(to.port));
    ::inet_pton(AF_INET, to.host.c_str(), &addr.sin_addr);
    if (::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
      throw std::runtime_error("connect failed");
    }
    ssl_ = SSL_new(ctx_.get());
    SSL_set_fd(ssl_, fd_);
    if (SSL_connect(ssl_) != 1) throw std::runtime_error("TLS handshake failed");
  }
  ~OpenSslPeer() {
    SSL_free(ssl_);
    ::close(fd_);
  }
  OpenSslPeer(const OpenSslPeer&) = delete;
  OpenSslPeer& operator=(const OpenSslPeer&) = delete;

  void write(const std::string& bytes) {
    ASSERT_EQ(SSL_write(ssl_, bytes.data(), static_cast<int>(bytes.size())),
              static_cast<int>(bytes.size()));
  }
  /// Bytes written on the socket under TLS, as no record layer would.
  void write_raw(const std::string& bytes) {
    ASSERT_EQ(::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL),
              static_cast<ssize_t>(bytes.size()));
  }
  /// The next frame, through OpenSSL's reading of the link's records.
  Envelope read_frame() {
    std::byte prefix[4];
    read_exactly(prefix, sizeof prefix);
    std::string header(decode_header_length(prefix), '\0');
    read_exactly(header.data(), header.size());
    Envelope env;
    for (const std::uint64_t n : decode_header(header, env)) {
      std::vector<std::byte> part(n);
      read_exactly(part.data(), part.size());
      env.body.parts.push_back(Bytes::adopt(std::move(part)));
    }
    return env;
  }
  SSL* ssl() { return ssl_; }

 private:
  void read_exactly(void* data, std::size_t n) {
    auto* at = static_cast<char*>(data);
    while (n > 0) {
      const int got = SSL_read(ssl_, at, static_cast<int>(n));
      if (got <= 0) throw std::runtime_error("the link closed the connection");
      at += got;
      n -= static_cast<std::size_t>(got);
    }
  }

  std::shared_ptr<SSL_CTX> ctx_;
  int fd_;
  SSL* ssl_ = nullptr;
};

struct RecordFixture : ::testing::Test {
  JobDir dir;
  TlsOptions tls = make_job_certificates(dir.path.string());
  IoThread io;
  Inbox server_in;
  std::shared_ptr<Listener> listener = Listener::listen(
      io, Address::parse("tcp://127.0.0.1:0"),
      [this](const std::shared_ptr<Link>& link) {
        return server_in.handler([weak = std::weak_ptr<Link>(link)](Envelope& env) {
          if (auto l = weak.lock()) l->send(env);  // echo
        });
      },
      options_for(tls, {}));

  /// Envelope `i` as the `i`th frame the link gets (its sequence number from 0).
  static std::string frame(std::uint64_t i, std::size_t part) {
    Envelope env = make(i, part);
    env.seq = i - 1;
    return encode_frame(env).flatten();
  }
};

TEST_F(RecordFixture, TheLinksRecordsAndOpenSslsReadEachOther) {
  OpenSslPeer peer(tls, listener->address());
  // OpenSSL seals: one record with several frames, and a frame over many records.
  peer.write(frame(1, 10) + frame(2, 300));
  peer.write(frame(3, 100000));
  // The link seals its echoes; OpenSSL opens them.
  std::vector<std::uint64_t> ports;
  while (ports.size() < 3) {
    const Envelope env = peer.read_frame();
    if (env.dest.port == 0) continue;  // the link's own control frames (acknowledgements)
    ports.push_back(env.dest.port);
    const auto [n, bytes] = decode<std::tuple<int, Bytes>>(env.body);
    EXPECT_EQ(n, static_cast<int>(env.dest.port));
    const std::size_t want = env.dest.port == 1 ? 10 : env.dest.port == 2 ? 300 : 100000;
    ASSERT_EQ(bytes.size(), want);
    EXPECT_EQ(static_cast<char>(bytes.data()[want - 1]),
              static_cast<char>('a' + env.dest.port % 26));
  }
  EXPECT_EQ(ports, (std::vector<std::uint64_t>{1, 2, 3}));
  EXPECT_TRUE(server_in.wait_envelopes(3));  // each is echoed just before the inbox has it
}

TEST_F(RecordFixture, AForgedRecordClosesTheLinkAndNothingOfItIsDelivered) {
  OpenSslPeer peer(tls, listener->address());
  peer.write(frame(1, 10));
  ASSERT_TRUE(server_in.wait_envelopes(1));
  // A record of the right shape whose bytes were not sealed with the connection's key.
  std::string forged = "\x17\x03\x03";
  forged += static_cast<char>(0);
  forged += static_cast<char>(64);
  forged += std::string(64, 'x');
  peer.write_raw(forged);
  EXPECT_THAT(server_in.wait_closed(), HasSubstr("failed its integrity check"));
  EXPECT_EQ(server_in.count(), 1u);
}

TEST_F(RecordFixture, BytesThatAreNoRecordCloseTheLinkSayingSo) {
  OpenSslPeer peer(tls, listener->address());
  peer.write_raw("GET / HTTP/1.1\r\n\r\n");
  EXPECT_THAT(server_in.wait_closed(), HasSubstr("not a TLS 1.3 record"));
  EXPECT_EQ(server_in.count(), 0u);
}

TEST_F(RecordFixture, AKeyUpdateAfterTheHandshakeClosesTheLinkSayingWhatItWas) {
  OpenSslPeer peer(tls, listener->address());
  peer.write(frame(1, 10));
  ASSERT_TRUE(server_in.wait_envelopes(1));
  ASSERT_EQ(SSL_key_update(peer.ssl(), SSL_KEY_UPDATE_NOT_REQUESTED), 1);
  peer.write(frame(2, 10));  // goes after the key update, under the new key
  EXPECT_THAT(server_in.wait_closed(), HasSubstr("key update"));
  EXPECT_EQ(server_in.count(), 1u);
}

TEST_F(RecordFixture, ACloseNotifyEndsTheConnectionAsTheEndOfTheStreamDoes) {
  auto peer = std::make_unique<OpenSslPeer>(tls, listener->address());
  peer->write(frame(1, 10));
  ASSERT_TRUE(server_in.wait_envelopes(1));
  ASSERT_GE(SSL_shutdown(peer->ssl()), 0);  // close_notify, the socket still open
  EXPECT_THAT(server_in.wait_closed(), HasSubstr("peer closed"));
}

}  // namespace
}  // namespace baton::net
