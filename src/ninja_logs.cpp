#include "overlay/ninja_logs.hpp"

#include <cstdint>
#include <cstring>
#include <string_view>

namespace overlay {
namespace {

// A record's name, and whether it names one of the outputs: relative to the directory Ninja ran in
// (which holds build.ninja and the logs), or absolute; spelled as the outputs are.
struct Names {
  const fs::path& log;
  const std::set<fs::path>& outputs;
  const Spelling& spell;

  bool has(std::string_view field) const {
    fs::path p{std::string(field)};
    p = (p.is_absolute() ? p : log.parent_path() / p).lexically_normal();
    return outputs.count(spell ? spell(p) : p) != 0;
  }
};

// The fourth tab-separated field of a line of `.ninja_log` (from v3 on, a record's output path).
std::optional<std::string_view> fourth_field(std::string_view line) {
  std::size_t from = 0;
  for (int i = 0; i < 3; ++i) {
    std::size_t tab = line.find('\t', from);
    if (tab == std::string_view::npos) return std::nullopt;
    from = tab + 1;
  }
  std::size_t end = line.find('\t', from);
  if (end == std::string_view::npos) return std::nullopt;
  return line.substr(from, end - from);
}

std::optional<NinjaLogEdit> build_log_without(const std::string& text, const Names& names) {
  if (text.rfind("# ninja log v", 0) != 0) return std::nullopt;
  NinjaLogEdit edit;
  for (std::size_t at = 0; at < text.size();) {
    std::size_t end = std::min(text.find('\n', at), text.size() - 1) + 1;
    std::string_view line(text.data() + at, end - at);
    at = end;
    auto path = line[0] == '#' ? std::nullopt : fourth_field(line);
    if (path && names.has(*path)) {
      ++edit.dropped;
      continue;
    }
    edit.bytes.append(line);
  }
  return edit;
}

std::uint32_t word_at(const std::string& bytes, std::size_t at) {
  std::uint32_t w;
  std::memcpy(&w, bytes.data() + at, sizeof w);  // Ninja writes its host's byte order
  return w;
}

// `.ninja_deps`, versions 3 and 4: "# ninjadeps\n", the version, then records, each a 32-bit size
// (its top bit set for a deps record) and that many bytes. A path record is the path (padded with
// NULs to 4 bytes) and a checksum; its id is its place among path records. A deps record starts
// with its output's id. A record cut short ends the log, as Ninja reads it.
std::optional<NinjaLogEdit> deps_log_without(const std::string& bytes, const Names& names) {
  const std::string_view sig = "# ninjadeps\n";
  const std::size_t start = sig.size() + 4;
  if (bytes.size() < start || std::string_view(bytes).substr(0, sig.size()) != sig) return std::nullopt;
  if (std::uint32_t v = word_at(bytes, sig.size()); v != 3 && v != 4) return std::nullopt;
  NinjaLogEdit edit;
  edit.bytes = bytes.substr(0, start);
  std::set<std::uint32_t> ids;
  std::uint32_t next_id = 0;
  for (std::size_t at = start; bytes.size() - at >= 4;) {
    std::uint32_t head = word_at(bytes, at);
    const bool deps = (head & 0x80000000u) != 0;
    const std::size_t size = head & 0x7fffffffu;
    if (size < 4 || size > bytes.size() - at - 4) break;
    if (deps && ids.count(word_at(bytes, at + 4))) {
      ++edit.dropped;
    } else {
      if (!deps) {
        std::string_view path(bytes.data() + at + 4, size - 4);
        while (!path.empty() && path.back() == '\0') path.remove_suffix(1);
        if (names.has(path)) ids.insert(next_id);
        ++next_id;
      }
      edit.bytes.append(bytes, at, 4 + size);
    }
    at += 4 + size;
  }
  return edit;
}

}  // namespace

bool is_ninja_log(const fs::path& p) { return p.filename() == ".ninja_log" || p.filename() == ".ninja_deps"; }

std::optional<NinjaLogEdit> without_records(const fs::path& log, const std::string& bytes,
                                            const std::set<fs::path>& outputs, const Spelling& spell) {
  const Names names{log, outputs, spell};
  if (log.filename() == ".ninja_deps") return deps_log_without(bytes, names);
  if (log.filename() == ".ninja_log") return build_log_without(bytes, names);
  return std::nullopt;
}

}  // namespace overlay
