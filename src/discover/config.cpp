// The pipeline's task config: a config.yaml up the tree whose top-level `compile_command` is the
// build (no graph to read: no artifacts, ranked last).
#include "overlay/file_ops.hpp"

#include "parts.hpp"

namespace overlay::discover_parts {
namespace {

// The value of a top-level `compile_command:` key: a plain or quoted scalar, or a | / > block.
std::optional<std::pair<std::string, int>> yaml_compile_command(const std::string& text) {
  auto lines = lines_of(text);
  const std::string key = "compile_command:";
  for (std::size_t i = 0; i < lines.size(); ++i) {
    if (lines[i].rfind(key, 0) != 0) continue;
    std::string v = lines[i].substr(key.size());
    v.erase(0, v.find_first_not_of(" \t"));
    if (auto hash = v.find(" #"); hash != std::string::npos && v[0] != '"' && v[0] != '\'') v.erase(hash);
    while (!v.empty() && (v.back() == ' ' || v.back() == '\t' || v.back() == '\r')) v.pop_back();
    if (v == "|" || v == ">" || v == "|-" || v == ">-") {
      std::string block;
      for (std::size_t k = i + 1; k < lines.size() && (lines[k].empty() || lines[k][0] == ' '); ++k) {
        std::string l = lines[k];
        l.erase(0, l.find_first_not_of(' '));
        if (!l.empty()) block += (block.empty() ? "" : " ") + l;
      }
      return std::make_pair(block, static_cast<int>(i + 1));
    }
    if (v.size() >= 2 && (v[0] == '"' || v[0] == '\'') && v.back() == v[0]) {
      std::string inner = v.substr(1, v.size() - 2), out;
      for (std::size_t k = 0; k < inner.size(); ++k) {
        if (v[0] == '\'' && inner[k] == '\'' && k + 1 < inner.size() && inner[k + 1] == '\'')
          ++k;
        else if (v[0] == '"' && inner[k] == '\\' && k + 1 < inner.size())
          ++k;
        out += inner[k];
      }
      v = out;
    }
    return std::make_pair(v, static_cast<int>(i + 1));
  }
  return std::nullopt;
}

}  // namespace

std::optional<BuildCandidate> config_candidate(DiskReader& disk, const fs::path& dir) {
  fs::path cfg = dir / "config.yaml";
  if (disk.info(cfg, Follow::yes).type != FileType::regular) return std::nullopt;
  auto cmd = yaml_compile_command(read_small_file(disk, cfg, kMaxTextBytes));
  if (!cmd) return std::nullopt;
  auto argv = words_or_none(cmd->first);
  if (argv.empty()) return std::nullopt;
  BuildCandidate c;
  c.kind = "config";
  c.build_cmds.push_back(argv);
  c.build_cwd = dir;
  c.evidence.push_back(cfg.string() + ":" + std::to_string(cmd->second) + ": compile_command: " + cmd->first);
  return c;
}

}  // namespace overlay::discover_parts
