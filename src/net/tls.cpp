// Per-job certificates for TLS links (OpenSSL), and the TLS context a link uses.

#include <openssl/ec.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <sys/stat.h>

#include <cstdio>
#include <memory>
#include <stdexcept>
#include <string>

#include "baton/net/link.hpp"

namespace baton::net {
namespace {

struct KeyFree {
  void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};
struct CertFree {
  void operator()(X509* c) const { X509_free(c); }
};
using Key = std::unique_ptr<EVP_PKEY, KeyFree>;
using Cert = std::unique_ptr<X509, CertFree>;

[[noreturn]] void fail(const std::string& what) {
  throw std::runtime_error("cannot make the job's TLS certificates: " + what);
}

Key new_key() {
  Key key(EVP_EC_gen("P-256"));
  if (!key) fail("EC key generation failed");
  return key;
}

void add_ext(X509* cert, X509* issuer, int nid, const char* value) {
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, issuer, cert, nullptr, nullptr, 0);
  X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, &ctx, nid, value);
  if (ext == nullptr) fail("bad certificate extension");
  X509_add_ext(cert, ext, -1);
  X509_EXTENSION_free(ext);
}

Cert new_cert(EVP_PKEY* key, const char* cn, X509* issuer, EVP_PKEY* issuer_key, long serial,
              int days, bool ca) {
  Cert cert(X509_new());
  if (!cert) fail("X509_new failed");
  X509_set_version(cert.get(), 2);
  ASN1_INTEGER_set(X509_get_serialNumber(cert.get()), serial);
  X509_gmtime_adj(X509_getm_notBefore(cert.get()), -3600);
  X509_gmtime_adj(X509_getm_notAfter(cert.get()), 60L * 60 * 24 * days);
  X509_set_pubkey(cert.get(), key);
  X509_NAME* name = X509_get_subject_name(cert.get());
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, reinterpret_cast<const unsigned char*>(cn),
                             -1, -1, 0);
  X509* by = issuer != nullptr ? issuer : cert.get();
  X509_set_issuer_name(cert.get(), X509_get_subject_name(by));
  if (ca) {
    add_ext(cert.get(), by, NID_basic_constraints, "critical,CA:TRUE");
    add_ext(cert.get(), by, NID_key_usage, "critical,keyCertSign,cRLSign");
  } else {
    add_ext(cert.get(), by, NID_basic_constraints, "critical,CA:FALSE");
    add_ext(cert.get(), by, NID_ext_key_usage, "serverAuth,clientAuth");
  }
  if (X509_sign(cert.get(), issuer_key != nullptr ? issuer_key : key, EVP_sha256()) == 0) {
    fail("signing failed");
  }
  return cert;
}

void write_pem(const std::string& path, X509* cert, EVP_PKEY* key) {
  FILE* f = std::fopen(path.c_str(), "w");
  if (f == nullptr) fail("cannot write " + path);
  if (key != nullptr) ::fchmod(::fileno(f), 0600);
  const int ok = cert != nullptr
                     ? PEM_write_X509(f, cert)
                     : PEM_write_PrivateKey(f, key, nullptr, nullptr, 0, nullptr, nullptr);
  std::fclose(f);
  if (ok == 0) fail("cannot write " + path);
}

}  // namespace

TlsOptions make_job_certificates(const std::string& dir, int days) {
  Key ca_key = new_key();
  Cert ca = new_cert(ca_key.get(), "baton job CA", nullptr, nullptr, 1, days, true);
  Key key = new_key();
  Cert cert = new_cert(key.get(), "baton job", ca.get(), ca_key.get(), 2, days, false);
  TlsOptions t{dir + "/cert.pem", dir + "/key.pem", dir + "/ca.pem"};
  write_pem(t.ca_file, ca.get(), nullptr);
  write_pem(t.cert_file, cert.get(), nullptr);
  write_pem(t.key_file, nullptr, key.get());
  return t;
}

}  // namespace baton::net
