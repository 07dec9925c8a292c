// The stack of layers as the library reads it (stack.hpp), and the manifest keys that record it.
#include "overlay/stack.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "overlay/error.hpp"
#include "overlay/hash.hpp"
#include "overlay/holds.hpp"
#include "overlay/manifest.hpp"

#include "test_util.hpp"

using namespace overlay;
using namespace overlay::test;

namespace {

std::string hex(char c) { return std::string(64, c); }

json source(const std::string& path, char before, char after, const std::optional<LayerRef>& layer = std::nullopt) {
  json s = {{"install_path", path},
            {"backup", "_native_backup/x/src"},
            {"sha256", hex(before)},
            {"patched_sha256", hex(after)}};
  if (layer) s["layer"] = *layer;
  return s;
}

json entry(const std::string& id, std::vector<json> sources, std::vector<json> artifacts = {}) {
  return {{"id", id}, {"sources", sources}, {"artifacts", artifacts}, {"caches", json::array()}};
}

void write_manifest(const fs::path& ov, const json& doc) { write_file(ov / kManifestName, doc.dump()); }

// Why a claim of `ov` on `file` would be refused now, its records read afresh.
std::optional<std::string> taken(HoldRegistry& reg, const fs::path& file, const fs::path& ov,
                                 const std::optional<fs::path>& over = std::nullopt) {
  ManifestCache records(real_disk());
  return why_taken(reg, records, file, ov, over);
}

}  // namespace

TEST(Stack, RecordedChangeIsTheNewestEntrysOverThePristineOfTheFirst) {
  Manifest m = parse_manifest(
      json{{"natives", {entry("e1", {source("/i/k.cpp", 'a', 'b')}), entry("e2", {source("/i/k.cpp", 'b', 'c')})}}}
          .dump());
  auto c = recorded_change(m, "/i/k.cpp");
  ASSERT_TRUE(c);
  EXPECT_EQ(c->entry, "e2");
  EXPECT_EQ(c->after, hex('c'));
  EXPECT_EQ(c->pristine, hex('a'));
  EXPECT_FALSE(recorded_change(m, "/i/other.cpp"));

  // Layered: the pristine bytes are the layer's, not the lower's patched ones it backed up.
  Manifest up = parse_manifest(
      json{{"natives", {entry("u1", {source("/i/k.cpp", 'c', 'd', LayerRef{"/ov/low", "e2", hex('a')})})}}}.dump());
  EXPECT_EQ(recorded_change(up, "/i/k.cpp")->pristine, hex('a'));
  // An artifact's rebuilt bytes are not recorded; one that did not exist was absent before.
  Manifest art = parse_manifest(json{
      {"natives",
       {entry("a1", {}, {json{{"path", "/i/lib.so"}, {"existed", false}, {"backup", nullptr}, {"sha256", nullptr}}})}}}
                                    .dump());
  auto ac = recorded_change(art, "/i/lib.so");
  ASSERT_TRUE(ac);
  EXPECT_TRUE(ac->artifact);
  EXPECT_FALSE(ac->after);
  EXPECT_EQ(ac->pristine, "");
}

TEST(Stack, AnUpperIsLiveStaleVanishedOrUnreadable) {
  TempDir t;
  std::string low = (t / "low").string();
  LayerRef on_low{low, "e1", hex('a')};
  write_manifest(t / "live", {{"natives", {entry("u1", {source("/i/k.cpp", 'b', 'c', on_low)})}}});
  write_manifest(t / "stale", {{"natives", json::array()}});
  write_file(t / "junk" / kManifestName, "{not json");
  json lower = {{"natives", {entry("e1", {source("/i/k.cpp", 'a', 'b')})}}, {"layers_above", json::array()}};
  for (const char* u : {"live", "stale", "gone", "junk"})
    lower["layers_above"].push_back(UpperRef{(t / u).string(), "u1", {"/i/k.cpp"}});
  write_manifest(t / "low", lower);
  ManifestCache cache(real_disk());
  auto ups = uppers_of(cache, *load_manifest(real_disk(), t / "low"));
  ASSERT_EQ(ups.size(), 4u);
  EXPECT_EQ(ups[0].state, RefState::live);
  EXPECT_EQ(ups[0].on_entries, std::vector<std::string>{"e1"});
  EXPECT_EQ(ups[1].state, RefState::stale);
  EXPECT_EQ(ups[2].state, RefState::vanished);
  EXPECT_EQ(ups[3].state, RefState::unreadable);
  EXPECT_TRUE(ups[0].blocks());
  EXPECT_FALSE(ups[1].blocks());
  EXPECT_FALSE(ups[2].blocks());
  EXPECT_TRUE(ups[3].blocks());  // nothing can be told of it: refusing is the safe side
  EXPECT_EQ(lower_state(cache, on_low, "/i/k.cpp"), RefState::live);
  EXPECT_EQ(lower_state(cache, on_low, "/i/else.cpp"), RefState::stale);
  EXPECT_EQ(lower_state(cache, LayerRef{(t / "gone").string(), "x", ""}, "/i/k.cpp"), RefState::vanished);
}

TEST(Stack, TheStackOfAFileReadsTheSameFromEveryLayer) {
  TempDir t;
  std::string a = (t / "a").string(), b = (t / "b").string(), c = (t / "c").string();
  write_manifest(t / "a", {{"natives", {entry("ea", {source("/i/k.cpp", '0', '1')})}},
                           {"layers_above", {UpperRef{b, "eb", {"/i/k.cpp"}}}}});
  write_manifest(t / "b", {{"natives", {entry("eb", {source("/i/k.cpp", '1', '2', LayerRef{a, "ea", hex('0')})})}},
                           {"layers_above", {UpperRef{c, "ec", {"/i/k.cpp"}}}}});
  write_manifest(t / "c", {{"natives", {entry("ec", {source("/i/k.cpp", '2', '3', LayerRef{b, "eb", hex('0')})})}}});
  for (const std::string& from : {a, b, c}) {
    ManifestCache cache(real_disk());
    FileStack s = stack_of(cache, from, *load_manifest(real_disk(), from), "/i/k.cpp");
    ASSERT_EQ(s.size(), 3u) << from;
    EXPECT_EQ(s[0].overlay, a);
    EXPECT_EQ(s[1].overlay, b);
    EXPECT_EQ(s[2].overlay, c);
    EXPECT_EQ(s[2].entry, "ec");
    EXPECT_EQ(describe_stack(s), a + " [ea] < " + b + " [eb] < " + c + " [ec]");
  }
  fs::remove_all(t / "a");
  ManifestCache cache(real_disk());
  FileStack s = stack_of(cache, c, *load_manifest(real_disk(), c), "/i/k.cpp");
  ASSERT_EQ(s.size(), 3u);
  EXPECT_EQ(s[0].state, RefState::vanished);
  EXPECT_NE(describe_stack(s).find("[ea] (vanished)"), std::string::npos);
}

TEST(Stack, TheRecordsKeysRoundTripAndAreValidated) {
  json doc = {{"natives", {entry("e1", {source("/i/k.cpp", 'a', 'b', LayerRef{"/ov/low", "n1-ab", ""})})}},
              {"layers_above", {UpperRef{"/ov/up", "n2", {"/i/k.cpp"}}}},
              {"fold_out", {{"into", "/ov/acc"}, {"fold", "f1-ab"}, {"entries", {"e1"}}}},
              {"folds_in", {{{"from", "/ov/c"}, {"fold", "f2"}, {"entries", {"e9"}}, {"state", "committed"}}}}};
  Manifest m = parse_manifest(doc.dump());
  ASSERT_TRUE(m.natives[0].sources[0].layer);
  EXPECT_EQ(m.natives[0].sources[0].layer->pristine_sha256, "");
  EXPECT_EQ(m.layers_above.at(0).paths, std::vector<std::string>{"/i/k.cpp"});
  ASSERT_TRUE(m.fold_out);
  EXPECT_EQ(m.fold_out->overlay, "/ov/acc");
  ASSERT_EQ(m.folds_in.size(), 1u);
  EXPECT_TRUE(m.folds_in[0].committed);
  Manifest again = parse_manifest(serialize_manifest(m));
  EXPECT_EQ(again.natives[0].sources[0].layer, m.natives[0].sources[0].layer);
  EXPECT_EQ(again.layers_above, m.layers_above);
  EXPECT_EQ(again.fold_out, m.fold_out);
  EXPECT_EQ(again.folds_in, m.folds_in);

  auto refused = [&](const std::function<void(json&)>& spoil, const std::string& key) {
    json d = doc;
    spoil(d);
    try {
      parse_manifest(d.dump());
      ADD_FAILURE() << "accepted: " << d.dump();
    } catch (const ManifestError& e) {
      EXPECT_NE(std::string(e.what()).find(key), std::string::npos) << e.what();
    }
  };
  refused([](json& d) { d["natives"][0]["sources"][0]["layer"]["overlay"] = "relative/ov"; }, "layer.overlay");
  refused([](json& d) { d["natives"][0]["sources"][0]["layer"]["entry"] = "../x"; }, "layer.entry");
  refused([](json& d) { d["natives"][0]["sources"][0]["layer"]["pristine_sha256"] = "zz"; }, "pristine_sha256");
  refused([](json& d) { d["layers_above"][0]["paths"] = {"rel"}; }, "layers_above[0].paths[0]");
  refused([](json& d) { d["folds_in"][0]["state"] = "maybe"; }, "folds_in[0].state");
  refused([](json& d) { d["fold_out"] = {{"fold", "f"}}; }, "fold_out");
}

// Claiming files (claim_files): one owner per file, and a layer on the lower where --over names it.
TEST(StackClaim, LiveHoldRefusesOthersStaleHoldDoesNot) {
  TempDir t;
  HoldRegistry reg(real_disk(), t / "state");
  fs::path file = t / "inst/k.cu";
  (void)claim_files(reg, {file}, t / "ov1", false, 1);
  EXPECT_EQ(*reg.holder(file), t / "ov1");
  // ov1 records nothing yet: the hold is stale and another overlay may take it.
  (void)claim_files(reg, {file}, t / "ov2", false, 1);
  record_native_change(t / "ov2", file);
  try {
    (void)claim_files(reg, {file}, t / "ov1", false, 1);
    FAIL() << "a live hold was taken";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("held by overlay " + (t / "ov2").string()), std::string::npos) << e.what();
  }
  (void)claim_files(reg, {file}, t / "ov2", false, 1);  // the holder itself may stack
  (void)claim_files(reg, {file}, t / "ov1", true, 1);   // --force
  EXPECT_EQ(*reg.holder(file), t / "ov1");
}

TEST(StackClaim, AClaimInProgressMakesAnotherWaitThenGiveBackRestoresThePreviousHolder) {
  TempDir t;
  HoldRegistry reg(real_disk(), t / "state");
  fs::path file = t / "inst/k.cu";
  record_native_change(t / "ov0", file);
  (void)claim_files(reg, {file}, t / "ov0", false, 1);
  {
    HoldClaim forced = claim_files(reg, {file}, t / "ov1", true, 1);  // ov1 records nothing yet
    // Its hold looks stale (ov1's manifest names no change), yet while the claim lives no
    // other acquire may judge the path: it waits, here past its timeout.
    EXPECT_THROW((void)claim_files(reg, {file}, t / "ov2", false, 0.2), LockTimeout);
    reg.give_back(forced, t / "ov1", 1);  // ov1's add-native failed before recording
  }
  EXPECT_EQ(*reg.holder(file), t / "ov0");
  HoldClaim fresh = claim_files(reg, {t / "free"}, t / "ov3", false, 1);
  reg.give_back(fresh, t / "ov3", 1);
  EXPECT_FALSE(reg.holder(t / "free"));
}

TEST(StackClaim, ALowersRevertLeavesTheHoldOfACandidateStillClaimingTheFile) {
  TempDir t;
  HoldRegistry reg(real_disk(), t / "state");
  fs::path file = t / "inst/k.cu", low = t / "low", cand = t / "cand";
  record_native_change(low, file);
  (void)claim_files(reg, {file}, low, false, 1);
  Manifest reverted;  // the lower's record once its entry is reverted
  {
    HoldClaim claim = claim_files(reg, {file}, cand, false, 1, low);  // layered on low; cand records nothing yet
    ASSERT_EQ(*reg.holder(file), cand);
    ASSERT_EQ(reg.hold_of(file)->under.at(0).overlay, low);
    reg.release({file}, low, reverted, 1);
    EXPECT_EQ(*reg.holder(file), cand) << "a claim in progress lost its hold";
  }
  // The claim ended without a record (the candidate's add-native died): its overlay is gone, the
  // layer under it reverted; the hold goes.
  reg.release({file}, low, reverted, 1);
  EXPECT_FALSE(reg.holder(file));
}

TEST(StackClaim, ALayerUnderAHolderThatNeverRecordedStillHoldsTheFile) {
  TempDir t;
  HoldRegistry reg(real_disk(), t / "state");
  fs::path file = t / "inst/k.cu", low = t / "low";
  write_file(file, "low's\n");
  (void)claim_files(reg, {file}, low, false, 1);
  record_native_change(low, file);
  {
    HoldClaim killed = claim_files(reg, {file}, t / "cand", false, 1, low);
  }  // killed before its record: nothing given back
  ASSERT_EQ(*reg.holder(file), t / "cand");
  auto why = taken(reg, file, t / "other");
  ASSERT_TRUE(why);
  EXPECT_NE(why->find("held by overlay " + low.string()), std::string::npos) << *why;
  EXPECT_FALSE(taken(reg, file, t / "other", low)) << "stacking on it is what --over asks";
}

TEST(StackClaim, ALiveLayerUnderATopThatLetGoHoldsTheFileInsteadOfACopy) {
  TempDir t;
  HoldRegistry reg(real_disk(), t / "state");
  fs::path file = t / "inst/k.cu", acc = t / "acc", copy = t / "archive/acc";
  write_file(file, "accepted\n");
  (void)claim_files(reg, {file}, acc, false, 1);
  record_native_change(acc, file);
  { HoldClaim killed = claim_files(reg, {file}, t / "cand", false, 1, acc); }  // killed before its record
  record_native_change(copy, file);                                            // cp -a of the accepted overlay
  auto instead = reg.held_instead(file, copy);
  ASSERT_TRUE(instead) << "the copy's revert would write over the accepted overlay's change";
  EXPECT_EQ(*instead, acc);
  EXPECT_FALSE(reg.held_instead(file, acc)) << "the accepted overlay itself is no copy";
}

TEST(StackClaim, ALayerAboveThatNoLongerRecordsTheFileGoesWithTheRevertUnderIt) {
  TempDir t;
  HoldRegistry reg(real_disk(), t / "state");
  fs::path file = t / "inst/k.cu", low = t / "low", up = t / "up";
  write_file(file, "pristine\n");
  record_native_change(low, file);
  (void)claim_files(reg, {file}, low, false, 1);
  (void)claim_files(reg, {file}, up, false, 1, low);
  record_native_change(up, file);
  save_manifest(real_disk(), up, Manifest{});  // the upper's revert, killed before its release
  ASSERT_EQ(*reg.holder(file), up);
  reg.release({file}, low, Manifest{}, 1);
  EXPECT_FALSE(reg.holder(file));
}

TEST(StackClaim, AVanishedMiddleLayerKeepsNoHoldOverThePristineFile) {
  TempDir t;
  HoldRegistry reg(real_disk(), t / "state");
  fs::path file = t / "inst/k.cu", a = t / "a", b = t / "b", c = t / "c";
  write_file(file, "pristine\n");
  (void)claim_files(reg, {file}, a, false, 1, std::nullopt);
  record_native_change(a, file);
  write_file(file, "a's\n");
  (void)claim_files(reg, {file}, b, false, 1, a);
  record_native_change(b, file);
  write_file(file, "b's\n");
  (void)claim_files(reg, {file}, c, false, 1, b);
  record_native_change(c, file);
  fs::remove_all(b);                          // the harness
  save_manifest(real_disk(), a, Manifest{});  // a reverted (the file pristine again)
  write_file(file, "pristine\n");
  save_manifest(real_disk(), c, Manifest{});  // c reverted: its bytes gave way
  reg.release({file}, c, Manifest{}, 1);
  EXPECT_FALSE(reg.holder(file)) << "a vanished layer kept a hold over the pristine file";
}

TEST(StackClaim, ALayerMadeAgainAtItsPathKeepsTheHoldOverBytesThatAreNotPristine) {
  for (bool pristine : {false, true}) {
    TempDir t;
    HoldRegistry reg(real_disk(), t / "state");
    fs::path file = t / "inst/k.cu", acc = t / "acc", cand = t / "cand";
    write_file(file, "pristine\n");
    (void)claim_files(reg, {HeldFile(file, sha256_hex(std::string("acc's\n")))}, acc, false, 1);
    record_native_change(acc, file);
    write_file(file, "acc's\n");
    (void)claim_files(reg, {HeldFile(file, sha256_hex(std::string("cand's\n")))}, cand, false, 1, acc);
    record_native_change(cand, file);
    write_file(file, "cand's\n");
    fs::remove_all(acc);  // the harness
    fs::create_directories(acc);
    save_manifest(real_disk(), acc, Manifest{});            // made again: records none of the file
    write_file(file, pristine ? "pristine\n" : "acc's\n");  // cand reverted: what it found, or a reinstall
    save_manifest(real_disk(), cand, Manifest{});
    reg.release({file}, cand, Manifest{}, 1);
    if (pristine) {
      EXPECT_FALSE(reg.holder(file)) << "a hold kept over the pristine file";
      continue;
    }
    ASSERT_TRUE(reg.holder(file)) << "the hold on bytes whose original is lost was dropped";
    EXPECT_EQ(*reg.holder(file), acc);
    auto o = reg.orphan_of(file);
    ASSERT_TRUE(o);
    EXPECT_EQ(o->file_state, "patched") << o->describe();
  }
}

TEST(StackClaim, ALostOriginalUnderAVanishedHolderIsStillLost) {
  TempDir t;
  HoldRegistry reg(real_disk(), t / "state");
  fs::path file = t / "inst/k.cu", acc = t / "acc", cand = t / "cand", other = t / "other";
  write_file(file, "pristine\n");
  (void)claim_files(reg, {HeldFile(file, sha256_hex(std::string("acc's\n")))}, acc, false, 1);
  record_native_change(acc, file);
  write_file(file, "acc's\n");
  { HoldClaim killed = claim_files(reg, {HeldFile(file, sha256_hex(std::string("cand's\n")))}, cand, false, 1, acc); }
  fs::remove_all(acc);  // the harness, with the only copy of the original
  auto why = taken(reg, file, other);
  ASSERT_TRUE(why) << "the accepted overlay's bytes passed for the original";
  EXPECT_NE(why->find(acc.string()), std::string::npos) << *why;
  EXPECT_THROW((void)claim_files(reg, {file}, other, false, 1), Error);
  EXPECT_NO_THROW((void)claim_files(reg, {file}, other, true, 1)) << "--force stays the loss path";
}
