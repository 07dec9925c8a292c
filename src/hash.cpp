#include "overlay/hash.hpp"

#include <openssl/crypto.h>
#include <openssl/evp.h>

#include "overlay/error.hpp"

namespace overlay {

struct Sha256::Impl {
  EVP_MD_CTX* ctx = nullptr;
};

namespace {

// SHA-256 from the default provider, fetched once. OpenSSL is initialised without reading
// openssl.cnf and without registering every cipher and digest: that work (≈ 1 ms, parsing a
// 12 KiB config) is a fair share of a short invocation, and a file digest needs none of it.
const EVP_MD* sha256_md() {
  static const EVP_MD* md = [] {
    OPENSSL_init_crypto(OPENSSL_INIT_NO_LOAD_CONFIG | OPENSSL_INIT_NO_ADD_ALL_CIPHERS | OPENSSL_INIT_NO_ADD_ALL_DIGESTS,
                        nullptr);
    const EVP_MD* fetched = EVP_MD_fetch(nullptr, "SHA256", nullptr);
    return fetched != nullptr ? fetched : EVP_sha256();
  }();
  return md;
}

}  // namespace

Sha256::Sha256() : impl_(std::make_unique<Impl>()) {
  impl_->ctx = EVP_MD_CTX_new();
  if (impl_->ctx == nullptr || EVP_DigestInit_ex(impl_->ctx, sha256_md(), nullptr) != 1)
    throw Error("sha256: cannot initialise OpenSSL digest");
}

Sha256::~Sha256() { EVP_MD_CTX_free(impl_->ctx); }

void Sha256::update(const void* data, std::size_t size) {
  if (EVP_DigestUpdate(impl_->ctx, data, size) != 1) throw Error("sha256: digest update failed");
}

std::string Sha256::finish_hex() {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (EVP_DigestFinal_ex(impl_->ctx, md, &len) != 1) throw Error("sha256: digest final failed");
  static const char* digits = "0123456789abcdef";
  std::string hex;
  hex.reserve(len * 2);
  for (unsigned int i = 0; i < len; ++i) {
    hex.push_back(digits[md[i] >> 4]);
    hex.push_back(digits[md[i] & 0xf]);
  }
  return hex;
}

std::string sha256_hex(std::string_view data) {
  Sha256 h;
  h.update(data.data(), data.size());
  return h.finish_hex();
}

bool is_sha256_hex(std::string_view s) {
  if (s.size() != 64) return false;
  for (char c : s) {
    bool hex = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
    if (!hex) return false;
  }
  return true;
}

}  // namespace overlay
