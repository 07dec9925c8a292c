#pragma once
// The generated sitecustomize.py: the project's own Python text (share/overlay/sitecustomize.py,
// embedded at build time), written into each overlay.
#include <string>

#include "overlay/disk.hpp"

namespace overlay {

// The exact text the binary writes.
const std::string& sitecustomize_text();

// Writes <overlay>/sitecustomize.py atomically unless it already holds exactly our text.
// Returns true when it wrote. Never touches the manifest.
bool ensure_sitecustomize(Disk& disk, const fs::path& overlay);

}  // namespace overlay
