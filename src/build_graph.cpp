#include "overlay/build_graph.hpp"

#include <sstream>

#include <nlohmann/json.hpp>

#include "overlay/error.hpp"
#include "overlay/file_ops.hpp"
#include "overlay/process.hpp"

namespace overlay {
namespace {

// A read-only query of Ninja (output captured, two minutes at most).
RunResult ask_ninja(const fs::path& dir, const std::string& tool, const std::string& arg = "") {
  std::vector<std::string> argv = {"ninja", "-C", dir.string(), "-t", tool};
  if (!arg.empty()) argv.push_back(arg);
  RunOptions o;
  o.output = Output::capture;
  o.timeout_s = 120;
  return run_process(argv, o);
}

std::vector<std::string> lines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) out.push_back(l);
  return out;
}

}  // namespace

NinjaNode parse_ninja_query(const std::string& text) {
  NinjaNode n;
  n.known = true;
  std::string section;
  for (const auto& l : lines(text)) {
    if (l.rfind("    ", 0) == 0) {
      std::string item = l.substr(4);
      if (section == "outputs") {
        n.outputs.push_back(item);
      } else if (section == "input") {
        InputKind k = InputKind::explicit_;
        if (item.rfind("|| ", 0) == 0) {
          k = InputKind::order_only;
          item = item.substr(3);
        } else if (item.rfind("| ", 0) == 0) {
          k = InputKind::implicit;
          item = item.substr(2);
        }
        n.inputs.emplace_back(item, k);
      }
    } else if (l.rfind("  ", 0) == 0) {
      std::string head = l.substr(2);
      section = head.substr(0, head.find(':'));
      if (section == "input" && head.find(": ") != std::string::npos) n.rule = head.substr(head.find(": ") + 2);
    }
  }
  return n;
}

NinjaNode ninja_query(const fs::path& dir, const std::string& path) {
  RunResult r = ask_ninja(dir, "query", path);
  return r.ok() ? parse_ninja_query(r.out) : NinjaNode{};
}

std::map<std::string, std::vector<std::string>> parse_ninja_deps(const std::string& text) {
  std::map<std::string, std::vector<std::string>> out;
  std::string current;
  for (const auto& l : lines(text)) {
    if (l.empty()) continue;
    if (l[0] != ' ') {
      current = l.substr(0, l.find(": #deps"));
      out[current];
      continue;
    }
    if (!current.empty()) out[current].push_back(l.substr(l.find_first_not_of(' ')));
  }
  return out;
}

std::map<std::string, std::vector<std::string>> ninja_deps(const fs::path& dir) {
  RunResult r = ask_ninja(dir, "deps");
  return r.ok() ? parse_ninja_deps(r.out) : std::map<std::string, std::vector<std::string>>{};
}

std::vector<CompileCommand> compile_database(DiskReader& disk, const fs::path& path) {
  std::vector<CompileCommand> out;
  nlohmann::json j;
  try {
    if (disk.info(path, Follow::yes).type != FileType::regular) return out;
    j = nlohmann::json::parse(read_small_file(disk, path, 64u << 20));
  } catch (const std::exception& e) {
    (void)e;  // unreadable, or not JSON: no evidence
    return out;
  }
  if (!j.is_array()) return out;
  for (const auto& e : j)
    if (e.is_object() && e.contains("file") && e.contains("directory") && e["file"].is_string() &&
        e["directory"].is_string())
      out.push_back({e["file"].get<std::string>(), e["directory"].get<std::string>()});
  return out;
}

}  // namespace overlay
