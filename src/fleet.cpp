#include "overlay/fleet.hpp"

#include <signal.h>

#include <algorithm>
#include <chrono>

#include "overlay/error.hpp"
#include "overlay/file_ops.hpp"

namespace overlay {
namespace {

std::string signal_name(int sig) {
  return sig == SIGINT    ? "SIGINT"
         : sig == SIGTERM ? "SIGTERM"
         : sig == SIGHUP  ? "SIGHUP"
                          : "signal " + std::to_string(sig);
}

nlohmann::json answer_json(const NodeAnswer& a) {
  if (!a.arrived) return {{"arrived", false}, {"why", a.why}};
  nlohmann::json j = {{"arrived", true}, {"exit", a.exit}, {"document", a.doc}};
  if (a.doc.contains("error")) j["error"] = a.doc["error"];
  return j;
}

void remember(FleetReport& rep, const char* phase, const std::vector<NodeAnswer>& answers) {
  for (const auto& a : answers) rep.phases[a.node][phase] = answer_json(a);
}

double now_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

// Runs argv on `on` (all nodes when empty), adding the wall time to rep.phase_s[phase].
std::vector<NodeAnswer> timed_run(FleetRunner& runner, FleetReport& rep, const char* phase,
                                  const std::vector<std::string>& argv, const std::vector<std::string>& on) {
  double t0 = now_s();
  std::vector<NodeAnswer> answers = runner.run(argv, on);
  rep.phase_s[phase] += now_s() - t0;
  return answers;
}

bool listed(const std::vector<std::string>& v, const std::string& x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

// Runs argv on `nodes`: those not known unreachable in one step, then the others in a step of
// their own (a node Slurm has marked down can make a whole step fail to launch).
std::vector<NodeAnswer> run_reachable_first(FleetRunner& runner, FleetReport& rep, const char* phase,
                                            const std::vector<std::string>& argv, const std::vector<std::string>& nodes,
                                            const std::vector<std::string>& unreachable) {
  std::vector<std::string> first, second;
  for (const auto& n : nodes) (listed(unreachable, n) ? second : first).push_back(n);
  std::vector<NodeAnswer> out;
  if (!first.empty()) out = timed_run(runner, rep, phase, argv, first);
  for (const auto& n : out)
    if (!n.arrived) second.push_back(n.node);
  std::erase_if(out, [](const NodeAnswer& a) { return !a.arrived; });
  if (!second.empty()) {
    std::vector<NodeAnswer> more = timed_run(runner, rep, phase, argv, second);
    out.insert(out.end(), more.begin(), more.end());
  }
  return out;
}

// The one-line verdict of a node's document for one phase.
std::string answer_text(const nlohmann::json& a) {
  if (!a.value("arrived", false)) return "NO RESULT (" + a.value("why", std::string()) + ")";
  if (a.value("exit", -1) == 0) return "ok";
  return "exit " + std::to_string(a.value("exit", -1)) +
         (a.contains("error") && a["error"].is_string() ? ": " + a["error"].get<std::string>() : "");
}

std::string pass_on_summary(const std::string& counterpart, const nlohmann::json& doc) {
  if (counterpart == "verify-native") return doc.value("result", std::string());
  if (counterpart == "revert")
    return "reverted " + std::to_string(doc.value("entries_reverted", 0)) + " of " +
           std::to_string(doc.value("entries", 0)) + " entries";
  std::string s = doc.value("clean", false) ? "clean" : "NOT clean";
  if (!doc.value("exists", true)) return s + " (no overlay there)";
  if (!doc.contains("natives") || !doc["natives"].is_array()) return s;
  s += "; " + std::to_string(doc["natives"].size()) + " native entr" + (doc["natives"].size() == 1 ? "y" : "ies");
  for (const auto& n : doc["natives"]) {
    s += " [" + n.value("id", std::string()) +
         (n.contains("patch_id") && n["patch_id"].is_string() ? " patch " + n["patch_id"].get<std::string>() : "");
    if (n.contains("owner") && n["owner"].is_object())
      s += " owner " + std::to_string(n["owner"].value("pid", 0)) +
           (n["owner"].contains("host") ? "@" + n["owner"].value("host", std::string()) : "") +
           (n["owner"].value("alive", false) ? " alive" : " gone");
    s += "]";
  }
  return s;
}

}  // namespace

std::string new_fleet_id() {
  auto secs =
      std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
  return "f" + std::to_string(secs) + "-" + random_hex(4);
}

const char* to_string(NodeState s) {
  switch (s) {
    case NodeState::applied:
      return "applied";
    case NodeState::rolled_back:
      return "rolled_back";
    case NodeState::failed:
      return "failed";
    case NodeState::unreachable:
      return "unreachable";
    case NodeState::reverted:
      return "reverted";
    case NodeState::clean:
      return "clean";
    case NodeState::not_clean:
      return "not_clean";
  }
  return "?";
}

nlohmann::json FleetReport::to_json() const {
  nlohmann::json nodes = nlohmann::json::object();
  for (const auto& [node, ph] : phases) {
    nodes[node] = ph;
    auto it = state.find(node);
    if (it != state.end()) nodes[node]["state"] = overlay::to_string(it->second);
  }
  return {{"outcome", outcome},
          {"nodes", nodes},
          {"rolled_back", rolled_back},
          {"unreachable", unreachable},
          {"failed", failed},
          {"revert_complete", revert_complete},
          {"phase_s", phase_s},
          {"interrupted", interrupted != 0 ? nlohmann::json(signal_name(interrupted)) : nlohmann::json(nullptr)}};
}

std::string outcome_token(const std::string& outcome) {
  return outcome == "ok" ? "FLEET_OK" : outcome == "partial" ? "FLEET_PARTIAL" : "FLEET_FAILED";
}

std::string tally_outcome(std::size_t nodes, std::size_t went_wrong) {
  return went_wrong == 0 ? "ok" : went_wrong >= nodes ? "failed" : "partial";
}

void conclude_step(FleetReport& rep, int signal, bool reverts, bool clean) {
  rep.interrupted = signal;
  bool undone = !reverts || (rep.revert_complete && clean);
  if (signal != 0 || (rep.outcome == "ok" && !undone)) rep.outcome = "failed";  // stopped: the step as a whole failed
}

nlohmann::json PassOnReport::to_json() const {
  return {{"nodes", nodes}, {"outcome", outcome}, {"failed", failed}, {"unreachable", unreachable}};
}

PassOnReport tally_pass_on(const std::vector<NodeAnswer>& answers) {
  PassOnReport rep;
  for (const auto& a : answers) {
    if (!a.arrived) {
      rep.nodes[a.node] = {{"arrived", false}, {"why", a.why}};
      rep.unreachable.push_back(a.node);
      if (rep.exit == 0) rep.exit = 1;
      continue;
    }
    rep.nodes[a.node] = {{"arrived", true}, {"exit", a.exit}, {"document", a.doc}};
    if (a.ok()) continue;
    rep.failed.push_back(a.node);
    if (rep.exit == 0) rep.exit = a.exit;
  }
  rep.outcome = tally_outcome(answers.size(), rep.failed.size() + rep.unreachable.size());
  return rep;
}

void fleet_revert(FleetRunner& runner, const FleetCommands& cmds, FleetReport& rep) {
  std::vector<NodeAnswer> answers =
      run_reachable_first(runner, rep, "revert", cmds.revert, runner.nodes(), rep.unreachable);
  remember(rep, "revert", answers);
  rep.unreachable.clear();
  for (const auto& a : answers) {
    if (a.ok()) {
      if (rep.state.count(a.node) == 0 || rep.state[a.node] == NodeState::applied)
        rep.state[a.node] = NodeState::reverted;
      continue;
    }
    rep.revert_complete = false;
    if (!a.arrived) {
      rep.state[a.node] = NodeState::unreachable;
      rep.unreachable.push_back(a.node);
    } else {
      rep.state[a.node] = NodeState::failed;
      if (!listed(rep.failed, a.node)) rep.failed.push_back(a.node);
    }
  }
}

FleetReport fleet_apply(FleetRunner& runner, const FleetCommands& cmds, const std::function<bool()>& stop) {
  FleetReport rep;
  std::vector<NodeAnswer> applied = timed_run(runner, rep, "apply", cmds.apply, {});
  remember(rep, "apply", applied);
  bool all_ok = std::all_of(applied.begin(), applied.end(), [](const NodeAnswer& a) { return a.ok(); });
  std::vector<std::string> good;
  for (const auto& a : applied) {
    if (a.ok())
      good.push_back(a.node);
    else if (a.arrived)
      rep.failed.push_back(a.node);
    else
      rep.unreachable.push_back(a.node);
  }
  if (all_ok && stop && stop()) all_ok = false;  // stopped: no verify, every node rolled back
  if (all_ok) {
    std::vector<NodeAnswer> verified = timed_run(runner, rep, "verify", cmds.verify, {});
    remember(rep, "verify", verified);
    for (const auto& a : verified) {
      if (a.ok()) continue;
      all_ok = false;
      std::erase(good, a.node);
      (a.arrived ? rep.failed : rep.unreachable).push_back(a.node);
    }
  }
  if (all_ok) {
    for (const auto& n : runner.nodes()) rep.state[n] = NodeState::applied;
    return rep;
  }
  // Roll back everywhere: a node that failed may have recorded its entry (a failed build keeps
  // it), and one that never answered may have done anything.
  std::vector<std::string> silent = rep.unreachable, failed = rep.failed;
  fleet_revert(runner, cmds, rep);
  rep.failed = failed;
  for (const auto& n : runner.nodes()) {
    if (rep.state[n] != NodeState::reverted) continue;
    if (listed(good, n))
      rep.state[n] = NodeState::rolled_back, rep.rolled_back.push_back(n);
    else
      rep.state[n] = listed(silent, n) ? NodeState::rolled_back : NodeState::failed;
    if (listed(silent, n)) rep.rolled_back.push_back(n);  // silent at apply, reverted now
  }
  rep.outcome = good.empty() && rep.rolled_back.empty() ? "failed" : "partial";
  return rep;
}

bool fleet_clean(FleetRunner& runner, const FleetCommands& cmds, FleetReport& rep) {
  std::vector<NodeAnswer> answers =
      run_reachable_first(runner, rep, "clean", cmds.clean, runner.nodes(), rep.unreachable);
  remember(rep, "clean", answers);
  bool all = true;
  for (const auto& a : answers) {
    if (a.ok()) {
      if (rep.state[a.node] == NodeState::reverted) rep.state[a.node] = NodeState::clean;
      continue;
    }
    all = false;
    rep.state[a.node] = a.arrived ? NodeState::not_clean : NodeState::unreachable;
  }
  return all;
}

std::vector<std::string> phase_lines(const FleetReport& rep, const char* phase) {
  std::vector<std::string> lines;
  for (const auto& [node, ph] : rep.phases)
    if (ph.contains(phase)) lines.push_back("fleet: " + node + " " + phase + " " + answer_text(ph[phase]));
  return lines;
}

std::vector<std::string> node_state_lines(const FleetReport& rep, const std::vector<std::string>& nodes) {
  std::vector<std::string> lines;
  for (const auto& n : nodes) {
    auto it = rep.state.find(n);
    lines.push_back(n + "  " + (it == rep.state.end() ? "-" : to_string(it->second)));
  }
  return lines;
}

std::string node_names(const std::vector<std::string>& v) {
  if (v.empty()) return "-";
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ",") + x;
  return s;
}

std::string outcome_line(const FleetReport& rep, const std::string& what) {
  return outcome_token(rep.outcome) + " " + what + "; failed " + node_names(rep.failed) + "; rolled back " +
         node_names(rep.rolled_back) + "; unreachable " + node_names(rep.unreachable);
}

std::vector<std::string> pass_on_lines(const std::vector<NodeAnswer>& answers, const std::string& counterpart) {
  std::vector<std::string> lines;
  for (const auto& a : answers) {
    if (!a.arrived) {
      lines.push_back("fleet: " + a.node + " " + counterpart + " NO RESULT (" + a.why + ")");
      continue;
    }
    std::string err =
        a.doc.contains("error") && a.doc["error"].is_string() ? ": " + a.doc["error"].get<std::string>() : "";
    lines.push_back("fleet: " + a.node + " " + counterpart + " " + pass_on_summary(counterpart, a.doc) +
                    (a.ok() ? "" : " (exit " + std::to_string(a.exit) + err + ")"));
  }
  return lines;
}

}  // namespace overlay
