// What every build system's finder shares: the target, read-only queries, text helpers.
#include <algorithm>
#include <sstream>

#include "overlay/error.hpp"
#include "overlay/words.hpp"

#include "parts.hpp"

namespace overlay::discover_parts {

bool Target::is(DiskReader& disk, const fs::path& p) const {
  if (p == given || p == real) return true;
  if (p.filename() != given.filename() && p.filename() != real.filename()) return false;  // cheap: most never match
  FileInfo fi = disk.info(p, Follow::yes);
  return fi.type == FileType::regular && disk.real_path(p) == real;
}

std::vector<std::string> Target::spellings(const fs::path& dir) const {
  std::vector<std::string> out;
  for (const auto& p : {given, real}) {
    for (const auto& s : {p.string(), p.lexically_relative(dir).string()})
      if (!s.empty() && std::find(out.begin(), out.end(), s) == out.end()) out.push_back(s);
  }
  return out;
}

fs::path Target::relative_to(const fs::path& dir) const {
  for (const auto& p : {given, real}) {
    fs::path rel = p.lexically_relative(dir);
    if (!rel.empty() && *rel.begin() != "..") return rel;
  }
  return {};
}

bool Target::is_header() const {
  static const std::vector<std::string> kHeaders = {".h", ".hpp", ".hh", ".hxx", ".cuh", ".inl", ".inc", ".ipp"};
  std::string ext = given.extension().string();
  return std::find(kHeaders.begin(), kHeaders.end(), ext) != kHeaders.end();
}

RunResult query(const Argv& argv, const fs::path& cwd) {
  RunOptions o;
  o.output = Output::capture;
  o.cwd = cwd;
  o.timeout_s = 120;
  return run_process(argv, o);
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) out.push_back(l);
  return out;
}

std::vector<std::string> ninja_words(const std::string& line) {
  std::vector<std::string> out;
  std::string w;
  for (std::size_t i = 0; i < line.size(); ++i) {
    char ch = line[i];
    if (ch == '$' && i + 1 < line.size() && (line[i + 1] == ' ' || line[i + 1] == ':' || line[i + 1] == '$')) {
      w += line[++i];
    } else if (ch == ' ' || ch == '\t') {
      if (!w.empty()) out.push_back(w);
      w.clear();
    } else {
      w += ch;
    }
  }
  if (!w.empty()) out.push_back(w);
  return out;
}

std::vector<std::string> words_or_none(const std::string& line) {
  try {
    return split_words(line);
  } catch (const Error&) {
    return {};
  }
}

fs::path resolve_in(const fs::path& dir, const std::string& p) {
  fs::path f = p;
  return (f.is_absolute() ? f : dir / f).lexically_normal();
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

bool is_regular(DiskReader& disk, const fs::path& p) { return disk.info(p, Follow::yes).type == FileType::regular; }
bool is_directory(DiskReader& disk, const fs::path& p) { return disk.info(p, Follow::yes).type == FileType::directory; }

bool is_file_or_absent(DiskReader& disk, const fs::path& p) {
  FileInfo fi = disk.info(p, Follow::no);
  return !fi.exists() || fi.type == FileType::regular;
}

std::vector<DirEntry> sorted_entries(DiskReader& disk, const fs::path& dir) {
  std::vector<DirEntry> entries;
  try {
    entries = disk.list_dir(dir);
  } catch (const DiskError&) {
    return {};
  }
  std::sort(entries.begin(), entries.end(), [](const DirEntry& a, const DirEntry& b) { return a.name < b.name; });
  return entries;
}

void add_unique(std::vector<fs::path>& v, const fs::path& p) {
  if (std::find(v.begin(), v.end(), p) == v.end()) v.push_back(p);
}

std::int64_t newest_mtime_ns(DiskReader& disk, const std::vector<fs::path>& files) {
  std::int64_t newest = 0;
  for (const auto& f : files) {
    FileInfo fi = disk.info(f, Follow::no);
    if (fi.type != FileType::regular) continue;
    newest = std::max<std::int64_t>(newest, static_cast<std::int64_t>(fi.mtime.tv_sec) * 1000000000 + fi.mtime.tv_nsec);
  }
  return newest;
}

}  // namespace overlay::discover_parts
