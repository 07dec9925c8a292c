#include "overlay/sitecustomize.hpp"

#include "overlay/file_ops.hpp"

namespace overlay {

bool ensure_sitecustomize(Disk& disk, const fs::path& overlay) {
  fs::path p = overlay / "sitecustomize.py";
  FileInfo fi = disk.info(p, Follow::no);
  if (fi.type == FileType::regular && fi.size == sitecustomize_text().size() &&
      read_small_file(disk, p, fi.size + 1) == sitecustomize_text())
    return false;
  write_file_atomically(disk, p, sitecustomize_text(), 0644);
  return true;
}

}  // namespace overlay
