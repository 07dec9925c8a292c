#pragma once
// Streaming SHA-256 through OpenSSL EVP.
#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

namespace overlay {

class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;

  void update(const void* data, std::size_t size);
  // Lower-case hex digest; the object cannot be updated afterwards.
  std::string finish_hex();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// A Sha256 computed on a thread of its own, for a caller with work of its own to do beside the
// hashing (reading an archive, creating files). update() copies the bytes into a ring of 1 MiB
// chunks — a copy costs a tenth of hashing them — and returns at once unless the ring is full;
// finish_hex() waits for the rest. One caller thread at a time.
class ThreadedSha256 {
 public:
  ThreadedSha256();
  ~ThreadedSha256();
  ThreadedSha256(const ThreadedSha256&) = delete;
  ThreadedSha256& operator=(const ThreadedSha256&) = delete;

  void update(const void* data, std::size_t size);
  std::string finish_hex();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// SHA-256 of a byte string, as lower-case hex.
std::string sha256_hex(std::string_view data);

// True when s is 64 lower- or upper-case hex digits.
bool is_sha256_hex(std::string_view s);

// Base64 (RFC 4648, padded) of any bytes, through OpenSSL's EVP_EncodeBlock.
std::string to_base64(std::string_view bytes);
// The bytes of a padded base64 text; nothing when it is not one.
std::optional<std::string> from_base64(std::string_view text);

}  // namespace overlay
