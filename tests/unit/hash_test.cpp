#include "overlay/hash.hpp"

#include <gtest/gtest.h>

using namespace overlay;

TEST(Sha256, KnownVectors) {
  EXPECT_EQ(sha256_hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

TEST(Sha256, StreamingEqualsOneShot) {
  std::string data(1 << 20, 'x');
  for (std::size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>(i * 31 + 7);
  Sha256 h;
  for (std::size_t off = 0; off < data.size(); off += 4099)
    h.update(data.data() + off, std::min<std::size_t>(4099, data.size() - off));
  EXPECT_EQ(h.finish_hex(), sha256_hex(data));
}

TEST(Sha256, HexValidation) {
  EXPECT_TRUE(is_sha256_hex(sha256_hex("x")));
  EXPECT_FALSE(is_sha256_hex("abc"));
  EXPECT_FALSE(is_sha256_hex(std::string(64, 'g')));
}
