// Editable installs whose build dir lies anywhere (not necessarily above the file): found by the
// loader module the install put on sys.path.
// * meson-python (mesonpy/__init__.py, `_EditableWheelBuilder`): `_<dist>_editable_loader.py`,
//   mesonpy/_editable.py followed by `install({top-level names}, '<build dir>', ['ninja', …],
//   verbose)`; the finder runs that command in the build dir on every import.
// * scikit-build-core (build/_editable.py `editable_redirect`): `_<name>_editable.py`
//   (`_editable_skbc_<name>.py` from 1.0), resources/_editable_redirect.py followed by
//   `install(known_source_files, known_wheel_files, '<build dir>', rebuild, verbose,
//   build_options, install_options, '<install dir>')`; a rebuild is `cmake --build .` then
//   `cmake --install . --prefix <install dir>` there. The wheel files are installed copies.
#include <algorithm>
#include <cstdlib>

#include "overlay/file_ops.hpp"

#include "parts.hpp"

namespace overlay::discover_parts {
namespace {

// The string literals of a Python call's arguments, in order ('…' or "…", backslash escapes kept
// verbatim but for \\ and the quote).
std::vector<std::string> string_literals(const std::string& text) {
  std::vector<std::string> out;
  for (std::size_t i = 0; i < text.size(); ++i) {
    char q = text[i];
    if (q != '\'' && q != '"') continue;
    std::string s;
    for (++i; i < text.size() && text[i] != q; ++i) {
      if (text[i] == '\\' && i + 1 < text.size()) ++i;
      s += text[i];
    }
    out.push_back(s);
  }
  return out;
}

bool is_loader_name(const std::string& n, std::string& kind) {
  if (!ends_with(n, ".py") || n.empty() || n[0] != '_') return false;
  if (ends_with(n, "_editable_loader.py"))
    kind = "meson-python";
  else if (n.rfind("_editable_skbc_", 0) == 0 || ends_with(n, "_editable.py"))
    kind = "scikit-build";
  else
    return false;
  return true;
}

}  // namespace

std::vector<fs::path> python_path_dirs(DiskReader& disk) {
  std::vector<fs::path> dirs;
  for (const char* py : {"python3", "/usr/bin/python3"}) {
    RunResult r = query({py, "-c", "import sys\nfor p in sys.path: print(p)"});
    if (!r.ok()) continue;
    for (const auto& l : lines_of(r.out))
      if (!l.empty() && l[0] == '/' && is_directory(disk, l)) add_unique(dirs, fs::path(l).lexically_normal());
  }
  return dirs;
}

std::vector<EditableBuild> editable_builds(DiskReader& disk, const fs::path& dir) {
  std::vector<EditableBuild> out;
  for (const auto& e : sorted_entries(disk, dir)) {
    EditableBuild b;
    if (!is_loader_name(e.name, b.kind) || !is_regular(disk, dir / e.name)) continue;
    b.loader = dir / e.name;
    std::string text = read_small_file(disk, b.loader, kMaxTextBytes);
    auto call = text.rfind("\ninstall(");
    if (call == std::string::npos) continue;
    for (const auto& s : string_literals(text.substr(call))) {
      if (s.empty() || s[0] != '/') continue;
      fs::path p = fs::path(s).lexically_normal();
      bool build_dir = is_regular(disk, p / "build.ninja");
      if (b.build_dir.empty() && build_dir)
        b.build_dir = p;
      else if (!b.build_dir.empty() && is_directory(disk, p))
        b.install_dir = p;  // skbc's last argument
      else if (is_regular(disk, p) && is_shared_library_name(p))
        b.installed.push_back(p);
    }
    if (!b.build_dir.empty()) out.push_back(std::move(b));
  }
  return out;
}

void adopt_editable(DiskReader& disk, const EditableBuild& b, BuildCandidate& c) {
  c.kind = b.kind;
  c.evidence.push_back(b.loader.string() + ": an editable install (" + b.kind + ") that builds in " +
                       b.build_dir.string() + (b.kind == "meson-python" ? " (again on every import)" : ""));
  if (b.kind != "scikit-build") return;
  c.build_cmds = {{"cmake", "--build", b.build_dir.string()}};
  if (b.install_dir.empty()) return;
  c.build_cmds.push_back({"cmake", "--install", b.build_dir.string(), "--prefix", b.install_dir.string()});
  for (const auto& p : b.installed)
    if (std::any_of(c.artifacts.begin(), c.artifacts.end(),
                    [&](const fs::path& a) { return a.filename() == p.filename(); }) &&
        is_regular(disk, p))
      add_unique(c.artifacts, p);
}

}  // namespace overlay::discover_parts
