// libFuzzer target: tar snapshot extraction. Whatever the archive, extraction either fails with
// an Error or succeeds, and nothing is ever created outside the destination directory.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "overlay/disk.hpp"
#include "overlay/error.hpp"
#include "overlay/file_ops.hpp"
#include "overlay/snapshot.hpp"

namespace fs = std::filesystem;

namespace {
const fs::path& jail() {
  static const fs::path dir = [] {
    std::string tmpl = (fs::temp_directory_path() / "overlay-tar-fuzz.XXXXXX").string();
    if (::mkdtemp(tmpl.data()) == nullptr) std::abort();
    return fs::path(tmpl);
  }();
  return dir;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  overlay::Disk& disk = overlay::real_disk();
  const fs::path& j = jail();
  fs::path tar = j / "in.tar", dest = j / "box" / "dest";
  {
    std::ofstream out(tar, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  }
  fs::create_directories(dest);
  try {
    overlay::extract_tar(disk, tar, dest, "dest", "");
  } catch (const overlay::Error&) {
  }
  // Only box/dest may exist below box/, and nothing new beside it in the jail.
  for (const auto& e : fs::directory_iterator(j / "box"))
    if (e.path().filename() != "dest") std::abort();
  for (const auto& e : fs::directory_iterator(j))
    if (e.path().filename() != "box" && e.path().filename() != "in.tar") std::abort();
  overlay::remove_tree(disk, j / "box");
  return 0;
}
