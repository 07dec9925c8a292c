// libFuzzer target: manifest parsing and validation. Any input either is refused with a
// ManifestError or parses into a model whose serialization parses back to the same text.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "overlay/error.hpp"
#include "overlay/manifest.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string text(reinterpret_cast<const char*>(data), size);
  try {
    overlay::Manifest m = overlay::parse_manifest(text);
    std::string once = overlay::serialize_manifest(m);
    std::string twice = overlay::serialize_manifest(overlay::parse_manifest(once));
    if (once != twice) std::abort();
  } catch (const overlay::ManifestError&) {
  }
  return 0;
}
