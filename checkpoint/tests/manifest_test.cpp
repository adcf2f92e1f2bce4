// The manifest: JSON that parses back to the same Manifest, in the documented field order, and
// one clear error per kind of broken manifest, each naming the file.
#include "checkpoint/manifest.h"  // defines: Manifest, kFormatVersion

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "runtime/error.h"
#include "tests/test_helpers.h"  // defines: error_of, contains

namespace mt::ckpt {
namespace {

using nlohmann::json;
using testing::contains;
using testing::error_of;

const std::string kWhere = "ckpt/step_00000004/manifest.json";

Manifest sample() {
  Manifest m;
  m.step = 4;
  m.model = {{"n_layer", 2}, {"n_embd", 8}};
  m.layout = {{"tp", 2}, {"pp", 1}, {"dp", 1}};
  m.training = {{"lr", 6e-4}, {"note", "two\nlines"}};
  m.data = {{"position", 4096}};
  m.rng = {{"seed", 1337}};
  m.tensors = {{"param/b", {8}}, {"param/scale", {}}, {"param/w", {4, 8}}};
  m.files = {{"rank_00000.bin", 0, 64 + 4 * 25, 0x0123456789abcdefull},
             {"rank_00001.bin", 1, 64 + 4 * 16, 0xfedcba9876543210ull}};
  m.pieces = {
      {"param/w", Slice{{Box{{0, 0}, {4, 4}}}, 0, 16}, "rank_00000.bin", 64},
      {"param/b", Slice::whole({8}), "rank_00000.bin", 64 + 4 * 16},
      {"param/scale", Slice::whole({}), "rank_00000.bin", 64 + 4 * 24},
      {"param/w", Slice{{Box{{0, 4}, {4, 4}}}, 2, 10}, "rank_00001.bin", 64},
  };
  return m;
}

json sample_json() { return json::parse(sample().to_json()); }

std::string parse_error(const json& doc) {
  return error_of([&] { Manifest::parse(doc.dump(), kWhere); });
}

TEST(Manifest, RoundTrips) {
  const Manifest m = sample();
  const Manifest back = Manifest::parse(m.to_json(), kWhere);
  EXPECT_EQ(back.format_version, kFormatVersion);
  EXPECT_EQ(back.step, 4);
  EXPECT_EQ(back.model, m.model);
  EXPECT_EQ(back.layout, m.layout);
  EXPECT_EQ(back.training, m.training);
  EXPECT_EQ(back.data, m.data);
  EXPECT_EQ(back.rng, m.rng);
  EXPECT_EQ(back.tensors, m.tensors);
  EXPECT_EQ(back.files, m.files);
  EXPECT_EQ(back.pieces, m.pieces);
}

TEST(Manifest, JsonHasTheDocumentedFieldsInOrder) {
  const auto doc = nlohmann::ordered_json::parse(sample().to_json());
  std::vector<std::string> keys;
  for (auto it = doc.begin(); it != doc.end(); ++it) keys.push_back(it.key());
  EXPECT_EQ(keys, (std::vector<std::string>{"format", "format_version", "step", "model", "layout", "training", "data",
                                            "rng", "tensors", "files", "pieces"}));
  EXPECT_EQ(doc["format"], "meshtrain-checkpoint");
  EXPECT_EQ(doc["files"][0]["xxh3"], "0123456789abcdef");
  // One line per piece: thousands of them stay readable.
  EXPECT_TRUE(contains(sample().to_json(),
                       "\n    "
                       R"({"tensor":"param/w","boxes":[{"offset":[0,4],"shape":[4,4]}],"begin":2,"end":10,)"
                       R"("file":"rank_00001.bin","byte_offset":64})"
                       "\n  ]\n}\n"));
}

TEST(Manifest, Lookups) {
  const Manifest m = sample();
  ASSERT_NE(m.find_tensor("param/w"), nullptr);
  EXPECT_EQ(m.find_tensor("param/w")->shape, (Shape{4, 8}));
  EXPECT_EQ(m.find_tensor("param/nope"), nullptr);
  ASSERT_NE(m.find_file("rank_00001.bin"), nullptr);
  EXPECT_EQ(m.find_file("rank_00001.bin")->rank, 1);
  EXPECT_EQ(m.find_file("rank_00002.bin"), nullptr);
  const auto pieces = m.pieces_of("param/w");
  ASSERT_EQ(pieces.size(), 2u);
  EXPECT_EQ(pieces[0], &m.pieces[0]);
  EXPECT_EQ(pieces[1], &m.pieces[3]);
}

TEST(ManifestParse, NotJson) {
  const std::string message = error_of([] { Manifest::parse("{\"format\": ", kWhere); });
  EXPECT_TRUE(contains(message, kWhere + ": not valid JSON")) << message;
}

// A number beyond double is the parser's out_of_range, not its parse_error: it escaped as an
// nlohmann exception (found with fuzz_full_state).
TEST(ManifestParse, NumberBeyondDouble) {
  const std::string message = error_of([] { Manifest::parse("{\"format\": 1e999}", kWhere); });
  EXPECT_TRUE(contains(message, kWhere + ": not valid JSON")) << message;
}

TEST(ManifestParse, NotAnObject) {
  EXPECT_TRUE(contains(parse_error(json::array()), kWhere + ": not a meshtrain checkpoint manifest"));
}

TEST(ManifestParse, AnotherFormat) {
  json doc = sample_json();
  doc["format"] = "safetensors";
  EXPECT_TRUE(contains(parse_error(doc), "format 'safetensors', expected 'meshtrain-checkpoint'"));
}

TEST(ManifestParse, NewerFormatVersion) {
  json doc = sample_json();
  doc["format_version"] = kFormatVersion + 1;
  EXPECT_EQ(parse_error(doc), kWhere + ": written by a newer meshtrain: format 2, this build reads format 1");
}

TEST(ManifestParse, ZeroFormatVersion) {
  json doc = sample_json();
  doc["format_version"] = 0;
  EXPECT_TRUE(contains(parse_error(doc), "format_version 0 is not a version"));
}

TEST(ManifestParse, MissingField) {
  json doc = sample_json();
  doc.erase("step");
  EXPECT_EQ(parse_error(doc), kWhere + ": field 'step' is missing");
  doc = sample_json();
  doc["pieces"][1].erase("byte_offset");
  EXPECT_EQ(parse_error(doc), kWhere + ": field 'pieces[1].byte_offset' is missing");
}

TEST(ManifestParse, MistypedField) {
  json doc = sample_json();
  doc["step"] = "4";
  EXPECT_EQ(parse_error(doc), kWhere + ": field 'step' must be an integer, not \"4\"");
  doc = sample_json();
  doc["model"] = json::array();
  EXPECT_TRUE(contains(parse_error(doc), "field 'model' must be an object"));
  doc = sample_json();
  doc["tensors"][0]["shape"] = {4, 8.5};
  EXPECT_TRUE(contains(parse_error(doc), "field 'tensors[0].shape' must hold integers, not 8.5"));
  doc = sample_json();
  doc["pieces"][0]["boxes"][0] = 3;
  EXPECT_TRUE(contains(parse_error(doc), "pieces[0].boxes[0] must be an object"));
  doc = sample_json();
  doc["files"][0]["bytes"] = -1;
  EXPECT_TRUE(contains(parse_error(doc), "field 'files[0].bytes' is -1, it must not be negative"));
}

TEST(ManifestParse, BadChecksum) {
  json doc = sample_json();
  doc["files"][1]["xxh3"] = "0123456789abcdeg";
  EXPECT_TRUE(contains(parse_error(doc), "files[1].xxh3: checksum '0123456789abcdeg' is not 16 hex digits"));
}

TEST(ManifestParse, FileNameOutsideTheDirectory) {
  json doc = sample_json();
  doc["files"][1]["name"] = "../rank_00001.bin";
  doc["pieces"][3]["file"] = "../rank_00001.bin";
  EXPECT_TRUE(contains(parse_error(doc), "'../rank_00001.bin', which is not a plain file name"));
}

TEST(ManifestParse, NegativeTensorExtent) {
  json doc = sample_json();
  doc["tensors"][0]["shape"] = {-8};
  EXPECT_TRUE(contains(parse_error(doc), "(tensor param/b) has a negative extent"));
}

TEST(ManifestParse, PieceOfUnknownTensor) {
  json doc = sample_json();
  doc["pieces"][2]["tensor"] = "param/gone";
  EXPECT_EQ(parse_error(doc), kWhere + ": pieces[2] names tensor 'param/gone', which 'tensors' does not list");
}

TEST(ManifestParse, PieceInUnknownFile) {
  json doc = sample_json();
  doc["pieces"][2]["file"] = "rank_00007.bin";
  EXPECT_EQ(parse_error(doc), kWhere + ": pieces[2] names file 'rank_00007.bin', which 'files' does not list");
}

TEST(ManifestParse, PieceWithInvalidSlice) {
  json doc = sample_json();
  doc["pieces"][3]["boxes"][0]["offset"] = {0, 5};
  const std::string message = parse_error(doc);
  EXPECT_TRUE(contains(message, kWhere + ": pieces[3] (tensor param/w): box 0")) << message;
  EXPECT_TRUE(contains(message, "does not lie inside the tensor [4, 8]")) << message;
  doc = sample_json();
  doc["pieces"][3]["end"] = 17;
  EXPECT_TRUE(contains(parse_error(doc), "range [2, 17) is not within the 16 elements"));
}

TEST(ManifestParse, PieceBeyondItsFile) {
  json doc = sample_json();
  doc["files"][1]["bytes"] = 64 + 4 * 7;
  EXPECT_EQ(parse_error(doc),
            kWhere + ": pieces[3] (tensor param/w) lies at bytes [64, 96) of rank_00001.bin, beyond its 92 bytes");
}

// Found with fuzz_manifest.cpp: sizes near 2^63 overflowed (undefined behaviour) instead of being refused.
TEST(ManifestParse, SizesBeyondInt64) {
  json doc = sample_json();
  doc["tensors"][0]["shape"] = {std::int64_t{1} << 62, 4};
  EXPECT_EQ(parse_error(doc),
            kWhere + ": tensors[0] (tensor param/b) has the shape [4611686018427387904,4], more than 2^63 bytes");
  doc = sample_json();
  doc["pieces"][2]["byte_offset"] = std::numeric_limits<std::int64_t>::max();
  EXPECT_EQ(parse_error(doc), kWhere + ": pieces[2] (tensor param/scale) lies at bytes [9223372036854775807, "
                                       "beyond 2^63) of rank_00000.bin, beyond its 164 bytes");
  // Eight boxes of the whole of a 2^60-element tensor: their sum overflows.
  doc = sample_json();
  doc["tensors"][0]["shape"] = {std::int64_t{1} << 60};
  doc["pieces"][1]["boxes"] = json::array();
  for (int b = 0; b < 8; ++b) doc["pieces"][1]["boxes"].push_back({{"offset", {0}}, {"shape", {std::int64_t{1} << 60}}});
  EXPECT_TRUE(contains(parse_error(doc), ": pieces[1] (tensor param/b): its 8 boxes hold more elements than an int64 counts"))
      << parse_error(doc);
}

TEST(ManifestParse, DuplicateNames) {
  json doc = sample_json();
  doc["tensors"].push_back(doc["tensors"][1]);
  EXPECT_TRUE(contains(parse_error(doc), kWhere + ": tensor 'param/scale' is listed twice"));
  doc = sample_json();
  doc["files"].push_back(doc["files"][0]);
  EXPECT_TRUE(contains(parse_error(doc), kWhere + ": file 'rank_00000.bin' is listed twice"));
}

}  // namespace
}  // namespace mt::ckpt
