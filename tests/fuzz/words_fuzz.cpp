// libFuzzer target: the POSIX word splitter. Any input is split or refused with an Error; a
// split joined back (quoted) splits to the same words.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "overlay/error.hpp"
#include "overlay/words.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string line(reinterpret_cast<const char*>(data), size);
  try {
    auto words = overlay::split_words(line);
    if (overlay::split_words(overlay::join_words(words)) != words) std::abort();
  } catch (const overlay::Error&) {
  }
  return 0;
}
