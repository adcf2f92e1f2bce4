#include "checkpoint/checkpoint_dir.h"

#include <fcntl.h>   // defines: open, O_RDONLY, O_DIRECTORY, O_CLOEXEC
#include <unistd.h>  // defines: fsync, close

#include <algorithm>
#include <array>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <map>
#include <sstream>
#include <system_error>
#include <thread>

#include "runtime/error.h"

namespace mt::ckpt {
namespace fs = std::filesystem;

namespace {

constexpr const char* kManifestName = "manifest.json";
constexpr const char* kLatestName = "latest";
constexpr const char* kFaultVariable = "MESHTRAIN_FAULT_SAVE";
constexpr std::array<const char*, 6> kFaultPoints = {"shard", "sidecar", "manifest", "rename", "latest", "prune"};

std::string errno_text(int err) { return std::error_code(err, std::generic_category()).message(); }

// A rename or a new file is durable only once the directory holding the entry is fsynced.
void fsync_dir(const fs::path& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  MT_REQUIRE_ENV(fd >= 0, "cannot open directory ", dir.string(), " to sync it: ", errno_text(errno));
  const bool synced = ::fsync(fd) == 0;
  const int err = errno;
  ::close(fd);
  MT_REQUIRE_ENV(synced, "cannot sync directory ", dir.string(), ": ", errno_text(err));
}

// Replaces `path` with `text` all at once: readers see the old file or the whole new one.
void write_file_atomic(const fs::path& path, const std::string& text) {
  const fs::path tmp = fs::path(path) += ".tmp";
  std::FILE* file = std::fopen(tmp.c_str(), "wb");
  MT_REQUIRE_ENV(file, "cannot create ", tmp.string(), ": ", errno_text(errno));
  const bool written = std::fwrite(text.data(), 1, text.size(), file) == text.size() && std::fflush(file) == 0 &&
                       ::fsync(::fileno(file)) == 0;
  const int err = errno;
  const bool closed = std::fclose(file) == 0;
  MT_REQUIRE_ENV(written && closed, "cannot write ", tmp.string(), ": ", errno_text(written ? errno : err));
  std::error_code ec;
  fs::rename(tmp, path, ec);
  MT_REQUIRE_ENV(!ec, "cannot rename ", tmp.string(), " to ", path.filename().string(), ": ", ec.message());
  fsync_dir(path.parent_path());
}

std::string read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  MT_REQUIRE(in, "cannot read ", path.string());
  std::ostringstream text;
  text << in.rdbuf();
  MT_REQUIRE(in, "cannot read ", path.string());
  return text.str();
}

void remove_or_fail(const fs::path& path) {
  std::error_code ec;
  fs::remove(path, ec);
  MT_REQUIRE(!ec, "cannot remove ", path.string(), ": ", ec.message());
}

void remove_all_or_fail(const fs::path& path) {
  std::error_code ec;
  fs::remove_all(path, ec);
  MT_REQUIRE(!ec, "cannot remove ", path.string(), ": ", ec.message());
}

// The entries of `dir` whose names satisfy `keep`, listed before any is touched.
template <class Pred>
std::vector<fs::path> entries_named(const fs::path& dir, Pred&& keep) {
  std::vector<fs::path> out;
  std::error_code ec;
  for (const fs::directory_entry& entry : fs::directory_iterator(dir, ec)) {
    if (keep(entry.path().filename().string())) out.push_back(entry.path());
  }
  MT_REQUIRE(!ec || ec == std::errc::no_such_file_or_directory, "cannot list ", dir.string(), ": ", ec.message());
  return out;
}

bool all_digits(std::string_view text) {
  return !text.empty() && std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// The step of "step_00000100" (exactly as step_dir_name writes it), else nullopt.
std::optional<std::int64_t> parse_step_dir_name(std::string_view name) {
  constexpr std::string_view kPrefix = "step_";
  if (!name.starts_with(kPrefix) || !all_digits(name.substr(kPrefix.size()))) return std::nullopt;
  std::int64_t step = 0;
  const std::string_view digits = name.substr(kPrefix.size());
  if (std::from_chars(digits.data(), digits.data() + digits.size(), step).ec != std::errc{}) return std::nullopt;
  if (step_dir_name(step) != name) return std::nullopt;
  return step;
}

// The step of ".step_00000100" + suffix (".partial", ".old"), else nullopt.
std::optional<std::int64_t> hidden_step(std::string_view name, std::string_view suffix) {
  if (!name.starts_with('.') || !name.ends_with(suffix)) return std::nullopt;
  return parse_step_dir_name(name.substr(1, name.size() - 1 - suffix.size()));
}

bool is_complete(const fs::path& dir) { return fs::is_regular_file(dir / kManifestName); }

// The step ROOT/latest names, nullopt when there is no such file or it names no step directory.
std::optional<std::int64_t> latest_step(const fs::path& root) {
  if (!fs::exists(root / kLatestName)) return std::nullopt;
  std::string name = read_text(root / kLatestName);
  while (!name.empty() && std::isspace(static_cast<unsigned char>(name.back()))) name.pop_back();
  return parse_step_dir_name(name);
}

// --resume of a checkpoint root: the complete checkpoint its `latest` names.
fs::path resolve_latest(const fs::path& root, const std::string& option) {
  const fs::path latest = root / kLatestName;
  MT_REQUIRE(fs::exists(latest), option, ": ", root.string(), " has no checkpoint yet (no ", latest.string(), ")");
  const std::optional<std::int64_t> step = latest_step(root);
  MT_REQUIRE(step, option, ": ", latest.string(), " does not name a step_N directory");
  const fs::path dir = root / step_dir_name(*step);
  // A commit replacing step_N died between moving the old one aside and renaming the new one in:
  // the old one, which `latest` named, is still whole under its aside name.
  const fs::path aside = root / ("." + step_dir_name(*step) + ".old");
  if (!fs::exists(dir) && is_complete(aside)) return aside;
  MT_REQUIRE(is_complete(dir), option, ": ", latest.string(), " names ", dir.string(),
             ", which is not a complete checkpoint (no ", kManifestName, ")");
  return dir;
}

}  // namespace

std::string step_dir_name(std::int64_t step) {
  char name[32];
  std::snprintf(name, sizeof(name), "step_%08lld", static_cast<long long>(step));
  return name;
}

fs::path partial_dir(const fs::path& root, std::int64_t step) {
  return root / ("." + step_dir_name(step) + ".partial");
}

std::string shard_file_name(int rank) {
  char name[32];
  std::snprintf(name, sizeof(name), "rank_%05d.bin", rank);
  return name;
}

std::string sidecar_name(int rank) {
  char name[32];
  std::snprintf(name, sizeof(name), "rank_%05d.json", rank);
  return name;
}

void prepare_partial(const fs::path& root, std::int64_t step) {
  const fs::path partial = partial_dir(root, step);
  std::error_code ec;
  fs::create_directories(root, ec);
  MT_REQUIRE(!ec, "cannot create checkpoint directory ", root.string(), ": ", ec.message());
  remove_all_or_fail(partial);
  fs::create_directory(partial, ec);
  MT_REQUIRE(!ec, "cannot create ", partial.string(), ": ", ec.message());
  fsync_dir(root);
}

// A sidecar is a manifest of one rank's part (its file, tensors and pieces), so one parser checks both.
void write_sidecar(const fs::path& partial, const RankContribution& contribution) {
  Manifest part;
  part.tensors = contribution.tensors;
  if (contribution.file) part.files.push_back(*contribution.file);
  part.pieces = contribution.pieces;
  write_file_atomic(partial / sidecar_name(contribution.rank), part.to_json());
}

Manifest assemble_manifest(const fs::path& partial, int world_size, const Manifest& base) {
  Manifest m = base;
  m.tensors.clear();
  m.files.clear();
  m.pieces.clear();
  std::map<std::string, std::pair<Shape, int>> shapes;  // tensor -> (shape, the first rank giving it)
  for (int rank = 0; rank < world_size; ++rank) {
    const fs::path path = partial / sidecar_name(rank);
    MT_REQUIRE(fs::exists(path), "checkpoint ", partial.string(), ": rank ", rank, " wrote no ", sidecar_name(rank),
               " (it did not finish its part of the save)");
    const Manifest part = Manifest::parse(read_text(path), path.string());
    for (const TensorEntry& t : part.tensors) {
      const auto [it, added] = shapes.try_emplace(t.name, t.shape, rank);
      MT_REQUIRE(added || it->second.first == t.shape, "checkpoint ", partial.string(), ": ranks ", it->second.second,
                 " and ", rank, " give tensor ", t.name, " different shapes");
      if (added) m.tensors.push_back(t);
    }
    for (const FileEntry& f : part.files) {
      MT_REQUIRE(f.rank == rank && f.name == shard_file_name(rank), path.string(), ": lists file ", f.name, " of rank ",
                 f.rank, ", not rank ", rank, "'s ", shard_file_name(rank));
      m.files.push_back(f);
    }
    m.pieces.insert(m.pieces.end(), part.pieces.begin(), part.pieces.end());
  }
  std::sort(m.tensors.begin(), m.tensors.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
  std::sort(m.files.begin(), m.files.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
  return m;
}

fs::path commit_checkpoint(const fs::path& root, const Manifest& manifest, const std::optional<SaveFault>& fault) {
  const fs::path partial = partial_dir(root, manifest.step);
  MT_REQUIRE(fs::is_directory(partial), "cannot commit checkpoint: ", partial.string(), " does not exist");
  write_file_atomic(partial / kManifestName, manifest.to_json());
  auto is_sidecar = [](const std::string& name) { return name.starts_with("rank_") && name.ends_with(".json"); };
  for (const fs::path& sidecar : entries_named(partial, is_sidecar)) remove_or_fail(sidecar);
  fsync_dir(partial);
  maybe_crash(fault, "rename", manifest.step, 0);

  const fs::path final_dir = root / step_dir_name(manifest.step);
  const fs::path aside = root / ("." + step_dir_name(manifest.step) + ".old");
  std::error_code ec;
  if (fs::exists(final_dir)) {
    remove_all_or_fail(aside);
    fs::rename(final_dir, aside, ec);
    MT_REQUIRE(!ec, "cannot move ", final_dir.string(), " aside: ", ec.message());
  }
  fs::rename(partial, final_dir, ec);
  MT_REQUIRE(!ec, "cannot rename ", partial.string(), " to ", final_dir.string(), ": ", ec.message());
  fsync_dir(root);
  remove_all_or_fail(aside);
  return final_dir;
}

void set_latest(const fs::path& root, std::int64_t step) {
  write_file_atomic(root / kLatestName, step_dir_name(step) + "\n");
}

std::vector<std::int64_t> list_checkpoints(const fs::path& root) {
  std::vector<std::int64_t> steps;
  for (const fs::path& dir :
       entries_named(root, [](const std::string& name) { return parse_step_dir_name(name).has_value(); })) {
    if (is_complete(dir)) steps.push_back(*parse_step_dir_name(dir.filename().string()));
  }
  std::sort(steps.begin(), steps.end());
  return steps;
}

std::vector<std::int64_t> prune_checkpoints(const fs::path& root, int keep, const std::optional<SaveFault>& fault) {
  const std::vector<std::int64_t> steps = list_checkpoints(root);
  const std::optional<std::int64_t> latest = latest_step(root);
  std::vector<std::int64_t> removed;
  const std::size_t kept = keep > 0 ? static_cast<std::size_t>(keep) : steps.size();
  for (std::size_t i = 0; i + kept < steps.size(); ++i) {
    if (steps[i] == latest) continue;
    const fs::path dir = root / step_dir_name(steps[i]);
    // Unlisted first: a crash in the middle of remove_all must not leave a manifest naming lost files.
    remove_or_fail(dir / kManifestName);
    fsync_dir(dir);
    maybe_crash(fault, "prune", steps.back(), 0);
    remove_all_or_fail(dir);
    removed.push_back(steps[i]);
  }
  // What killed processes leave behind (nothing here is ever read as a checkpoint, but it would
  // stay forever): partial saves older than the newest checkpoint; step_N directories without a
  // manifest below it (a prune that died in remove_all); .step_N.old (a commit that died before
  // removing the checkpoint it replaced) once step_N is complete again or `latest` names another.
  auto is_debris = [&](const std::string& name) {
    if (steps.empty()) return false;
    if (const auto step = hidden_step(name, ".partial")) return *step < steps.back();
    if (const auto step = hidden_step(name, ".old")) return is_complete(root / step_dir_name(*step)) || *step != latest;
    const auto step = parse_step_dir_name(name);
    return step && *step < steps.back() && !is_complete(root / name);
  };
  for (const fs::path& debris : entries_named(root, is_debris)) remove_all_or_fail(debris);
  return removed;
}

std::vector<std::int64_t> remove_partial_saves(const fs::path& root) {
  std::vector<std::int64_t> removed;
  auto is_partial = [](const std::string& name) { return hidden_step(name, ".partial").has_value(); };
  for (const fs::path& partial : entries_named(root, is_partial)) {
    remove_all_or_fail(partial);
    removed.push_back(*hidden_step(partial.filename().string(), ".partial"));
  }
  std::sort(removed.begin(), removed.end());
  return removed;
}

fs::path resolve_checkpoint(const std::string& spec, const fs::path& root, const std::string& option) {
  if (spec.empty() || spec == "latest") {
    MT_REQUIRE(!root.empty(), option, " latest needs --checkpoint-dir");
    return resolve_latest(root, option);
  }
  const fs::path path = spec;
  MT_REQUIRE(fs::exists(path), option, ": ", spec, " does not exist");
  MT_REQUIRE(fs::is_directory(path), option, ": ", spec, " is not a directory (expected a checkpoint step_N or a ",
             "checkpoint directory holding `latest`)");
  const std::string name = path.filename().empty() ? path.parent_path().filename().string() : path.filename().string();
  const bool partial = name.starts_with('.') && name.ends_with(".partial");
  MT_REQUIRE(!partial || !is_complete(path), option, ": ", spec,
             " is not a complete checkpoint (a save that did not finish: it was never renamed to step_N)");
  if (is_complete(path)) return path;
  if (fs::exists(path / kLatestName)) return resolve_latest(path, option);
  MT_REQUIRE(!name.starts_with("step_") && !name.starts_with(".step_"), option, ": ", spec,
             " is not a complete checkpoint (no ", kManifestName, ": a save that did not finish)");
  MT_FAIL_AS(UsageError, option, ": ", spec, " has no checkpoint yet (no ", (path / kLatestName).string(),
          ") and is not one itself (no ", kManifestName, ")");
}

Manifest read_manifest(const fs::path& step_dir) {
  const fs::path path = step_dir / kManifestName;
  MT_REQUIRE(fs::exists(path), "checkpoint ", step_dir.string(), " has no ", kManifestName,
             " (not a complete checkpoint)");
  return Manifest::parse(read_text(path), path.string());
}

namespace {

// The directory a checkpoint sits in ("CK/step_00000050/" -> "CK").
fs::path parent_of_checkpoint(const fs::path& dir) {
  const fs::path normal = dir.lexically_normal();
  return normal.has_filename() ? normal.parent_path() : normal.parent_path().parent_path();
}

// The step of a checkpoint directory's name: step_N, or .step_N.old (a replaced one still in force).
std::optional<std::int64_t> checkpoint_step(const fs::path& dir) {
  const fs::path normal = dir.lexically_normal();
  const std::string name = (normal.has_filename() ? normal : normal.parent_path()).filename().string();
  if (const auto step = parse_step_dir_name(name)) return step;
  return hidden_step(name, ".old");
}

// "step_00000050" or "step_00000050 to step_00000110 (3 checkpoints)".
std::string describe_steps(const std::vector<std::int64_t>& steps) {
  if (steps.size() == 1) return step_dir_name(steps.front());
  return step_dir_name(steps.front()) + " to " + step_dir_name(steps.back()) + " (" + std::to_string(steps.size()) +
         " checkpoints)";
}

// Unlisted first, as prune does: a crash in the middle of remove_all leaves no manifest naming lost files.
void remove_checkpoint(const fs::path& dir) {
  remove_or_fail(dir / kManifestName);
  fsync_dir(dir);
  remove_all_or_fail(dir);
}

}  // namespace

RunStart plan_run_start(const fs::path& root, const std::optional<std::string>& resume, bool overwrite) {
  RunStart start;
  // auto: the latest checkpoint when there is one (a requeued job), otherwise a fresh start.
  if (resume && (*resume != "auto" || fs::exists(root / kLatestName)))
    start.resume_dir = resolve_checkpoint(*resume == "auto" ? "latest" : *resume, root);
  const std::vector<std::int64_t> steps = list_checkpoints(root);
  std::error_code ec;
  if (!start.resume_dir.empty() && fs::equivalent(parent_of_checkpoint(start.resume_dir), root, ec)) {
    MT_REQUIRE(!overwrite, "--overwrite-checkpoints would delete ", start.resume_dir.string(),
               ", the checkpoint --resume continues from: give one of the two");
    start.resumed_step = checkpoint_step(start.resume_dir);
    MT_CHECK(start.resumed_step, "resolve_checkpoint gave ", start.resume_dir.string(), ", not a step directory");
    for (const std::int64_t step : steps)
      if (step > *start.resumed_step) start.newer_steps.push_back(step);
    return start;
  }
  if (steps.empty()) return start;
  if (overwrite) {
    start.overwritten_steps = steps;
    return start;
  }
  if (start.resume_dir.empty()) {
    MT_FAIL_AS(UsageError, "--checkpoint-dir ", root.string(), " already holds the checkpoints of an earlier run (",
               describe_steps(steps), "): continue that run with --resume, start this one in another ",
               "--checkpoint-dir, or add --overwrite-checkpoints to delete them");
  }
  MT_FAIL_AS(UsageError, "--checkpoint-dir ", root.string(), " holds the checkpoints of another run (",
             describe_steps(steps), "), and --resume takes ", start.resume_dir.string(),
             " from outside it: continue the directory's own run with --resume alone, save into another ",
             "--checkpoint-dir, or add --overwrite-checkpoints to delete its checkpoints");
}

std::vector<std::string> apply_run_start(const fs::path& root, const RunStart& start, const std::string& utc_time) {
  std::vector<std::string> lines;
  if (!start.newer_steps.empty()) {
    const std::string resumed = step_dir_name(*start.resumed_step);
    // `latest` first: a crash half-way leaves it naming the resumed step, the line this run continues.
    set_latest(root, *start.resumed_step);
    const fs::path base = root / kSetAsideDir / (utc_time + "_after_" + resumed);
    fs::path aside = base;
    for (int n = 2; fs::exists(aside); ++n) aside = fs::path(base) += "_" + std::to_string(n);
    std::error_code ec;
    fs::create_directories(aside, ec);
    MT_REQUIRE(!ec, "cannot create ", aside.string(), ": ", ec.message());
    for (const std::int64_t step : start.newer_steps) {
      fs::rename(root / step_dir_name(step), aside / step_dir_name(step), ec);
      MT_REQUIRE(!ec, "cannot move ", (root / step_dir_name(step)).string(), " to ", aside.string(), ": ", ec.message());
    }
    set_latest(aside, start.newer_steps.back());
    fsync_dir(root);
    lines.push_back("resuming " + resumed + " of " + root.string() + ", which held newer checkpoints of a run that went " +
                    "further (" + describe_steps(start.newer_steps) + "): moved to " + aside.string() +
                    ", a checkpoint directory of its own (--checkpoint-dir " + aside.string() +
                    " --resume continues that run); `latest` names " + resumed);
  }
  if (!start.overwritten_steps.empty()) {
    remove_or_fail(root / kLatestName);
    fsync_dir(root);
    for (const std::int64_t step : start.overwritten_steps) remove_checkpoint(root / step_dir_name(step));
    auto is_old = [](const std::string& name) { return hidden_step(name, ".old").has_value(); };
    for (const fs::path& old : entries_named(root, is_old)) remove_all_or_fail(old);
    lines.push_back("--overwrite-checkpoints: deleted the earlier run's checkpoints in " + root.string() + " (" +
                    describe_steps(start.overwritten_steps) + ")");
  }
  return lines;
}

bool SaveFault::fires(const std::string& here, std::int64_t save_step, int my_rank) const {
  return point == here && rank == my_rank && (!step || *step == save_step);
}

std::optional<SaveFault> save_fault_from_env() {
  const char* value = std::getenv(kFaultVariable);
  if (!value || !*value) return std::nullopt;
  const std::string text = value;
  auto malformed = [&](const std::string& why) {
    MT_FAIL(kFaultVariable, "='", text, "': ", why, " (expected [kill-|full-|pause-]POINT[:STEP][@RANK], POINT one of shard, ",
            "sidecar, manifest, rename, latest, prune)");
  };
  auto number = [&](std::string_view digits, const char* what) {
    std::int64_t n = 0;
    if (!all_digits(digits) || std::from_chars(digits.data(), digits.data() + digits.size(), n).ec != std::errc{}) {
      malformed(std::string(what) + " '" + std::string(digits) + "' is not a number");
    }
    return n;
  };

  SaveFault fault;
  std::string_view rest = text;
  if (const auto at = rest.find('@'); at != std::string_view::npos) {
    const std::int64_t rank = number(rest.substr(at + 1), "rank");
    if (rank > std::numeric_limits<int>::max()) malformed("rank " + std::to_string(rank) + " is too large");
    fault.rank = static_cast<int>(rank);
    rest = rest.substr(0, at);
  }
  if (const auto colon = rest.find(':'); colon != std::string_view::npos) {
    fault.step = number(rest.substr(colon + 1), "step");
    rest = rest.substr(0, colon);
  }
  constexpr std::string_view kKillPrefix = "kill-";
  constexpr std::string_view kFullPrefix = "full-";
  constexpr std::string_view kPausePrefix = "pause-";
  for (auto [prefix, flag] : {std::pair{kKillPrefix, &fault.kill}, {kFullPrefix, &fault.full}, {kPausePrefix, &fault.pause}}) {
    if (!rest.starts_with(prefix)) continue;
    *flag = true;
    rest.remove_prefix(prefix.size());
    break;
  }
  fault.point = std::string(rest);
  if (std::find(kFaultPoints.begin(), kFaultPoints.end(), fault.point) == kFaultPoints.end()) {
    malformed("unknown point '" + fault.point + "'");
  }
  return fault;
}

void maybe_crash(const std::optional<SaveFault>& fault, const std::string& here, std::int64_t save_step, int my_rank) {
  if (!fault || !fault->fires(here, save_step, my_rank)) return;
  if (fault->full) {
    MT_FAIL_AS(EnvironmentError, "cannot write the checkpoint of step ", save_step, " at '", here, "': ", errno_text(ENOSPC),
            " (injected fault: ", kFaultVariable, ")");
  }
  const std::string what = fault->pause ? "pauses " + std::to_string(kFaultPauseSeconds) + " s"
                           : fault->kill ? "is killed (SIGKILL)"
                                         : "crashes";
  std::fprintf(stderr, "meshtrain: injected fault: rank %d %s at '%s' of the save of step %lld (%s)\n", my_rank,
               what.c_str(), here.c_str(), static_cast<long long>(save_step), kFaultVariable);
  std::fflush(stderr);
  if (fault->pause) {
    std::this_thread::sleep_for(std::chrono::seconds(kFaultPauseSeconds));
    return;
  }
  if (fault->kill) {
    ::raise(SIGKILL);  // cannot be caught or ignored: the process ends here
    std::abort();      // not reached
  }
  std::_Exit(75);
}

}  // namespace mt::ckpt
