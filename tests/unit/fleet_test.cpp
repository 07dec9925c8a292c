// The fleet's decisions (src/fleet.cpp) and the coordinator's steps (src/fleet_step.cpp) against a
// scripted FleetRunner: which nodes are reverted, what the outcome says, how srun's labelled
// output is read; and a second engine, the scripted runner with a lease engine of its own.
#include "overlay/fleet.hpp"

#include <cstdlib>
#include <functional>

#include <gtest/gtest.h>

#include "overlay/fleet_step.hpp"
#include "overlay/lease.hpp"
#include "overlay/liveness.hpp"
#include "overlay/slurm.hpp"

using namespace overlay;

namespace {

// Each call answers per node from `script(phase, node)`: an exit status, or -1 for "no answer".
class ScriptedRunner : public FleetRunner {
 public:
  explicit ScriptedRunner(std::function<int(const std::string&, const std::string&)> s) : script_(std::move(s)) {}
  const std::vector<std::string>& nodes() const override { return nodes_; }
  std::vector<NodeAnswer> run(const std::vector<std::string>& argv, const std::vector<std::string>& on) override {
    calls.push_back({argv.front(), on.empty() ? nodes_ : on});
    std::vector<NodeAnswer> out;
    for (const auto& n : calls.back().second) {
      int rc = script_(argv.front(), n);
      if (rc < 0)
        out.push_back({n, false, -1, nullptr, "no result"});
      else
        out.push_back({n, true, rc, {{"exit", rc}}, ""});
    }
    return out;
  }
  std::string describe() const override { return "scripted"; }
  std::vector<std::pair<std::string, std::vector<std::string>>> calls;

 private:
  std::vector<std::string> nodes_ = {"n1", "n2", "n3"};
  std::function<int(const std::string&, const std::string&)> script_;
};

FleetCommands commands() { return {{"apply"}, {"verify"}, {"revert"}, {"clean"}}; }

}  // namespace

TEST(Fleet, AllAppliedAndVerifiedIsOkWithoutRevert) {
  ScriptedRunner r([](const std::string&, const std::string&) { return 0; });
  FleetReport rep = fleet_apply(r, commands());
  EXPECT_EQ(rep.outcome, "ok");
  ASSERT_EQ(r.calls.size(), 2u);  // apply, verify: nothing else
  for (const auto& n : r.nodes()) EXPECT_EQ(rep.state[n], NodeState::applied);
}

TEST(Fleet, OneBuildFailingRevertsEveryNode) {
  ScriptedRunner r(
      [](const std::string& phase, const std::string& node) { return phase == "apply" && node == "n2" ? 1 : 0; });
  FleetReport rep = fleet_apply(r, commands());
  EXPECT_EQ(rep.outcome, "partial");
  EXPECT_EQ(rep.failed, std::vector<std::string>{"n2"});
  EXPECT_EQ(rep.rolled_back, (std::vector<std::string>{"n1", "n3"}));
  EXPECT_TRUE(rep.revert_complete);
  ASSERT_EQ(r.calls.size(), 2u);  // no verify after a failed apply
  EXPECT_EQ(r.calls[1].first, "revert");
  EXPECT_EQ(r.calls[1].second.size(), 3u);  // n2 too: its failed build keeps its entry recorded
  EXPECT_EQ(rep.state["n2"], NodeState::failed);
  EXPECT_EQ(rep.state["n1"], NodeState::rolled_back);
}

TEST(Fleet, VerifyFailingOnOneNodeRevertsAll) {
  ScriptedRunner r(
      [](const std::string& phase, const std::string& node) { return phase == "verify" && node == "n3" ? 2 : 0; });
  FleetReport rep = fleet_apply(r, commands());
  EXPECT_EQ(rep.outcome, "partial");
  EXPECT_EQ(rep.failed, std::vector<std::string>{"n3"});
  EXPECT_EQ(r.calls.back().first, "revert");
}

TEST(Fleet, SilentNodeIsRevertedInAStepOfItsOwn) {
  int revert_calls = 0;
  ScriptedRunner r([&](const std::string& phase, const std::string& node) {
    if (phase == "revert") ++revert_calls;
    return phase == "apply" && node == "n2" ? -1 : 0;
  });
  FleetReport rep = fleet_apply(r, commands());
  EXPECT_EQ(rep.outcome, "partial");
  ASSERT_EQ(r.calls.size(), 3u);  // apply, revert on n1+n3, revert on n2
  EXPECT_EQ(r.calls[1].second, (std::vector<std::string>{"n1", "n3"}));
  EXPECT_EQ(r.calls[2].second, std::vector<std::string>{"n2"});
  EXPECT_TRUE(rep.revert_complete);  // n2 answered its revert
  EXPECT_TRUE(rep.unreachable.empty());
  EXPECT_EQ(rep.state["n2"], NodeState::rolled_back);
}

TEST(Fleet, NodeSilentThroughTheRollbackLeavesItIncompleteAndNamed) {
  ScriptedRunner r([](const std::string& phase, const std::string& node) {
    if (node == "n3") return -1;
    return phase == "apply" && node == "n1" ? 1 : 0;
  });
  FleetReport rep = fleet_apply(r, commands());
  EXPECT_FALSE(rep.revert_complete);
  EXPECT_EQ(rep.unreachable, std::vector<std::string>{"n3"});
  EXPECT_EQ(rep.failed, std::vector<std::string>{"n1"});
  EXPECT_EQ(rep.rolled_back, std::vector<std::string>{"n2"});
  EXPECT_EQ(rep.state["n3"], NodeState::unreachable);
  nlohmann::json j = rep.to_json();
  EXPECT_EQ(j["nodes"]["n3"]["state"], "unreachable");
  EXPECT_FALSE(j["nodes"]["n3"]["revert"]["arrived"].get<bool>());
}

TEST(Fleet, EveryNodeFailingIsFailed) {
  ScriptedRunner r([](const std::string& phase, const std::string&) { return phase == "apply" ? 1 : 0; });
  EXPECT_EQ(fleet_apply(r, commands()).outcome, "failed");
}

TEST(Fleet, CleanCheckNamesTheNodeThatIsNot) {
  ScriptedRunner r(
      [](const std::string& phase, const std::string& node) { return phase == "clean" && node == "n1" ? 1 : 0; });
  FleetReport rep = fleet_apply(r, commands());
  fleet_revert(r, commands(), rep);
  EXPECT_FALSE(fleet_clean(r, commands(), rep));
  EXPECT_EQ(rep.state["n1"], NodeState::not_clean);
  EXPECT_EQ(rep.state["n2"], NodeState::clean);
}

TEST(Fleet, LabelledOutputIsReadPerTask) {
  std::string out =
      " 1: {\"exit\":2,\"node\":\"b\",\"error\":\"x\"}\n"
      "0: not json\n"
      "0: {\"exit\":0,\"node\":\"a\"}\n"
      "2: {\"exit\":0,\"no\n"  // cut short: the node's answer never arrived whole
      "garbage\n"
      "7: {\"exit\":0}\n";  // no such task
  auto a = answers_from_labelled(out, {"a", "b", "c"}, "srun: exit 1");
  ASSERT_EQ(a.size(), 3u);
  EXPECT_TRUE(a[0].ok());
  EXPECT_TRUE(a[1].arrived);
  EXPECT_EQ(a[1].exit, 2);
  EXPECT_FALSE(a[2].arrived);
  EXPECT_EQ(a[2].why, "srun: exit 1");
}

TEST(Fleet, ALongDocumentCutIntoLabelledPiecesIsJoined) {
  std::string out = "1: {\"exit\":0,\"nod\n0: {\"exit\":3}\n1: e\":\"b\",\"pad\":\"xx\"}\n";
  auto a = answers_from_labelled(out, {"a", "b"}, "none");
  ASSERT_TRUE(a[1].arrived);
  EXPECT_EQ(a[1].doc["pad"], "xx");
  EXPECT_EQ(a[0].exit, 3);
}

TEST(Fleet, TheNodesOwnNameWinsOverTheTaskOrder) {
  auto a = answers_from_labelled("0: {\"exit\":0,\"node\":\"c\"}\n", {"a", "b", "c"}, "none");
  EXPECT_FALSE(a[0].arrived);
  EXPECT_TRUE(a[2].arrived);
}

TEST(Fleet, IdsAreDistinctSafeNames) {
  std::string a = new_fleet_id(), b = new_fleet_id();
  EXPECT_NE(a, b);
  EXPECT_EQ(a.find_first_not_of("f0123456789abcdef-"), std::string::npos) << a;
}

// The lines a step prints are the library's, from its report: per phase, per node, the verdict.
TEST(Fleet, TheReportsLinesNameEachNodeAndTheVerdict) {
  ScriptedRunner r([](const std::string& phase, const std::string& node) {
    return phase == "apply" && node == "n2" ? 1 : phase == "revert" && node == "n3" ? -1 : 0;
  });
  FleetReport rep = fleet_apply(r, commands());
  std::vector<std::string> apply = phase_lines(rep, "apply");
  ASSERT_EQ(apply.size(), 3u);
  EXPECT_EQ(apply[1], "fleet: n2 apply exit 1");
  EXPECT_EQ(phase_lines(rep, "revert").back(), "fleet: n3 revert NO RESULT (no result)");
  EXPECT_EQ(node_state_lines(rep, r.nodes()).front(), "n1  rolled_back");
  EXPECT_EQ(outcome_line(rep, "f1 on scripted"),
            "FLEET_PARTIAL f1 on scripted; failed n2; rolled back n1; unreachable n3");
  std::vector<NodeAnswer> answers = {
      {"n1", true, 0, {{"exit", 0}, {"result", "FRESH_BUILD_OK"}}, ""},
      {"n2", true, 2, {{"exit", 2}, {"result", "FRESH_BUILD_FAIL"}, {"error", "stale"}}, ""},
      {"n3", false, -1, nullptr, "srun: exit 1"}};
  EXPECT_EQ(pass_on_lines(answers, "verify-native"),
            (std::vector<std::string>{"fleet: n1 verify-native FRESH_BUILD_OK",
                                      "fleet: n2 verify-native FRESH_BUILD_FAIL (exit 2: stale)",
                                      "fleet: n3 verify-native NO RESULT (srun: exit 1)"}));
}

namespace {

// With ScriptedRunner, a whole engine: what a Kubernetes or Ray one would be, in one file.
class ScriptedLeases : public LeaseEngine {
 public:
  std::string name() const override { return "scripted"; }
  std::string lease_here() const override { return here; }
  LeaseState state(const std::string& id) const override {
    if (id == held) return LeaseState::held;
    return answers ? LeaseState::ended : LeaseState::unknown;
  }
  std::string describe(const std::string& id) const override { return "scripted lease " + id; }
  std::string node_name() const override { return "scripted-node"; }
  std::string env_prefix() const override { return "SCRIPTED_"; }
  std::string here, held;
  bool answers = true;
};

ScriptedLeases& scripted_leases() {
  static ScriptedLeases leases;
  add_lease_engine(leases);
  return leases;
}

struct Said {
  std::vector<std::string> lines, notes;
  nlohmann::json doc = nlohmann::json::object();
  StepOutput out() {
    return {[this](const std::string& l) { lines.push_back(l); }, [this](const std::string& n) { notes.push_back(n); },
            doc, 2, 2};
  }
};

std::string flag_value(const std::vector<std::string>& argv, const std::string& flag) {
  auto it = std::find(argv.begin(), argv.end(), flag);
  return it == argv.end() || it + 1 == argv.end() ? "" : *(it + 1);
}

}  // namespace

// The coordinator owns every node's entry under its lease: a node reads the owner back from its
// command line with the same lease, and the entry lives exactly as long as the engine says the
// lease holds, whichever host asks.
TEST(FleetStep, ASecondEngineIsARunnerAndALeaseEngine) {
  std::string slurm_job = std::getenv("SLURM_JOB_ID") ? std::getenv("SLURM_JOB_ID") : "";
  ::unsetenv("SLURM_JOB_ID");  // run inside a Slurm job, its lease would be this process's (Slurm is first)
  ScriptedLeases& leases = scripted_leases();
  leases.here = leases.held = "job-7";
  Owner me = coordinator_owner();
  EXPECT_EQ(me.lease, (Lease{"scripted", "job-7"}));
  EXPECT_EQ(me.host, this_host());
  FleetStepRequest req{{}, "/ov", false, {"--target", "/opt/k.cu"}};  // no node binary: argv[0] is the verb
  FleetCommands cmds = fleet_step_commands(req, "f1-0000abcd", me);
  EXPECT_EQ(cmds.apply.front(), "add-native");
  EXPECT_EQ(flag_value(cmds.apply, "--fleet-id"), "f1-0000abcd");
  EXPECT_EQ(flag_value(cmds.revert, "--patch-id"), "f1-0000abcd");
  auto on_node = parse_owner_text(flag_value(cmds.apply, "--fleet-owner"));
  ASSERT_TRUE(on_node);
  EXPECT_EQ(on_node->lease, me.lease);
  EXPECT_EQ(on_node->pid, me.pid);

  ScriptedRunner r([](const std::string&, const std::string&) { return 0; });
  Said said;
  FleetStepEnd end = run_fleet_apply(r, cmds, "f1-0000abcd", said.out());
  EXPECT_EQ(end.exit, 0);
  EXPECT_TRUE(end.revert_complete);
  EXPECT_EQ(said.lines.front(), "fleet f1-0000abcd: apply on scripted");
  EXPECT_EQ(said.lines.back(), "FLEET_OK f1-0000abcd on scripted; failed -; rolled back -; unreachable -");
  EXPECT_EQ(said.doc["engine"], "scripted");
  EXPECT_EQ(said.doc["outcome"], "ok");

  on_node->host = "another-host-" + std::to_string(::getpid());
  EXPECT_EQ(owner_liveness(*on_node), Liveness::alive);
  EXPECT_EQ(describe_owner(*on_node),
            "coordinator pid " + std::to_string(me.pid) + " on " + on_node->host + " (scripted lease job-7)");
  leases.held = "another job";
  EXPECT_EQ(owner_liveness(*on_node), Liveness::gone);
  leases.answers = false;  // the engine cannot be asked: another host's entry is left alone
  EXPECT_EQ(owner_liveness(*on_node), Liveness::unseen);
  leases.answers = true;
  EXPECT_TRUE(is_engine_variable("SCRIPTED_JOB"));
  EXPECT_FALSE(is_engine_variable("SCRIPTEDX"));
  leases.here.clear();
  if (!slurm_job.empty()) ::setenv("SLURM_JOB_ID", slurm_job.c_str(), 1);
}

// A lease of an engine this binary lacks is kept, never asked, never reverted on a guess.
TEST(FleetStep, ALeaseOfAnEngineNotLinkedIsUnknown) {
  Owner o{1, 1, "another-host-" + std::to_string(::getpid()), {"ray", "raysubmit_1"}};
  EXPECT_EQ(lease_state(o.lease), LeaseState::unknown);
  EXPECT_EQ(owner_liveness(o), Liveness::unseen);
  EXPECT_EQ(describe_owner(o), "coordinator pid 1 on " + o.host + " (ray lease raysubmit_1)");
  nlohmann::json j = o;
  EXPECT_EQ(j["ray_job"], "raysubmit_1");
}

TEST(FleetStep, ExitsSayWhatANodeMayStillHold) {
  scripted_leases();
  FleetCommands cmds = fleet_step_commands({{}, "/ov", true, {}}, "f1-0000abcd", coordinator_owner());
  EXPECT_EQ(cmds.apply.front(), "apply");
  Said failed;
  ScriptedRunner one_fails(
      [](const std::string& phase, const std::string& node) { return phase == "apply" && node == "n2" ? 1 : 0; });
  FleetStepEnd end = run_fleet_apply(one_fails, cmds, "f1-0000abcd", failed.out());
  EXPECT_EQ(end.exit, 1);
  EXPECT_TRUE(end.revert_complete);
  Said lost;
  ScriptedRunner revert_lost([](const std::string& phase, const std::string& node) {
    if (phase == "verify-native" && node == "n1") return 2;
    return phase == "revert" && node == "n3" ? -1 : 0;
  });
  end = run_fleet_apply(revert_lost, cmds, "f1-0000abcd", lost.out());
  EXPECT_EQ(end.exit, to_int(StepExit::revert_incomplete));
  EXPECT_FALSE(end.revert_complete);
  EXPECT_EQ(lost.doc["revert_complete"], false);
}

// fleet exec: the reference and the candidate run here; the candidate's status is the step's,
// once every node was reverted and found clean.
TEST(FleetStep, ExecPassesTheCandidatesStatusOnceEveryNodeIsClean) {
  scripted_leases();
  FleetCommands cmds = fleet_step_commands({{}, "/ov", false, {}}, "f1-0000abcd", coordinator_owner());
  ScriptedRunner r([](const std::string&, const std::string&) { return 0; });
  FleetExecRequest x{{"sh", "-c", "exit 3"}, true, 0, ""};
  Said said;
  FleetStepEnd end = run_fleet_exec(r, cmds, "f1-0000abcd", x, said.out());
  EXPECT_EQ(end.exit, 3);
  ASSERT_EQ(r.calls.size(), 4u);  // apply, verify, revert, clean
  EXPECT_EQ(r.calls[2].first, "revert");
  EXPECT_EQ(said.doc["ref"]["status"], 3);
  EXPECT_EQ(said.doc["cand"]["status"], 3);
  ScriptedRunner dirty([](const std::string& phase, const std::string&) { return phase == "status" ? 1 : 0; });
  Said d;
  EXPECT_EQ(run_fleet_exec(dirty, cmds, "f1-0000abcd", x, d.out()).exit, to_int(StepExit::not_clean));
}
