#pragma once
// The pieces `discover()` is made of: what every build system's finder shares (the target under
// its spellings, read-only queries, text helpers), and one finder per build system, each in its
// own file. Internal to src/discover/.
#include <optional>
#include <string>
#include <vector>

#include "overlay/build_watch.hpp"  // is_shared_library_name: dependents are relinked, not rebuilt
#include "overlay/discover.hpp"
#include "overlay/process.hpp"

namespace overlay::discover_parts {

constexpr std::size_t kMaxTextBytes = 16u << 20;  // build.ninja, compile_commands.json, config.yaml

// The file as given (absolute) and as it really is: build graphs may name either.
struct Target {
  fs::path given, real;
  bool is(DiskReader& disk, const fs::path& p) const;
  // Every spelling a build run from `dir` may use for it.
  std::vector<std::string> spellings(const fs::path& dir) const;
  // Its path below `dir` (as given, else as it really is); empty when it is not below.
  fs::path relative_to(const fs::path& dir) const;
  bool is_header() const;
};

// A read-only query (output captured, 120 s at most).
RunResult query(const Argv& argv, const fs::path& cwd = {});
std::vector<std::string> lines_of(const std::string& text);
// The words of a build.ninja line: split at unescaped spaces, `$ ` `$:` `$$` unescaped.
std::vector<std::string> ninja_words(const std::string& line);
// split_words, or nothing for a line it cannot split (an unbalanced quote).
std::vector<std::string> words_or_none(const std::string& line);
// `p` when absolute, else `dir / p`, lexically normal.
fs::path resolve_in(const fs::path& dir, const std::string& p);
bool ends_with(const std::string& s, const std::string& suffix);
bool is_regular(DiskReader& disk, const fs::path& p);
bool is_directory(DiskReader& disk, const fs::path& p);
bool is_file_or_absent(DiskReader& disk, const fs::path& p);
// The entries of a directory, sorted by name; none when it cannot be listed.
std::vector<DirEntry> sorted_entries(DiskReader& disk, const fs::path& dir);
void add_unique(std::vector<fs::path>& v, const fs::path& p);
// Newest mtime (ns) among the files that exist; 0 when none does.
std::int64_t newest_mtime_ns(DiskReader& disk, const std::vector<fs::path>& files);

// ---- one finder per build system; each looks at one ancestor `dir` of the target ----

// ninja.cpp: build dirs holding build.ninja at or beside `dir` (build*, out, _build, the dirs the
// compile database names); and the candidate one of them makes (ninja, cmake or meson).
std::vector<fs::path> ninja_dirs_at(DiskReader& disk, const fs::path& dir, const Target& t);
std::optional<BuildCandidate> ninja_candidate(DiskReader& disk, const fs::path& dir, const Target& t);

// cmake_makefiles.cpp: CMake build dirs of the Makefiles generators at or beside `dir`, and the
// candidate CMake's own rules (CMakeFiles/*.dir/build.make, compiler_depend.make) make there.
std::vector<fs::path> cmake_makefile_dirs_at(DiskReader& disk, const fs::path& dir);
std::optional<BuildCandidate> cmake_makefiles_candidate(DiskReader& disk, const fs::path& dir, const Target& t);

// make.cpp
bool has_makefile(DiskReader& disk, const fs::path& dir);
std::optional<BuildCandidate> make_candidate(DiskReader& disk, const fs::path& dir, const Target& t);

// python_builds.cpp: setuptools / torch BuildExtension in place (setup.py, pyproject.toml).
std::optional<BuildCandidate> setuptools_candidate(DiskReader& disk, const fs::path& dir, const Target& t);
// python_editables.cpp: editable installs (meson-python, scikit-build-core) whose loader module
// on sys.path names a build dir that may lie anywhere.
struct EditableBuild {
  std::string kind;  // meson-python | scikit-build
  fs::path loader, build_dir, install_dir;
  std::vector<fs::path> installed;  // the installed copies the loader names (scikit-build-core)
};
// The absolute dirs on sys.path of python3 on PATH and of /usr/bin/python3.
std::vector<fs::path> python_path_dirs(DiskReader& disk);
std::vector<EditableBuild> editable_builds(DiskReader& disk, const fs::path& dir);
// Makes the candidate found in b.build_dir the editable install's: kind, evidence, and for
// scikit-build-core the build and install commands and the installed copies.
void adopt_editable(DiskReader& disk, const EditableBuild& b, BuildCandidate& c);

// config.cpp: the pipeline's task config (config.yaml with compile_command).
std::optional<BuildCandidate> config_candidate(DiskReader& disk, const fs::path& dir);

// jit_caches.cpp: the JIT cache roots and the candidates found in them (torch, aiter).
std::vector<fs::path> jit_roots(DiskReader& disk, const DiscoverRequest& req, const Target& t);
void jit_candidates(DiskReader& disk, const fs::path& root, const Target& t, std::vector<BuildCandidate>& out);

// headers.cpp: for a header compiled under rules without depfiles, the objects of a build.ninja
// whose sources include it (by name, followed through the sources' own includes).
std::vector<std::string> objects_including(DiskReader& disk, const fs::path& build_ninja, const Target& t,
                                           std::string& evidence);

}  // namespace overlay::discover_parts
