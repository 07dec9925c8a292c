// `overlay discover`: prints the builds that compile a file, best first (text or --json).
#include <memory>

#include "overlay/discover.hpp"
#include "overlay/error.hpp"
#include "overlay/words.hpp"

#include "commands.hpp"
#include "output.hpp"

namespace overlay::cli {
namespace {

struct DiscoverFlags {
  std::string target, root = "/";
  std::vector<std::string> cache_roots;
};

nlohmann::json candidate_json(const BuildCandidate& c, const fs::path& target) {
  auto paths = [](const std::vector<fs::path>& v) {
    nlohmann::json a = nlohmann::json::array();
    for (const auto& p : v) a.push_back(p.string());
    return a;
  };
  return {{"kind", c.kind},
          {"build_cmd", c.build_cmds.empty() ? nlohmann::json(nullptr) : nlohmann::json(c.build_cmds.front())},
          {"build_cmds", c.build_cmds},
          {"live", c.live},
          {"build_cwd", c.build_cwd.string()},
          {"artifacts", paths(c.artifacts)},
          {"caches", paths(c.caches)},
          {"evidence", c.evidence},
          {"add_native_args", c.add_native_args(target)}};
}

void print_candidate(std::size_t rank, const BuildCandidate& c, const fs::path& target) {
  std::string cmds;
  for (const auto& cmd : c.build_cmds) cmds += (cmds.empty() ? "" : " && ") + join_words(cmd);
  out_line(std::to_string(rank) + ". " + c.kind + "  " +
           (cmds.empty() ? std::string("no command: built on its next load")
                         : cmds + "  (in " + c.build_cwd.string() + ")"));
  for (const auto& a : c.artifacts) out_line("   artifact  " + a.string());
  for (const auto& d : c.caches) out_line("   cache     " + d.string());
  for (const auto& e : c.evidence) out_line("   evidence  " + e);
  out_line("   add-native --overlay O --patched-file F " + join_words(c.add_native_args(target)));
}

int run_discover(const DiscoverFlags& f) {
  DiscoverRequest req;
  req.target = f.target;
  req.root = f.root;
  for (const auto& r : f.cache_roots) req.cache_roots.emplace_back(r);
  DiscoverReport rep = discover(cli_disk(), req);
  auto& j = result();
  j["target"] = rep.target.string();
  j["candidates"] = nlohmann::json::array();
  for (const auto& c : rep.candidates) j["candidates"].push_back(candidate_json(c, rep.target));
  j["searched"] = rep.searched;
  if (rep.candidates.empty()) {
    std::string where;
    for (const auto& s : rep.searched) where += (where.empty() ? "" : ", ") + s;
    throw Error("no build found that compiles " + rep.target.string() + "; searched: " + where);
  }
  for (std::size_t i = 0; i < rep.candidates.size(); ++i) print_candidate(i + 1, rep.candidates[i], rep.target);
  return kOk;
}

}  // namespace

Handler discover_command(CLI::App& sub, const Globals&) {
  auto f = std::make_shared<DiscoverFlags>();
  sub.add_option("--target", f->target, "Source file to look up")->required();
  sub.add_option("--root", f->root, "Stop the walk up from the file here (default /)");
  sub.add_option("--cache-root", f->cache_roots, "More JIT cache roots to search (repeatable)");
  return [f] { return run_discover(*f); };
}

}  // namespace overlay::cli
