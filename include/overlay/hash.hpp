#pragma once
// Streaming SHA-256 through OpenSSL EVP.
#include <cstddef>
#include <memory>
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

// SHA-256 of a byte string, as lower-case hex.
std::string sha256_hex(std::string_view data);

// True when s is 64 lower- or upper-case hex digits.
bool is_sha256_hex(std::string_view s);

}  // namespace overlay
