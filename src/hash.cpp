#include "overlay/hash.hpp"

#include <algorithm>
#include <array>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <thread>

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
// 12 KiB config) is a fair share of a short invocation, and a file digest needs none of it; nor
// its cleanup at exit (freeing what the process's exit frees anyway).
const EVP_MD* sha256_md() {
  static const EVP_MD* md = [] {
    OPENSSL_init_crypto(OPENSSL_INIT_NO_LOAD_CONFIG | OPENSSL_INIT_NO_ADD_ALL_CIPHERS |
                            OPENSSL_INIT_NO_ADD_ALL_DIGESTS | OPENSSL_INIT_NO_ATEXIT,
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

struct ThreadedSha256::Impl {
  static constexpr std::size_t kSlots = 4, kChunk = 1 << 20;
  Sha256 hash;
  std::array<std::unique_ptr<char[]>, kSlots> bufs;
  std::array<std::size_t, kSlots> sizes{};
  std::uint64_t filled = 0, hashed = 0;  // chunks handed over / hashed
  std::size_t open_bytes = 0;            // bytes in the chunk being filled (slot filled % kSlots)
  bool closing = false;
  std::mutex m;
  std::condition_variable cv;
  std::thread worker;

  Impl() {
    for (auto& b : bufs) b.reset(new char[kChunk]);  // not zeroed: every byte is written first
    worker = std::thread([this] { run(); });
  }
  void run() {
    for (;;) {
      std::unique_lock<std::mutex> l(m);
      cv.wait(l, [&] { return hashed < filled || closing; });
      if (hashed == filled) return;
      const char* b = bufs[hashed % kSlots].get();
      std::size_t n = sizes[hashed % kSlots];
      l.unlock();
      hash.update(b, n);
      l.lock();
      ++hashed;
      cv.notify_all();
    }
  }
  // Hands the chunk being filled to the worker.
  void hand_over() {
    std::lock_guard<std::mutex> l(m);
    sizes[filled % kSlots] = open_bytes;
    ++filled;
    open_bytes = 0;
    cv.notify_all();
  }
  void stop() {
    {
      std::lock_guard<std::mutex> l(m);
      closing = true;
      cv.notify_all();
    }
    if (worker.joinable()) worker.join();
  }
};

ThreadedSha256::ThreadedSha256() : impl_(std::make_unique<Impl>()) {}

ThreadedSha256::~ThreadedSha256() { impl_->stop(); }

void ThreadedSha256::update(const void* data, std::size_t size) {
  const char* p = static_cast<const char*>(data);
  Impl& d = *impl_;
  while (size > 0) {
    if (d.open_bytes == 0) {  // a fresh chunk: wait until its slot has been hashed
      std::unique_lock<std::mutex> l(d.m);
      d.cv.wait(l, [&] { return d.filled - d.hashed < Impl::kSlots; });
    }
    std::size_t n = std::min(size, Impl::kChunk - d.open_bytes);
    std::memcpy(d.bufs[d.filled % Impl::kSlots].get() + d.open_bytes, p, n);
    d.open_bytes += n;
    p += n;
    size -= n;
    if (d.open_bytes == Impl::kChunk) d.hand_over();
  }
}

std::string ThreadedSha256::finish_hex() {
  if (impl_->open_bytes > 0) impl_->hand_over();
  impl_->stop();
  return impl_->hash.finish_hex();
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

std::string to_base64(std::string_view bytes) {
  std::string out(4 * ((bytes.size() + 2) / 3) + 1, '\0');
  int n = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                          reinterpret_cast<const unsigned char*>(bytes.data()), static_cast<int>(bytes.size()));
  out.resize(static_cast<std::size_t>(n));
  return out;
}

std::optional<std::string> from_base64(std::string_view text) {
  if (text.size() % 4 != 0) return std::nullopt;
  std::string out(3 * (text.size() / 4) + 1, '\0');
  int n = EVP_DecodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                          reinterpret_cast<const unsigned char*>(text.data()), static_cast<int>(text.size()));
  if (n < 0) return std::nullopt;
  // EVP_DecodeBlock counts the padding as zero bytes: take them off.
  std::size_t pad =
      text.size() >= 1 && text.back() == '=' ? (text.size() >= 2 && text[text.size() - 2] == '=' ? 2 : 1) : 0;
  out.resize(static_cast<std::size_t>(n) - pad);
  return out;
}

}  // namespace overlay
