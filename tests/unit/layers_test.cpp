// The stack of layers as the library reads it (layers.hpp), and the manifest keys that record it.
#include "overlay/layers.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "overlay/error.hpp"
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

}  // namespace

TEST(Layers, RecordedChangeIsTheNewestEntrysOverThePristineOfTheFirst) {
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

TEST(Layers, AnUpperIsLiveStaleVanishedOrUnreadable) {
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

TEST(Layers, TheStackOfAFileReadsTheSameFromEveryLayer) {
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

TEST(Layers, TheRecordsKeysRoundTripAndAreValidated) {
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
