#include "checkpoint/manifest.h"

#include <algorithm>
#include <filesystem>
#include <limits>
#include <sstream>
#include <utility>

#include "checkpoint/shard_file.h"  // defines: checksum_hex, parse_checksum_hex
#include "runtime/error.h"

namespace mt::ckpt {
namespace {

using nlohmann::json;
using nlohmann::ordered_json;

std::string format_shape(const Shape& shape) { return json(shape).dump(); }

// One JSON object of the manifest: typed access to its fields, every error naming the file
// (`where`) and the field's path in the document, e.g. "pieces[3].begin".
class Fields {
 public:
  Fields(const json& object, const std::string& where, std::string path)
      : object_(object), where_(where), path_(std::move(path)) {}

  const json& any(const char* key) const {
    auto it = object_.find(key);
    MT_REQUIRE(it != object_.end(), where_, ": field '", name(key), "' is missing");
    return *it;
  }
  std::string string(const char* key) const { return typed(key, v_is_string, "a string").get<std::string>(); }
  std::int64_t integer(const char* key) const { return typed(key, v_is_integer, "an integer").get<std::int64_t>(); }
  std::int64_t count(const char* key) const {
    const std::int64_t v = integer(key);
    MT_REQUIRE(v >= 0, where_, ": field '", name(key), "' is ", v, ", it must not be negative");
    return v;
  }
  const json& object(const char* key) const { return typed(key, v_is_object, "an object"); }
  const json& array(const char* key) const { return typed(key, v_is_array, "an array"); }
  Shape shape(const char* key) const {
    Shape shape;
    for (const json& v : array(key)) {
      MT_REQUIRE(v.is_number_integer(), where_, ": field '", name(key), "' must hold integers, not ", v.dump());
      shape.push_back(v.get<std::int64_t>());
    }
    return shape;
  }
  std::string name(const char* key) const { return path_.empty() ? key : path_ + "." + key; }

 private:
  static bool v_is_string(const json& v) { return v.is_string(); }
  static bool v_is_integer(const json& v) { return v.is_number_integer(); }
  static bool v_is_object(const json& v) { return v.is_object(); }
  static bool v_is_array(const json& v) { return v.is_array(); }

  const json& typed(const char* key, bool (*is)(const json&), const char* kind) const {
    const json& v = any(key);
    MT_REQUIRE(is(v), where_, ": field '", name(key), "' must be ", kind, ", not ", v.dump());
    return v;
  }

  const json& object_;
  const std::string& where_;
  std::string path_;
};

// The elements of `array` as objects, with their path for messages ("files[2]").
template <class Fn>
void for_each_object(const Fields& parent, const char* key, const std::string& where, Fn&& fn) {
  const json& array = parent.array(key);
  for (std::size_t i = 0; i < array.size(); ++i) {
    const std::string path = parent.name(key) + "[" + std::to_string(i) + "]";
    MT_REQUIRE(array[i].is_object(), where, ": ", path, " must be an object, not ", array[i].dump());
    fn(Fields(array[i], where, path), path);
  }
}

template <class Entry>
void sort_unique_by_name(std::vector<Entry>& entries, const std::string& where, const char* what) {
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) { return a.name < b.name; });
  auto dup = std::adjacent_find(entries.begin(), entries.end(),
                                [](const Entry& a, const Entry& b) { return a.name == b.name; });
  MT_REQUIRE(dup == entries.end(), where, ": ", what, " '", dup->name, "' is listed twice");
}

ordered_json slice_json(const Slice& slice) {
  ordered_json boxes = ordered_json::array();
  for (const Box& box : slice.boxes) boxes.push_back({{"offset", box.offset}, {"shape", box.shape}});
  return boxes;
}

// Indented like dump(2), except that each tensor, file and piece takes one line: a manifest lists
// thousands of pieces, and one line each keeps it readable and greppable.
std::string layout_json(const ordered_json& doc) {
  std::string text = "{";
  for (auto it = doc.begin(); it != doc.end(); ++it) {
    text += (it == doc.begin() ? "\n  " : ",\n  ") + ordered_json(it.key()).dump() + ": ";
    if (it->is_array() && !it->empty()) {
      text += "[";
      for (std::size_t i = 0; i < it->size(); ++i) text += (i ? ",\n    " : "\n    ") + (*it)[i].dump();
      text += "\n  ]";
    } else {
      std::string value = it->dump(2);  // raw newlines only between tokens: JSON strings escape theirs
      for (std::size_t at = value.find('\n'); at != std::string::npos; at = value.find('\n', at + 3)) {
        value.replace(at, 1, "\n  ");
      }
      text += value;
    }
  }
  return text + "\n}\n";
}

}  // namespace

std::string Manifest::to_json() const {
  ordered_json out;
  out["format"] = std::string(kFormatName);
  out["format_version"] = format_version;
  out["step"] = step;
  out["model"] = ordered_json(model);
  out["layout"] = ordered_json(layout);
  out["training"] = ordered_json(training);
  out["data"] = ordered_json(data);
  out["rng"] = ordered_json(rng);
  ordered_json& tensors_out = out["tensors"] = ordered_json::array();
  for (const TensorEntry& t : tensors) tensors_out.push_back({{"name", t.name}, {"shape", t.shape}});
  ordered_json& files_out = out["files"] = ordered_json::array();
  for (const FileEntry& f : files) {
    files_out.push_back({{"name", f.name}, {"rank", f.rank}, {"bytes", f.bytes}, {"xxh3", checksum_hex(f.xxh3)}});
  }
  ordered_json& pieces_out = out["pieces"] = ordered_json::array();
  for (const PieceEntry& p : pieces) {
    pieces_out.push_back({{"tensor", p.tensor},
                          {"boxes", slice_json(p.slice)},
                          {"begin", p.slice.begin},
                          {"end", p.slice.end},
                          {"file", p.file},
                          {"byte_offset", p.byte_offset}});
  }
  return layout_json(out);
}

Manifest Manifest::parse(const std::string& text, const std::string& where) {
  json doc;
  try {
    doc = json::parse(text);
  } catch (const json::exception& e) {
    // Not only parse_error: a number beyond double (1e999) is out_of_range.406, which escaped as
    // an nlohmann exception (found with checkpoint/tests/fuzz_full_state.cpp).
    MT_FAIL(where, ": not valid JSON (", e.what(), ")");
  }
  MT_REQUIRE(doc.is_object(), where, ": not a meshtrain checkpoint manifest (not a JSON object)");
  const Fields top(doc, where, "");
  const std::string format = top.string("format");
  MT_REQUIRE(format == kFormatName, where, ": not a meshtrain checkpoint manifest (format '", format, "', expected '",
             kFormatName, "')");

  Manifest m;
  const std::int64_t version = top.integer("format_version");
  MT_REQUIRE(version <= kFormatVersion, where, ": written by a newer meshtrain: format ", version,
             ", this build reads format ", kFormatVersion);
  MT_REQUIRE(version >= 1, where, ": format_version ", version, " is not a version (they start at 1)");
  m.format_version = static_cast<int>(version);
  m.step = top.count("step");
  m.model = top.object("model");
  m.layout = top.object("layout");
  m.training = top.object("training");
  m.data = top.object("data");
  m.rng = top.object("rng");

  for_each_object(top, "tensors", where, [&](const Fields& t, const std::string& path) {
    TensorEntry entry{t.string("name"), t.shape("shape")};
    // Its bytes must fit in int64: sizes, slices and offsets of it are then computed without overflow.
    std::int64_t bytes = sizeof(float);
    for (std::int64_t extent : entry.shape) {
      MT_REQUIRE(extent >= 0, where, ": ", path, " (tensor ", entry.name, ") has a negative extent in its shape ",
                 format_shape(entry.shape));
      MT_REQUIRE(!__builtin_mul_overflow(bytes, extent, &bytes), where, ": ", path, " (tensor ", entry.name,
                 ") has the shape ", format_shape(entry.shape), ", more than 2^63 bytes");
    }
    m.tensors.push_back(std::move(entry));
  });
  sort_unique_by_name(m.tensors, where, "tensor");

  for_each_object(top, "files", where, [&](const Fields& f, const std::string& path) {
    FileEntry entry;
    entry.name = f.string("name");
    MT_REQUIRE(
        !entry.name.empty() && entry.name != "." && entry.name != ".." && entry.name.find('/') == std::string::npos,
        where, ": ", path, " names '", entry.name, "', which is not a plain file name");
    const std::int64_t rank = f.count("rank");
    MT_REQUIRE(rank <= std::numeric_limits<int>::max(), where, ": ", path, " has rank ", rank, ", too large");
    entry.rank = static_cast<int>(rank);
    entry.bytes = f.count("bytes");
    entry.xxh3 = parse_checksum_hex(f.string("xxh3"), where + ": " + f.name("xxh3"));
    m.files.push_back(std::move(entry));
  });
  sort_unique_by_name(m.files, where, "file");

  for_each_object(top, "pieces", where, [&](const Fields& p, const std::string& path) {
    PieceEntry entry;
    entry.tensor = p.string("tensor");
    for_each_object(p, "boxes", where, [&](const Fields& b, const std::string&) {
      entry.slice.boxes.push_back(Box{b.shape("offset"), b.shape("shape")});
    });
    entry.slice.begin = p.integer("begin");
    entry.slice.end = p.integer("end");
    entry.file = p.string("file");
    entry.byte_offset = p.count("byte_offset");

    const TensorEntry* tensor = m.find_tensor(entry.tensor);
    MT_REQUIRE(tensor, where, ": ", path, " names tensor '", entry.tensor, "', which 'tensors' does not list");
    const FileEntry* file = m.find_file(entry.file);
    MT_REQUIRE(file, where, ": ", path, " names file '", entry.file, "', which 'files' does not list");
    validate_slice(tensor->shape, entry.slice, where + ": " + path + " (tensor " + entry.tensor + ")");
    std::int64_t end = 0;
    const bool overflow = __builtin_mul_overflow(entry.slice.numel(), std::int64_t{sizeof(float)}, &end) ||
                          __builtin_add_overflow(entry.byte_offset, end, &end);
    MT_REQUIRE(!overflow && end <= file->bytes, where, ": ", path, " (tensor ", entry.tensor, ") lies at bytes [",
               entry.byte_offset, ", ", overflow ? std::string("beyond 2^63") : std::to_string(end), ") of ", file->name,
               ", beyond its ", file->bytes, " bytes");
    m.pieces.push_back(std::move(entry));
  });
  return m;
}

const TensorEntry* Manifest::find_tensor(std::string_view name) const {
  auto it = std::find_if(tensors.begin(), tensors.end(), [&](const TensorEntry& t) { return t.name == name; });
  return it == tensors.end() ? nullptr : &*it;
}

const FileEntry* Manifest::find_file(std::string_view name) const {
  auto it = std::find_if(files.begin(), files.end(), [&](const FileEntry& f) { return f.name == name; });
  return it == files.end() ? nullptr : &*it;
}

std::vector<const PieceEntry*> Manifest::pieces_of(std::string_view tensor) const {
  std::vector<const PieceEntry*> out;
  for (const PieceEntry& p : pieces) {
    if (p.tensor == tensor) out.push_back(&p);
  }
  return out;
}

}  // namespace mt::ckpt
