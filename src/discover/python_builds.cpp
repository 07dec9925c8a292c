// Python builds in place: setuptools' `build_ext --inplace`, plain or with torch's BuildExtension
// (torch/utils/cpp_extension.py: `BuildExtension.build_extensions` writes a compile-only
// build/temp.<plat>-<tag>/build.ninja, `build X.o: compile|cuda_compile <abs src>`, and links
// with setuptools). Every output stays on disk and is an artifact: the object under build/temp.*,
// the module under build/lib.*, and its in-place copy beside the sources. The build is run by an
// interpreter that can import what setup.py imports and builds modules of the same ABI.
#include <algorithm>
#include <cstring>
#include <map>

#include "overlay/error.hpp"
#include "overlay/file_ops.hpp"
#include "overlay/words.hpp"

#include "parts.hpp"

namespace overlay::discover_parts {
namespace {

// The object a temp dir holds for the target: named by its build.ninja (BuildExtension), else
// where setuptools puts it (the source's path below the project, or its absolute path with the
// leading '/' dropped, as distutils' object_filenames does).
std::optional<fs::path> temp_object(DiskReader& disk, const fs::path& temp, const fs::path& proj, const Target& t,
                                    std::string& why) {
  fs::path ninja = temp / "build.ninja";
  if (is_regular(disk, ninja)) {
    for (const auto& line : lines_of(read_small_file(disk, ninja, kMaxTextBytes))) {
      auto w = ninja_words(line);
      if (w.size() < 4 || w[0] != "build" || w[1].empty() || w[1].back() != ':') continue;
      if (!t.is(disk, resolve_in(temp, w[3]))) continue;
      why = ninja.string() + ": build " + w[1] + " " + w[2] + " " + w[3];
      return resolve_in(temp, w[1].substr(0, w[1].size() - 1));
    }
  }
  std::vector<fs::path> guesses;
  if (fs::path rel = t.relative_to(proj); !rel.empty()) guesses.push_back(temp / rel);
  guesses.push_back(temp / t.given.relative_path());
  for (auto g : guesses) {
    g.replace_extension(".o");
    if (disk.info(g, Follow::no).type == FileType::regular) {
      why = g.string() + ": setuptools' object for " + t.given.string();
      return g;
    }
  }
  return std::nullopt;
}

bool is_extension_module(const std::string& name) { return ends_with(name, ".so") || ends_with(name, ".pyd"); }

// Extension modules below `root` (relative paths), skipping build/ and hidden dirs, 6 levels deep.
std::vector<fs::path> modules_below(DiskReader& disk, const fs::path& root, bool skip_build) {
  std::vector<fs::path> out;
  if (!is_directory(disk, root)) return out;
  walk_tree(
      disk, root,
      [&](const fs::path& r, FileType type) {
        std::string top = r.begin()->string();
        if (type == FileType::directory)
          return ((skip_build && top == "build") || top[0] == '.' || std::distance(r.begin(), r.end()) > 6)
                     ? WalkStep::skip
                     : WalkStep::descend;
        if (type == FileType::regular && is_extension_module(r.filename().string())) out.push_back(r);
        return WalkStep::descend;
      },
      [](const fs::path&, const std::string&) {});
  return out;
}

// Whether `file` holds any of `needles` (its debug info or an assert names the source): a
// streaming scan, 1 MiB at a time.
bool file_mentions(DiskReader& disk, const fs::path& file, const std::vector<std::string>& needles) {
  std::unique_ptr<ReadHandle> in;
  try {
    in = disk.open_read(file);
  } catch (const DiskError&) {
    return false;
  }
  std::size_t keep = 0;
  for (const auto& n : needles) keep = std::max(keep, n.size());
  std::string buf;
  std::vector<char> chunk(1u << 20);
  for (std::size_t got; (got = in->read(chunk.data(), chunk.size())) > 0;) {
    buf.append(chunk.data(), got);
    for (const auto& n : needles)
      if (!n.empty() && buf.find(n) != std::string::npos) return true;
    if (buf.size() > keep) buf.erase(0, buf.size() - keep);
  }
  return false;
}

// The modules (relative to build/lib.*) that link the target's object: the only one, or those
// whose bytes name the source. Empty `certain` says it could not tell and kept them all.
std::vector<fs::path> linking_modules(DiskReader& disk, const fs::path& lib, const std::vector<fs::path>& mods,
                                      const Target& t, const fs::path& proj, std::string& why) {
  if (mods.size() <= 1) return mods;
  std::vector<std::string> needles = {t.given.string(), t.real.string()};
  if (fs::path rel = t.relative_to(proj); !rel.empty()) needles.push_back(rel.string());
  std::vector<fs::path> hit;
  for (const auto& m : mods)
    if (file_mentions(disk, lib / m, needles)) hit.push_back(m);
  if (!hit.empty()) {
    why = std::to_string(hit.size()) + " of " + std::to_string(mods.size()) + " modules name " +
          t.given.filename().string() + " in their bytes (debug info): only those are rebuilt";
    return hit;
  }
  why = "uncertain: " + std::to_string(mods.size()) +
        " modules and none names the source in its bytes (built without -g); all kept";
  return mods;
}

// ---- the interpreter ----

// The top-level modules a setup.py imports (`import a.b`, `from a.b import c`).
std::vector<std::string> setup_imports(const std::string& text) {
  std::vector<std::string> mods;
  for (auto l : lines_of(text)) {
    l.erase(0, l.find_first_not_of(" \t"));
    auto w = words_or_none(l);
    if (w.size() < 2 || (w[0] != "import" && w[0] != "from")) continue;
    std::string top = w[1].substr(0, w[1].find_first_of(".,"));
    if (!top.empty() && std::find(mods.begin(), mods.end(), top) == mods.end()) mods.push_back(top);
  }
  return mods;
}

// The import names of pyproject.toml's [build-system] requires (`torch>=2`, `scikit-build-core`).
std::vector<std::string> build_requires(const std::string& text) {
  std::vector<std::string> mods;
  auto at = text.find("requires");
  if (at == std::string::npos) return mods;
  auto open = text.find('[', at), close = text.find(']', at);
  if (open == std::string::npos || close == std::string::npos || close < open) return mods;
  std::string list = text.substr(open + 1, close - open - 1);
  for (std::size_t q = list.find_first_of("'\""); q != std::string::npos; q = list.find_first_of("'\"", q)) {
    std::size_t end = list.find(list[q], q + 1);
    if (end == std::string::npos) break;
    std::string name = list.substr(q + 1, end - q - 1);
    name = name.substr(0, name.find_first_of("<>=!~;[ "));
    std::replace(name.begin(), name.end(), '-', '_');
    std::transform(name.begin(), name.end(), name.begin(),
                   [](unsigned char ch) { return static_cast<char>(std::tolower(ch)); });
    if (name == "meson_python") name = "mesonpy";
    if (name == "scikit_build_core") name = "scikit_build_core";
    if (!name.empty()) mods.push_back(name);
    q = end + 1;
  }
  return mods;
}

struct Interpreter {
  std::string exe;         // sys.executable
  std::string ext_suffix;  // sysconfig EXT_SUFFIX
  bool imports_all = false;
};

std::optional<Interpreter> ask(const std::string& python, const std::vector<std::string>& mods, const fs::path& cwd) {
  std::string code =
      "import sys, sysconfig\nprint(sys.executable)\nprint(sysconfig.get_config_var('EXT_SUFFIX'))\n"
      "import importlib.util\nprint(all(importlib.util.find_spec(m) is not None for m in sys.argv[1:]))\n";
  Argv argv = {python, "-c", code};
  argv.insert(argv.end(), mods.begin(), mods.end());
  RunResult r = query(argv, cwd);
  auto lines = lines_of(r.out);
  if (!r.ok() || lines.size() < 3) return std::nullopt;
  return Interpreter{lines[0], lines[1], lines[2] == "True"};
}

// An interpreter that builds modules with the suffix the built ones have and finds every module
// the build imports: python3 on PATH, python3.X for the ABI tag, /usr/bin/python3; the why in
// `evidence`, and "uncertain" when none does both.
std::string pick_interpreter(const std::vector<fs::path>& built, const std::vector<std::string>& mods,
                             const fs::path& cwd, std::vector<std::string>& evidence) {
  std::string suffix;  // ".cpython-311-x86_64-linux-gnu.so" of the first built module
  for (const auto& b : built) {
    std::string n = b.filename().string();
    if (auto dot = n.find('.'); dot != std::string::npos && n.find('.', dot + 1) != std::string::npos) {
      suffix = n.substr(dot);
      break;
    }
  }
  std::vector<std::string> names = {"python3"};
  if (auto at = suffix.find("cpython-3"); at != std::string::npos) {
    std::string minor = suffix.substr(at + 9, suffix.find('-', at + 9) - at - 9);
    names.push_back("python3." + minor);
    names.push_back("/usr/bin/python3." + minor);
  }
  names.push_back("/usr/bin/python3");
  std::optional<Interpreter> fallback;
  std::vector<std::string> tried;
  for (const auto& n : names) {
    auto i = ask(n, mods, cwd);
    if (!i) continue;
    bool abi = suffix.empty() || i->ext_suffix == suffix;
    tried.push_back(i->exe + (abi ? "" : " (builds " + i->ext_suffix + ")") +
                    (i->imports_all ? "" : " (cannot import all)"));
    if (abi && i->imports_all) {
      evidence.push_back("interpreter " + i->exe + ": builds " + (suffix.empty() ? i->ext_suffix : suffix) +
                         " modules and finds " + (mods.empty() ? std::string("setuptools") : join_words(mods)));
      return i->exe;
    }
    if (!fallback || (abi && !fallback->imports_all)) fallback = i;
  }
  std::string all;
  for (const auto& x : tried) all += (all.empty() ? "" : ", ") + x;
  evidence.push_back("interpreter uncertain: none of " +
                     (all.empty() ? std::string("python3, /usr/bin/python3") : all) + " both builds " + suffix +
                     " modules and finds " + join_words(mods) + "; check build_cmds[0][0]");
  return fallback ? fallback->exe : "python3";
}

}  // namespace

std::optional<BuildCandidate> setuptools_candidate(DiskReader& disk, const fs::path& dir, const Target& t) {
  bool setup_py = is_regular(disk, dir / "setup.py");
  if (!setup_py && !is_regular(disk, dir / "pyproject.toml")) return std::nullopt;
  if (t.relative_to(dir).empty()) return std::nullopt;
  BuildCandidate c;
  bool torch_ninja = false;
  std::vector<fs::path> libs;  // build/lib.* dirs
  for (const auto& e : sorted_entries(disk, dir / "build")) {
    fs::path d = dir / "build" / e.name;
    if (e.name.rfind("lib.", 0) == 0) libs.push_back(d);
    if (e.name.rfind("temp.", 0) != 0) continue;
    std::string why;
    if (auto obj = temp_object(disk, d, dir, t, why)) {
      add_unique(c.artifacts, *obj);
      c.evidence.push_back(why);
      torch_ninja = torch_ninja || is_regular(disk, d / "build.ninja");
    }
  }
  if (c.artifacts.empty()) return std::nullopt;
  std::vector<fs::path> built;  // what the build links, and copies in place
  for (const auto& lib : libs) {
    std::string why;
    auto mods = linking_modules(disk, lib, modules_below(disk, lib, false), t, dir, why);
    if (!why.empty()) c.evidence.push_back(lib.string() + ": " + why);
    for (const auto& m : mods) {
      add_unique(c.artifacts, lib / m);
      built.push_back(lib / m);
      if (is_regular(disk, dir / m)) add_unique(c.artifacts, dir / m);  // build_ext --inplace's copy
    }
  }
  if (libs.empty())  // an older setuptools built in place only
    for (const auto& m : modules_below(disk, dir, true)) add_unique(c.artifacts, dir / m), built.push_back(dir / m);
  fs::path cfg = dir / (setup_py ? "setup.py" : "pyproject.toml");
  std::string text = read_small_file(disk, cfg, kMaxTextBytes);
  std::string py = pick_interpreter(built, setup_py ? setup_imports(text) : build_requires(text), dir, c.evidence);
  c.kind = torch_ninja ? "torch-setup" : "setuptools";
  c.build_cmds.push_back(setup_py ? Argv{py, "setup.py", "build_ext", "--inplace"}
                                  : Argv{py, "-c", "from setuptools import setup; setup()", "build_ext", "--inplace"});
  c.build_cwd = dir;
  c.evidence.push_back(cfg.string() + ": the project's in-place build" +
                       (torch_ninja ? " (torch BuildExtension: compiles with ninja, links with setuptools)" : ""));
  return c;
}

}  // namespace overlay::discover_parts
